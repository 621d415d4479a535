// Types of the polylimit npm package (CommonJS and ESM).

/** A policy, the same object in every language (SPEC §2; snake_case fields). */
export interface Policy {
  /** The algorithm (default `token_bucket`); `concurrency` limits requests in flight instead of a rate. */
  algorithm?: 'token_bucket' | 'leaky_bucket' | 'gcra' | 'fixed_window' | 'sliding_window_log' | 'sliding_window_counter' | 'concurrency';
  /** `"10/s"`, `"100/min"`, `"5/10s"`, `"1000 per hour"` (every algorithm but `concurrency`). */
  rate?: string;
  /** `concurrency`: the most requests in flight per key. */
  limit?: number;
  /** `concurrency`: how long an unreleased slot is held (default `"60s"`). */
  lease?: Duration;
  /** Bucket capacity for `token_bucket`, `leaky_bucket` and `gcra` (default: the rate's count). */
  burst?: number;
  /** Another name for `burst`. */
  capacity?: number;
  /** `token_bucket`: `continuous` (default), or `interval` (whole tokens per elapsed period). */
  refill?: 'continuous' | 'interval';
  /** `leaky_bucket`: `police` rejects the overflow (default), `shape` admits it with a delay (`delayMs`). */
  mode?: 'police' | 'shape';
  /** Shape mode: the longest delay granted (default `(burst-1)` times the emission interval). */
  max_delay?: string;
  /** What decides while the store is down: `local` (default), `fail_open` or `fail_closed`. */
  on_store_error?: 'local' | 'fail_open' | 'fail_closed';
  /** Blocks a key for `cooldowns[i]` after `threshold` denials `within` a time (docs/features/penalties.md). */
  penalty?: {
    /** Denials within `within` that block the key. */
    threshold: number;
    /** The time the `threshold` denials must fall within (`"1m"`). */
    within: string;
    /** The block lengths of each step (`["10s", "1m", "10m"]`); the last one repeats. */
    cooldowns: string[];
    /** The level drops one step for each `forget_after` without a denial. */
    forget_after?: string;
  };
  /** Adaptive limits per key (docs/features/adaptive.md). */
  adaptive?: {
    /** The short window a key's rate is measured over (default 2 min). */
    window?: Duration;
    /** The baseline's horizon, a multiple of `window` (default 10 min). */
    horizon?: Duration;
    /** A key is anomalous above `factor` times its baseline… */
    factor?: number;
    /** …and at least this rate (`"1/s"`). */
    floor?: string;
    /** The rate a mitigated key keeps at least (`"1/s"`). */
    minRate?: string;
    /** How alerts show the key: its `dimensions` with `ip` and `key` hashed (default), the whole key `hash`ed, or `raw`. */
    alertKeys?: 'dimensions' | 'hash' | 'raw';
  };
  /** The label in headers, metrics and store keys (default `default`; 1 to 128 bytes). */
  name?: string;
  /** Admit from a local share, taken from the store at most once per `interval` per key (docs/features/sync.md). */
  sync?: {
    /** How often a process takes a share from the store, per key (default 100 ms). */
    interval?: Duration;
    /** How much of the limit each take is (default a tenth of it, at least 1). */
    share?: number;
  };
}

/** An alert of an adaptive policy: a key became anomalous (`action: 'limit'`) or recovered (`'restore'`). */
export interface AnomalyEvent {
  /** Which alert: the key became anomalous, or it recovered. */
  event: 'polylimit.anomalous' | 'polylimit.recovered';
  /** The name of the adaptive policy that raised it. */
  policy: string;
  /** The key as the policy's `alertKeys` says: by default a rule's dimensions with `ip` and `key` values hashed. */
  key: string;
  /** Requests per second over the short window. */
  rate: number;
  /** The key's baseline, requests per second. */
  baseline: number;
  /** `limit`: the key is held to `limitedTo`; `restore`: back to its policy's limit. */
  action: 'limit' | 'restore';
  /** The budget while anomalous, requests per second (0 on recovery). */
  limitedTo: number;
  /** When it was raised (ms since the epoch). */
  atMs: number;
  /** Alerts of this policy dropped by the storm limit since the last one delivered. */
  suppressed: number;
}

