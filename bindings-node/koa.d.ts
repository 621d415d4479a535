import type { Limiter, MiddlewareOptions, Outcome } from './index';

/** The Koa middleware's options: `rateLimit()`'s (Express), with Koa's context for the request. */
export interface KoaOptions extends Omit<MiddlewareOptions<any, undefined>, 'skip'> {
  /** True: the request passes unchecked and uncharged. */
  skip?: (ctx: any) => boolean | Promise<boolean>;
  /** Replaces the 429/503/403 answer; the outcome's headers are already set. */
  handler?: (ctx: any, next: () => Promise<unknown>, outcome: Outcome) => unknown;
  /** Where the outcome is stored in `ctx.state` (default `rateLimit`). */
  requestPropertyName?: string | false;
  /** The @koa/router the app routes with: the route template and path matching when the middleware runs before it. */
  router?: { match(path: string, method: string): { pathAndMethod: Array<{ path: string | RegExp; methods: string[] }> }; opts?: object };
}

/** The middleware `rateLimit` returns; `limiter` is the limiter it checks with. */
export type KoaRateLimitMiddleware = ((ctx: any, next: () => Promise<unknown>) => Promise<unknown>) & { limiter: Limiter };

/** Koa middleware: `app.use(rateLimit({ policy, store }))`. */
export function rateLimit(options?: KoaOptions): KoaRateLimitMiddleware;
export default rateLimit;
