// Compiled by `tsc --noEmit` in limiter.test.js: every public name in use.
import { PolylimitMetricProducer } from '../../otel';
import {
  Limiter,
  MetricsSnapshot,
  Lease,
  CircuitBreaker,
  PolylimitError,
  ConfigError,
  StoreUnavailableError,
  StoreError,
  ClosedError,
  InternalError,
  CircuitOpenError,
  rateLimit,
  polylimitFastify,
  effectiveConfig,
  Decision,
  Outcome,
  Policy,
  RouteRule,
  Override,
} from '../../index';
import { retryFetch, parseRetryAfter, FetchLike } from '../../client';
import { rateLimit as koaRateLimit, KoaOptions } from '../../koa';
import { rateLimit as honoRateLimit } from '../../hono';
import { PolylimitModule, PolylimitGuard, RateLimit, SkipRateLimit, POLYLIMIT } from '../../nestjs';
import { polylimitInterceptor, reportCost } from '../../grpc';

async function main(): Promise<void> {
  const policy: Policy = { algorithm: 'gcra', rate: '10/s', burst: 20 };
  const limiter = new Limiter({ policy, store: 'memory', maxKeys: 1000, timeout: '100ms' });
  const d: Decision = await limiter.check('user:1', { cost: 1, nowMs: 0 });
  const retry: number | null = d.retryAfterMs;
  const rules = Limiter.fromFile('polylimit.yaml', { store: 'memory' });
  const inline = new Limiter({ rules: 'policies: {}', prefix: 'p' });
  const fromText = Limiter.fromRules({ policies: { api: { rate: '1/s' } } }, { shadow: true });
  const cfg: Record<string, unknown> = effectiveConfig({ rulesFile: 'polylimit.yaml', windowMs: 60000, limit: 5 });
  const o: Outcome = await rules.checkRequest({ path: '/api', peer: '127.0.0.1', apiKey: 'k' });
  const status: number | null = o.status;
  if (o.completion !== undefined) await rules.complete(o.completion, 401);
  const login = rateLimit({ windowMs: 900000, limit: 5, count: 'failed' });
  const counted: RouteRule = rules.routeRule(['ip'], 'api', { count: ['4xx', 503] });
  await limiter.reset('user:1');
  const peeked: Decision = await limiter.peek('user:1', { cost: 1, nowMs: 1000 });
  const would: Outcome = await rules.peekRequest({ path: '/api', peer: '127.0.0.1' });
  const forgotten: number = await rules.resetRequest({ path: '/api', peer: '127.0.0.1' });
  void peeked;
  void would;
  void forgotten;
  new Limiter({ policy, overrides: true }).close();
  new Limiter({ policy, blockCache: true }).close();
  new Limiter({ policy, blockCache: 500 }).close();
  new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/s', sync: { interval: '100ms', share: 10 } } }).close();
  new Limiter({ policy, regions: { eu: { store: 'redis://eu:6379', share: 0.6 }, us: { store: 'redis://us:6379', share: 0.4 } }, region: 'eu' });
  const set: Override = await limiter.setOverride('user:1', { rate: '10/s', burst: 20, ttl: '1h' });
  const found: Override | null = await limiter.getOverride('user:1', { policy: set.policy });
  const removed: boolean = await limiter.removeOverride('user:1');
  void [found, removed];
  const text: string = limiter.metricsText();
  const snapshot: MetricsSnapshot = limiter.metricsSnapshot();
  const kind: 'counter' | 'gauge' | 'histogram' = snapshot.families[0].kind;
  void [snapshot.startUnixNanos, kind, new PolylimitMetricProducer(limiter)];
  limiter.close();
  const breaker = new CircuitBreaker(5, '30s', 3);
  const v: number | string = await breaker.call(async () => 1, () => 'fallback');
  const mw = rateLimit({ policy, key: ['ip', 'route'], keyGenerator: () => 'k', skip: () => false });
  const l2: Limiter = mw.limiter;
  const rule: RouteRule = rules.routeRule(['ip'], 'api');
  const routeMw = rateLimit({ limiter: rules, key: 'user', policy: 'api', user: () => 'u' });
  const plugin: (f: any, o: any) => Promise<void> = polylimitFastify;
  const errors: Array<typeof PolylimitError> = [ConfigError, StoreUnavailableError, StoreError, ClosedError, InternalError, CircuitOpenError];
  const e = new ConfigError('x') as ConfigError;
  const field: string = e.field;
  const migrated = rateLimit({ windowMs: 60000, limit: 5, standardHeaders: 'draft-8', legacyHeaders: false });
  const both = new Limiter({ policy, headers: ['legacy', 'draft-7'] });
  const custom: FetchLike = async () => ({ status: 200, headers: { get: () => null } });
  const wrapped: FetchLike = retryFetch(custom, { maxRetries: 2, maxWaitMs: 30000, budgetMs: 60000, jitter: 0.1, statuses: [429] });
  const viaGlobal = retryFetch({ jitter: 0 });
  const wait: number | null = parseRetryAfter('3', Date.now());
  void [migrated, both, wrapped, viaGlobal, wait];
  const conc = new Limiter({ policy: { algorithm: 'concurrency', limit: 10, lease: '30s' } });
  const { decision: held, lease }: { decision: Decision; lease: Lease | null } = await conc.acquire('user:1', { nowMs: 0 });
  const freed: number = lease ? await lease.release({ nowMs: 1 }) : 0;
  void [held, freed, lease?.released];
  const koaOptions: KoaOptions = { policy: 'api', key: ['ip', 'route'], limiter: conc, skip: (ctx) => ctx.path === '/health' };
  const koaMw = koaRateLimit(koaOptions);
  const honoMw = honoRateLimit({ policy: { rate: '5/min' }, getPeer: (c) => c.req.header('x-peer') });
  const nestModule = PolylimitModule.forRoot({ rulesFile: 'polylimit.yaml' });
  const decorators = [RateLimit({ policy: 'strict', key: ['user'] }), SkipRateLimit()];
  const interceptor = polylimitInterceptor({ limiter: conc, user: (md) => md.get('x-user')[0] });
  const costed = rateLimit({ limiter: rules, policy: 'llm', cost: (req) => Number(req.get('x-reserve') ?? 1) });
  const flat = koaRateLimit({ rulesFile: 'polylimit.yaml', cost: 5 });
  const byCall = polylimitInterceptor({ limiter: conc, cost: async () => null });
  const reported: boolean = reportCost({ metadata: null }, 3400);
  void [costed, flat, byCall, reported, RateLimit({ policy: 'llm', cost: 2 })];
  void [koaMw.limiter, honoMw.limiter, nestModule.providers, decorators, interceptor.limiter, PolylimitGuard, POLYLIMIT, polylimitInterceptor(conc)];
  void [inline, fromText, cfg, retry, status, text, v, l2, rule, routeMw, plugin, errors, field, breaker.state, login, counted];
}
void main;