/** One set of rate-limit headers (docs/features/headers.md). */
export type HeaderSet = 'legacy' | 'ietf' | 'both' | 'none' | 'draft-6' | 'draft-7' | 'draft-8';
/** A duration: ms as a number, or text like `"100ms"`, `"30s"`, `"1m30s"`. */
export type Duration = number | string;

/**
 * The core's one options list, in JavaScript's names (snake_case names are accepted too). Options
 * beside `rules`/`rulesFile` override the document's.
 */
export interface LimiterOptions {
  /** The limiter's one policy (for several, `policies`). */
  policy?: Policy;
  /** Called with every alert of the adaptive policies; a throw or rejection is counted, never reaches a request. */
  onAnomaly?: (event: AnomalyEvent) => void | Promise<void>;
  /** Adaptive alerts also write one JSON line each to stderr: true or 'stderr' (default), false or 'off'. */
  anomalyLog?: boolean | 'stderr' | 'off';
  /** Several policies, decided as one atomic decision: none is charged when one denies. */
  policies?: Policy[] | Record<string, Policy>;
  /** Key dimensions of the one rule built from `policy`/`policies`: `ip`, `route`, `user`, `header:<name>`, … Default `['ip']`. */
  key?: string | string[];
  /**
   * Which responses the one rule built from `policy` charges (express-rate-limit's
   * skipSuccessfulRequests / skipFailedRequests): `'all'` (default), `'failed'` (status >= 400, or
   * no response), `'successful'` (< 400), or classes and codes (`['4xx', 503]`). Settled after the
   * response by the middlewares (`Limiter.complete`).
   */
  count?: Count;
  /** A rules document (SPEC §6): its YAML or JSON text, or the object. */
  rules?: string | object;
  /** A rules file path (YAML or JSON). */
  rulesFile?: string;
  /**
   * With `rulesFile`: reload the file when it changes, polled every second (`true`) or every
   * `watch` (ms, or text like '500ms'); a bad file keeps the old rules (docs/features/reload.md).
   */
  watch?: boolean | number | string;
  /** `memory` (default), `redis://…`, `rediss://…`, `redis+cluster://h1:p1,h2:p2`, `redis+sentinel://s1:p1,s2:p2/<service>`. */
  store?: string;
  /**
   * Multi-region quotas: region name → its store, or `{ store, share }` (equal shares by default;
   * shares sum to 1). Each region's store holds its share of every policy; a region out of quota
   * borrows from another, never above the global limit. The local region's store is the limiter's.
   */
  regions?: Record<
    string,
    | string
    | {
        /** The region's store URL. */
        store: string;
        /** The region's part of every limit, from 0 to 1 (default: equal parts). */
        share?: number;
      }
  >;
  /** This process's region: one of `regions`. */
  region?: string;
  /** The first segment of every store key (default `polylimit`). */
  prefix?: string;
  /** The most keys the memory store (and the local fallback) holds (default 1,000,000). */
  maxKeys?: number;
  /** Every check reads the key's per-key override (setOverride); default false. */
  overrides?: boolean;
  /** Redis: deny a key the store denied locally until its retry time, with no store call; true (10,000 keys) or the most keys held. */
  blockCache?: boolean | number;
  /** Per store call (default 100 ms). */
  timeout?: Duration;
  /** Opening a store connection: TCP, TLS and the handshake (default 1 s). */
  connectTimeout?: Duration;
  /** PEM file of the CA signing the Redis servers' certificates (`rediss…`); default: the public web CAs. */
  tlsCa?: string;
  /** Consecutive store failures that open the circuit breaker (default 5). */
  failureThreshold?: number;
  /** How long the breaker stays open before it probes the store again (default 30 s). */
  cooldown?: Duration;
  /** Good probes that close the breaker again (default 3). */
  halfOpenProbes?: number;
  /** express-rate-limit style: a fixed window of `windowMs` with `limit` (or `max`) requests. */
  windowMs?: Duration;
  /** express-rate-limit style: requests per `windowMs` (default 5). */
  limit?: number;
  /** Another name for `limit`. */
  max?: number;
  /**
   * Rate-limit headers. `draft-6` | `draft-7` | `draft-8`: byte for byte express-rate-limit's
   * `standardHeaders` modes; add the legacy X-RateLimit-* with `['legacy', 'draft-7']`.
   */
  headers?: HeaderSet | HeaderSet[];
  /** express-rate-limit style: `true` is `ietf`; a draft name is that draft's exact headers. */
  standardHeaders?: boolean | 'draft-6' | 'draft-7' | 'draft-8';
  /** express-rate-limit style: the X-RateLimit-* headers on or off (default true). */
  legacyHeaders?: boolean;
  /** Proxies whose forwarding header names the client: CIDRs, and `unix` for a proxy on a Unix socket. */
  trustedProxies?: string[];
  /** The one header read from a trusted proxy (the other is ignored). Default `x-forwarded-for`. */
  forwardedHeader?: 'x-forwarded-for' | 'forwarded';
  /** The prefix length IPv6 clients are keyed by (default 64). */
  ipv6Subnet?: number;
  /** CIDRs and typed keys: `user:<id>`, `api_key:<key>`, `key:<key>`. */
  allowlist?: string[];
  /** CIDRs and typed keys: `user:<id>`, `api_key:<key>`, `key:<key>`. */
  denylist?: string[];
  /** Decide, count and set headers, but never refuse (default false). */
  shadow?: boolean;
  /** Set by a middleware given a `keyGenerator`: `key` defaults to `['key']`, and some rule must read `key`. */
  keyFunction?: boolean;
  /** Set by a Fastify route's own limiter: its keys go under `<prefix>:route:<route>`. */
  route?: string;
}

