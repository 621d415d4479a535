'use strict';
// Middleware options → a Limiter built from rules. Only option translation
// lives here: keys, headers, bodies and client IPs are decided by the core.
const { Limiter, ConfigError } = require('./index');

// Rules-file fields the middleware options pass through (camelCase accepted).
const PASS = {
  store: 'store',
  prefix: 'prefix',
  maxKeys: 'max_keys',
  max_keys: 'max_keys',
  timeout: 'timeout',
  connectTimeout: 'connect_timeout',
  connect_timeout: 'connect_timeout',
  failureThreshold: 'failure_threshold',
  failure_threshold: 'failure_threshold',
  cooldown: 'cooldown',
  halfOpenProbes: 'half_open_probes',
  half_open_probes: 'half_open_probes',
  trustedProxies: 'trusted_proxies',
  trusted_proxies: 'trusted_proxies',
  forwardedHeader: 'forwarded_header',
  forwarded_header: 'forwarded_header',
  ipv6Subnet: 'ipv6_subnet',
  ipv6_subnet: 'ipv6_subnet',
  allowlist: 'allowlist',
  denylist: 'denylist',
  shadow: 'shadow',
};

/** express-rate-limit's `windowMs` + `limit` (or `max`) as a fixed-window policy. */
function policyOf(options) {
  if (options.policy) return options.policy;
  const limit = options.limit ?? options.max;
  if (limit === undefined && options.windowMs === undefined) {
    throw new ConfigError('policy: is required (or windowMs and limit)', 'policy', '');
  }
  return { algorithm: 'fixed_window', rate: `${limit ?? 5}/${options.windowMs ?? 60000}ms` };
}

/** The core's `headers` mode from `headers`, or express-rate-limit's standardHeaders/legacyHeaders. */
function headersOf(options) {
  if (options.headers !== undefined) return options.headers;
  if (options.standardHeaders === undefined && options.legacyHeaders === undefined) return undefined;
  const ietf = options.standardHeaders !== undefined ? Boolean(options.standardHeaders) : true;
  const legacy = options.legacyHeaders !== undefined ? Boolean(options.legacyHeaders) : true;
  return ietf && legacy ? 'both' : ietf ? 'ietf' : legacy ? 'legacy' : 'none';
}

/**
 * A limiter for middleware options: `limiter` (a Limiter built from rules), `rules`
 * (a rules file path, or the rules object), or an inline `policy` with `key`
 * dimensions (default `['ip']`, `['key']` with a `keyGenerator`).
 */
function limiterFor(options) {
  if (options.limiter) return options.limiter;
  if (typeof options.rules === 'string') return Limiter.fromFile(options.rules);
  if (options.rules) return Limiter.fromRules(options.rules);
  const policy = { ...policyOf(options) };
  const name = policy.name || 'default';
  delete policy.name;
  const key = options.key ?? (options.keyGenerator ? ['key'] : ['ip']);
  const rules = {
    policies: { [name]: policy },
    rules: [{ name, key: Array.isArray(key) ? key : [key], policy: name }],
  };
  for (const [from, to] of Object.entries(PASS)) {
    if (options[from] !== undefined) rules[to] = options[from];
  }
  const headers = headersOf(options);
  if (headers !== undefined) rules.headers = headers;
  return Limiter.fromRules(rules);
}

/**
 * The route rule of a middleware that shares the user's limiter: with `limiter` and a `key`
 * or `policy` (a policy name of that limiter), the middleware checks through
 * `limiter.routeRule(key, policy)` (key default `['ip']`, `['key']` with a `keyGenerator`)
 * instead of the limiter's whole rules. Null otherwise. Bad key/policy throw a ConfigError here,
 * when the middleware is built.
 */
function routeRuleFor(options) {
  if (!options.limiter || (options.key === undefined && options.policy === undefined)) return null;
  const key = options.key ?? (options.keyGenerator ? ['key'] : ['ip']);
  return options.limiter.routeRule(key, options.policy);
}

/**
 * The pathname a Node router matches for a request target (as `parseurl` gives Express's
 * router): an absolute-form target's path, without query or fragment. Only for asking the
 * router which route it picks; the core is given the target itself and normalises it.
 */
function pathOf(url) {
  const absolute = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(url);
  const rest = absolute ? url.slice(absolute[0].length) : url;
  const end = rest.search(/[?#]/);
  const path = end === -1 ? rest : rest.slice(0, end);
  return path || '/';
}

/**
 * The core's Outcome for one request of a middleware. `raw` is Node's IncomingMessage:
 * its method, request target, peer address (absent on a Unix socket) and `rawHeaders`
 * (as received) go to the core as they are; `match` is the router's path matching
 * (`caseInsensitive`, `ignoreTrailingSlash`); `req` and `res` go to the `keyGenerator`,
 * `user` and `apiKey` functions. `rule` (from `routeRuleFor`), when given, decides instead of
 * the limiter's rules.
 */
async function decide(limiter, rule, options, raw, target, route, match, req, res) {
  const { keyGenerator, user, apiKey } = options;
  return limiter._checkHttp(
    rule,
    raw.method,
    target,
    route,
    raw.socket.remoteAddress || undefined,
    raw.rawHeaders,
    keyGenerator ? String(await keyGenerator(req, res)) : undefined,
    user ? nullable(await user(req)) : undefined,
    apiKey ? nullable(await apiKey(req)) : undefined,
    match.caseInsensitive,
    match.ignoreTrailingSlash,
  );
}

/** A user id or API key: a string, or null for none. */
function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

module.exports = { limiterFor, routeRuleFor, decide, pathOf };
