// Compiled by `tsc --noEmit` in limiter.test.js: every public name in use.
import {
  Limiter,
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
  const conc = new Limiter({ policy: { algorithm: 'concurrency', limit: 10, lease: '30s' } });
  const { decision: held, lease }: { decision: Decision; lease: Lease | null } = await conc.acquire('user:1', { nowMs: 0 });
  const freed: number = lease ? await lease.release({ nowMs: 1 }) : 0;
  void [held, freed, lease?.released];
  void [inline, fromText, cfg, retry, status, text, v, l2, rule, routeMw, plugin, errors, field, breaker.state];
}
void main;