/** Which responses a rule charges: `'all'`, `'failed'`, `'successful'`, a class (`'4xx'`) or code (`401`), or a list. */
export type Count = 'all' | 'failed' | 'successful' | string | number | Array<string | number>;

/** Per-call options of `check`, `peek` and `acquire`. */
export interface CheckOptions {
  /** Units the request consumes (a positive integer, default 1). */
  cost?: number;
  /** For tests and simulations: the time to decide at (ms since the epoch). */
  nowMs?: number;
}

/** Options of `complete`: the request's actual cost, learned from the response. */
export interface CompleteOptions {
  /**
   * The actual cost (a whole number >= 0): the difference from the reservation is given back
   * (smaller) or charged whatever the limit (larger), capped at the rules' `max_cost`.
   */
  cost?: number;
  /** For tests and simulations: the clock of a charge past the reservation (ms since the epoch). */
  nowMs?: number;
}

/** What answered a decision: the store, a local cache, a fallback, a penalty, an allow/deny list or adaptive. */
export type Source = 'store' | 'local' | 'fail_open' | 'fail_closed' | 'penalty' | 'allowlist' | 'denylist' | 'adaptive';

/** A per-key override to set: `rate` (and `burst`) replace `policy`'s for one key. */
export interface OverrideOptions {
  /** The policy's name; may be left out on a limiter with one policy. */
  policy?: string;
  /** `"<n>/<duration>"`, as a policy's rate. */
  rate: string;
  /** Bucket capacity (not for window algorithms); default: the rate's count. */
  burst?: number;
  /** How long it lasts: ms, or text like `'10m'`; default: until removed. */
  ttl?: number | string;
  /** Tests and simulations: the time it is set at (a TTL counts from it). */
  nowMs?: number;
}

/** A per-key override in force. */
export interface Override {
  /** The name of the policy it applies to. */
  policy: string;
  /** The key it applies to. */
  key: string;
  /** The key's rate, as a policy's (`"100/min"`). */
  rate: string;
  /** The key's bucket capacity (the limit per window for window algorithms). */
  burst: number;
  /** The `limit` of its decisions (as `burst`). */
  limit: number;
  /** When it ends (ms since the epoch, the store's clock); null: never. */
  expiresAtMs: number | null;
}

/** A policy-wide limit in force. */
export interface PolicyLimit {
  /** The name of the policy it applies to (every key of it). */
  policy: string;
  /** The policy's rate while it is in force (`"100/1m"`). */
  rate: string;
  /** Its bucket capacity (the limit per window for window algorithms). */
  burst: number;
  /** The `limit` of its decisions (as `burst`). */
  limit: number;
  /** When it ends (ms since the epoch, the store's clock); null: never. */
  expiresAtMs: number | null;
}

