import type { Limiter, MiddlewareOptions, Outcome } from './index';

/** The Hono middleware's options: `rateLimit()`'s (Express), with Hono's context for the request. */
export interface HonoOptions extends Omit<MiddlewareOptions<any, undefined>, 'skip'> {
  /** True: the request passes unchecked and uncharged. */
  skip?: (c: any) => boolean | Promise<boolean>;
  /** Answers a refused request instead (the Response to send); the outcome's headers are in `outcome.headers`. */
  handler?: (c: any, outcome: Outcome) => Response | Promise<Response>;
  /** Where the outcome is stored (`c.get(name)`, default `rateLimit`). */
  requestPropertyName?: string | false;
  /** The client address where there is no Node request (Bun: `server.requestIP(c.req.raw)?.address`, Deno: `c.env.remoteAddr.hostname`). */
  getPeer?: (c: any) => string | null | undefined | Promise<string | null | undefined>;
}

/** The middleware `rateLimit` returns; `limiter` is the limiter it checks with. */
export type HonoRateLimitMiddleware = ((c: any, next: () => Promise<void>) => Promise<Response | void>) & { limiter: Limiter };

/** Hono middleware: `app.use(rateLimit({ policy, store }))`. */
export function rateLimit(options?: HonoOptions): HonoRateLimitMiddleware;
export default rateLimit;
