// Compiled by `tsc --noEmit` in limiter.test.js: every public name in use.
import {
  Limiter,
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
  await limiter.reset('user:1');
  new Limiter({ policy, overrides: true }).close();
  const set: Override = await limiter.setOverride('user:1', { rate: '10/s', burst: 20, ttl: '1h' });
  const found: Override | null = await limiter.getOverride('user:1', { policy: set.policy });
  const removed: boolean = await limiter.removeOverride('user:1');
  void [found, removed];
  const text: string = limiter.metricsText();
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
  void [inline, fromText, cfg, retry, status, text, v, l2, rule, routeMw, plugin, errors, field, breaker.state];
}
void main;