/** One policy's answer for one key: allowed or not, and the numbers behind it. */
export interface Decision {
  /** Whether the request may go ahead. */
  allowed: boolean;
  /** The policy's limit: the burst, or the window's count. */
  limit: number;
  /** How many more requests of cost 1 would be allowed now. */
  remaining: number;
  /** Milliseconds until the key is back to its full limit. */
  resetAfterMs: number;
  /** When denied: ms until the same request could pass; null when allowed or when the cost can never fit. */
  retryAfterMs: number | null;
  /** Shape mode: how long to hold the request. */
  delayMs: number;
  /** What answered: the store, a local cache, a fallback, a penalty, a list or adaptive. */
  source: Source;
}

/** What the HTTP layer knows about a request (the core's `RequestInfo`). */
export interface RequestInfo {
  /** The HTTP method (`GET`, `POST`, …). */
  method?: string;
  /** The request target or the path the router saw; the core normalises it. */
  path?: string;
  /** The route template; without one the `route` dimension is `unmatched`. */
  route?: string;
  /** The peer address; absent (or `''`) for a Unix socket. */
  peer?: string;
  /** The request's headers: an object, or name/value pairs (repeated names kept in order). */
  headers?: Record<string, string> | Array<[string, string]>;
  /** The authenticated user (the `user` dimension); null: anonymous. */
  user?: string | null;
  /** The API key (the `api_key` dimension); null: none. */
  apiKey?: string | null;
  /** Your own key (the `key` dimension, e.g. from a `keyGenerator`); null: none. */
  key?: string | null;
  /** Units the request consumes (a positive integer, default 1). */
  cost?: number;
  /** For tests and simulations: the time to decide at (ms since the epoch). */
  nowMs?: number;
  /** The router matches paths case-insensitively (Express's default). */
  caseInsensitive?: boolean;
  /** The router ignores one trailing slash (Express's default). */
  ignoreTrailingSlash?: boolean;
}

/** One rule's decision behind an `Outcome` (`shadow`: the rule only records, never refuses). */
export interface RuleDecision {
  /** The name of the rule that decided. */
  rule: string;
  /** The name of the rule's policy. */
  policy: string;
  /** Whether this rule lets the request through. */
  allowed: boolean;
  /** The policy's limit: the burst, or the window's count. */
  limit: number;
  /** How many more requests of cost 1 this rule would allow now. */
  remaining: number;
  /** Milliseconds until the key is back to its full limit. */
  resetAfterMs: number;
  /** When denied: ms until the same request could pass; null when allowed. */
  retryAfterMs: number | null;
  /** Shape mode: how long to hold the request. */
  delayMs: number;
  /** What answered: the store, a local cache, a fallback, a penalty, a list or adaptive. */
  source: Source;
  /** The rule only records (shadow mode): its denial never refuses the request. */
  shadow: boolean;
}

/** What to answer (the core's `Outcome`). */
export interface Outcome {
  /** null: let the request through. */
  status: number | null;
  /** Headers to set, in order. */
  headers: Array<[string, string]>;
  /** JSON body when refused (a gRPC call's status message). */
  body: string | null;
  /** A gRPC call's trailing metadata (`retry-after` on a refusal); absent for HTTP. */
  trailers?: Array<[string, string]>;
  /** Shape mode: how long to hold the request before letting it through. */
  delayMs: number;
  /** Every rule's decision behind the outcome, in the rules' order. */
  decisions: RuleDecision[];
  /**
   * Present when the request was allowed and a rule counts only some responses (`count`): pass it
   * to `limiter.complete(completion, status)` after the response. Server-side only.
   */
  completion?: string;
}

/** The slots one allowed `acquire` took (a concurrency policy's leases). */
export class Lease {
  private constructor();
  /** Gives the slots back; resolves with how many leases were still live. Idempotent (later calls: 0). */
  release(options?: { nowMs?: number }): Promise<number>;
  /** Whether `release()` was called. Where the runtime has `Symbol.asyncDispose`, `await using` releases too. */
  readonly released: boolean;
}

/** One point of a metric family: labels and a value, or a histogram's buckets. */
export interface MetricPoint {
  /** Label names and values (policy, route, decision, source, ...). */
  labels: Record<string, string>;
  /** A counter's or a gauge's value (whole numbers). */
  value?: number;
  /** A histogram's bucket upper bounds (inclusive), ascending. */
  bounds?: number[];
  /** A histogram's observations per bucket, not cumulative: one more than `bounds`. */
  bucketCounts?: number[];
  /** A histogram's sum of observations. */
  sum?: number;
  /** A histogram's number of observations. */
  count?: number;
}

/** One metric of a limiter: name, help line, kind and points. */
export interface MetricFamily {
  /** The metric's name, as in the Prometheus text. */
  name: string;
  /** What it counts. */
  help: string;
  /** Counter (cumulative), gauge or histogram (cumulative). */
  kind: 'counter' | 'gauge' | 'histogram';
  /** Its points. */
  points: MetricPoint[];
}

/** Every metric family of a limiter at one moment. */
export interface MetricsSnapshot {
  /** When the limiter was built, in nanoseconds since the epoch (a double: about 0.25 µs of precision). */
  startUnixNanos: number;
  /** The families, in the order of the Prometheus text. */
  families: MetricFamily[];
}

/** A rate limiter: policies over a store (memory unless `store` names Redis), built once and shared. */
export class Limiter {
  /** Builds the limiter; throws a ConfigError naming the field and value at fault. */
  constructor(options: LimiterOptions);
  /** From a rules file (YAML or JSON): `new Limiter({ ...options, rulesFile: path })`. */
  static fromFile(path: string, options?: LimiterOptions): Limiter;
  /** From the text (YAML or JSON) or the object of a rules file: `new Limiter({ ...options, rules })`. */
  static fromRules(rules: string | object, options?: LimiterOptions): Limiter;
  /** Charges `cost` to `key` under every policy and resolves with the strictest decision. */
  check(key: string, options?: CheckOptions): Promise<Decision>;
  /** The decision `check` would return now, charging nothing and recording no penalty. */
  peek(key: string, options?: CheckOptions): Promise<Decision>;
  /** Checks a request against the limiter's rules: the status, headers and body to answer with. */
  checkRequest(request: RequestInfo): Promise<Outcome>;
  /** The outcome `checkRequest` would give now, charging nothing. */
  peekRequest(request: RequestInfo): Promise<Outcome>;
  /** Forgets every (policy, key) `checkRequest` would charge for `request`; resolves with how many. */
  resetRequest(request: RequestInfo): Promise<number>;
  /**
   * A check that, for a concurrency policy, takes `cost` slots until released. `lease` is null when
   * denied or when no policy is a concurrency one; `check` refuses a concurrency policy.
   */
  acquire(
    key: string,
    options?: CheckOptions,
  ): Promise<{
    /** The strictest decision, as `check` gives it. */
    decision: Decision;
    /** The slots taken, to release; null when denied or when no policy is a concurrency one. */
    lease: Lease | null;
  }>;
  /**
   * A rule for one route, checked through this limiter (same store, state, metrics, `close()`):
   * the middlewares' `rateLimit({ limiter, key, policy })`. No `key`: `['ip']`, or `['key']` with
   * `keyFunction`; `perRoute` puts `route` first (the core's defaults). Throws a ConfigError naming
   * `key` or `policy`.
   */
  routeRule(
    key?: string | string[] | null,
    policy?: string | null,
    options?: { keyFunction?: boolean; perRoute?: boolean; count?: Count },
  ): RouteRule;
  /**
   * Settles a request after its response: gives back the charges whose rule's `count` does not
   * count `status` (null/undefined/0: no response, counted as failed). Never rejects because the
   * store is down; rejects with a ConfigError naming `token` for a malformed token, or `cost` for
   * a bad cost, once the request is completed without it (as if none was reported).
   */
  complete(token: string, status?: number | null, options?: CompleteOptions): Promise<void>;
  /** Forgets everything charged to `key` under every policy. */
  reset(key: string): Promise<void>;
  /**
   * Reads the rules file (or options) again and swaps the rules at once (docs/features/reload.md);
   * a bad file rejects with a ConfigError naming the field and keeps the old rules.
   */
  reload(): Promise<void>;
  /** Sets a per-key override in the store (docs/features/overrides.md). */
  setOverride(key: string, options: OverrideOptions): Promise<Override>;
  /** The override in force for `key`, or null. */
  getOverride(key: string, options?: { policy?: string; nowMs?: number }): Promise<Override | null>;
  /** Removes the override of `key`: whether one was in force. */
  removeOverride(key: string, options?: { policy?: string }): Promise<boolean>;
  /** Sets a policy-wide limit in the store: every key of `options.policy` (docs/features/overrides.md). */
  setLimit(options: OverrideOptions): Promise<PolicyLimit>;
  /** The policy-wide limit in force, or null. */
  getLimit(options?: { policy?: string; nowMs?: number }): Promise<PolicyLimit | null>;
  /** Removes the policy-wide limit: whether one was in force. */
  removeLimit(options?: { policy?: string }): Promise<boolean>;
  /** The limiter's metrics in the Prometheus text format. */
  metricsText(): string;
  /** Every metric family, read now (the Prometheus text is rendered from the same snapshot). */
  metricsSnapshot(): MetricsSnapshot;
  /** The store circuit breaker's state. */
  readonly breakerState: 'closed' | 'open' | 'half_open';
  /** Closes the limiter and its store connections; later calls reject with a ClosedError. */
  close(): void;
  /** Whether `close()` was called. */
  readonly closed: boolean;
}

/** An opaque rule for one route, from `Limiter.routeRule`; only the limiter that built it checks with it. */
export interface RouteRule {
  /** Brands the type (no such property exists at run time). */
  readonly __polylimitRouteRule: unique symbol;
}

/** A circuit breaker for calls to anything: opens after failures, lets a trial call through after `cooldown`. */
export class CircuitBreaker {
  /** Builds a breaker from positional arguments (the core's defaults for those left out). */
  constructor(threshold?: number, cooldown?: Duration, halfOpenMax?: number);
  /** Builds a breaker from an options object. */
  constructor(options: { threshold?: number; cooldown?: Duration; halfOpenMax?: number });
  /** The breaker's state. */
  readonly state: 'closed' | 'open' | 'half_open';
  /** Calls `fn` through the breaker; rejects with a CircuitOpenError while it is open. */
  call<T>(fn: () => T | Promise<T>): Promise<T>;
  /** Calls `fn` through the breaker; while it is open (or when `fn` fails), `fallback` answers. */
  call<T, F>(fn: () => T | Promise<T>, fallback: (error: unknown) => F | Promise<F>): Promise<T | F>;
}

/** The `code` of each polylimit error class. */
export type ErrorCode =
  | 'POLYLIMIT_CONFIG'
  | 'POLYLIMIT_STORE_UNAVAILABLE'
  | 'POLYLIMIT_STORE'
  | 'POLYLIMIT_CLOSED'
  | 'POLYLIMIT_INTERNAL'
  | 'POLYLIMIT_CIRCUIT_OPEN';

/** The base of every error polylimit throws; `code` names which. */
export class PolylimitError extends Error {
  /** Which error this is. */
  readonly code: ErrorCode;
}
/** A bad option or rules file, found when the limiter is built. */
export class ConfigError extends PolylimitError {
  /** Always `POLYLIMIT_CONFIG`. */
  readonly code: 'POLYLIMIT_CONFIG';
  /** The option at fault, e.g. `policy.rate`. */
  readonly field: string;
  /** The value at fault, as given. */
  readonly value: string;
}
/** The store could not be reached and the policy fails closed (`onStoreError`). */
export class StoreUnavailableError extends PolylimitError {}
/** The store answered with an error for one key. */
export class StoreError extends PolylimitError {
  /** The store key the error concerns. */
  key: string;
}
/** A call on a limiter after `close()`. */
export class ClosedError extends PolylimitError {}
/** A bug in polylimit (a panic caught at the boundary); please report it. */
export class InternalError extends PolylimitError {}
/** Thrown by `CircuitBreaker.call` while the breaker is open and no fallback is given. */
export class CircuitOpenError extends PolylimitError {}

/**
 * The configuration `new Limiter(options)` would be built from, in canonical form: every option under
 * its rules-file (snake_case) name with its effective value, each policy with every field, and the
 * rules. Throws the ConfigError the constructor would.
 */
export function effectiveConfig(options: LimiterOptions): Record<string, unknown>;

/** Options shared by the Express middleware and the Fastify plugin. */
export interface MiddlewareOptions<Req = any, Res = any> extends Omit<LimiterOptions, 'policy'> {
  /** The middleware's own policy; with `limiter`, the name of one of that limiter's policies. */
  policy?: Policy | string;
  /**
   * A limiter you built (`new Limiter`, `Limiter.fromFile`): without `key`/`policy` its rules decide;
   * with them (`policy` a policy name of it) the route checks through `limiter.routeRule(key, policy)`,
   * sharing its store, state, metrics and `close()`.
   */
  limiter?: Limiter;
  /**
   * The caller's key (the `key` dimension). Without `key`, the rule is keyed by it (`['key']`, the
   * core's default); a `key` that leaves `'key'` out is a ConfigError.
   */
  keyGenerator?: (req: Req, res: Res) => string | Promise<string>;
  /**
   * With `limiter` and `key`/`policy`: put the `route` dimension first, so each route has its own
   * budget. Default false for `rateLimit` (it may be mounted app-wide), true for a Fastify route's
   * `config.rateLimit`.
   */
  perRoute?: boolean;
  /** The request's `user` dimension (null or undefined: none). */
  user?: (req: Req) => string | null | undefined | Promise<string | null | undefined>;
  /** The request's `api_key` dimension (null or undefined: none). */
  apiKey?: (req: Req) => string | null | undefined | Promise<string | null | undefined>;
  /** True: the request passes unchecked and uncharged. */
  skip?: (req: Req, res: Res) => boolean | Promise<boolean>;
  /**
   * The request's cost (default: its rules' `cost`, else 1): a whole number, or a function giving
   * it per request (null or undefined: the rules'). The core checks it: not a whole number from 1
   * is a ConfigError naming `cost` (a number when the middleware is built), above the matching
   * rules' `max_cost` a 400 `invalid_cost`. A handler reports the actual cost after the response
   * where its framework keeps per-request values: Express `res.locals.polylimitCost`, Koa
   * `ctx.state.polylimitCost`, Hono `c.set('polylimitCost', n)`, Fastify `reply.polylimitCost`,
   * NestJS `req.polylimitCost`, gRPC `reportCost(call, n)`.
   */
  cost?: number | ((req: Req, res: Res) => number | null | undefined | Promise<number | null | undefined>);
}

/** The Express middleware's options. */
export interface ExpressOptions extends MiddlewareOptions {
  /** Replaces the 429/503/403 answer; the outcome's headers are already set. */
  handler?: (req: any, res: any, next: (err?: unknown) => void, outcome: Outcome) => unknown;
  /** Where the outcome is stored on the request (default `rateLimit`). */
  requestPropertyName?: string | false;
}

/** The Express middleware `rateLimit` returns; `limiter` is the limiter it checks with. */
export type RateLimitMiddleware = ((req: any, res: any, next: (err?: unknown) => void) => Promise<void>) & {
  /** The limiter the middleware checks with (given, or built from the options). */
  limiter: Limiter;
};

/** Express middleware: `app.use(rateLimit({ policy, store }))`. */
export function rateLimit(options?: ExpressOptions): RateLimitMiddleware;

/**
 * The plugin's options. A route's `config: { rateLimit: false }` exempts it; `{ key, policy }` (a
 * policy name) checks through the plugin's limiter (given or built), per route unless
 * `perRoute: false`; a config with its own limit (`policy: {...}`, `windowMs`, …) gets its own
 * limiter, keyed under `<prefix>:route:<url>` by the core. The plugin closes the limiters it built
 * on Fastify's `onClose`; a `limiter` you gave stays open.
 */
export interface FastifyOptions extends MiddlewareOptions {
  /** Apply to every route (default true); false: only routes with `config.rateLimit`. */
  global?: boolean;
  /** Replaces the 429/503/403 answer; the outcome's headers are already set. */
  handler?: (request: any, reply: any, outcome: Outcome) => unknown;
}

/** Fastify plugin: `fastify.register(polylimitFastify, { policy, store })`. Route config: `{ rateLimit: false | FastifyOptions }`. */
export const polylimitFastify: (fastify: any, options: FastifyOptions) => Promise<void>;
