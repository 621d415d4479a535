'use strict';
// Koa middleware: the request becomes the core's RequestInfo, the core's Outcome becomes the
// response. No header, key, IP or body logic here (options.js and the core have it).
const { checkerFor, costIn, decide, pathOf, setHeaders, settleAfterResponse } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `app.use(rateLimit({ policy, store, key: ['ip'] }))`, `rateLimit({ rules: 'polylimit.yaml' })` or
 * `rateLimit({ limiter, key, policy })`: the options of the Express middleware (express.js), with
 * Koa's context where Express passes `req, res`: `keyGenerator(ctx)`, `skip(ctx)`, `user(ctx)`,
 * `apiKey(ctx)`, `handler(ctx, next, outcome)`, `cost(ctx)` (or a number); the outcome goes to
 * `ctx.state.rateLimit` (`requestPropertyName`). A handler reports its request's actual cost (an
 * LLM call's tokens) as `ctx.state.polylimitCost = n`: passed to `limiter.complete(token, status,
 * { cost })` after the response. `router`: the @koa/router the app routes with, for the route template
 * and path matching when the middleware runs before it (under `router.use()` or on a route, the
 * router that dispatched the request is used).
 */
function rateLimit(options = {}) {
  const { router, ...rest } = options;
  const { limiter, rule } = checkerFor(rest, { perRoute: Boolean(rest.perRoute) });
  const { skip, handler } = rest;
  const property = rest.requestPropertyName ?? 'rateLimit';

  async function middleware(ctx, next) {
    if (skip && (await skip(ctx))) return next();
    const target = ctx.req.url;
    const routing = routerOf(ctx, router);
    const route = routeOf(ctx, routing, pathOf(target));
    const outcome = await decide(limiter, rule, rest, ctx.req, target, route, matching(routing), ctx, undefined);
    if (property) ctx.state[property] = outcome;
    setHeaders(outcome, ctx.res);
    if (outcome.status !== null) {
      if (handler) return handler(ctx, next, outcome);
      ctx.status = outcome.status;
      ctx.set('Content-Type', 'application/json'); // as set, as Express's (ctx.type adds a charset)
      ctx.body = outcome.body;
      return undefined;
    }
    settleAfterResponse(limiter, outcome, ctx.res, () => costIn(ctx.state));
    if (outcome.delayMs > 0) await sleep(outcome.delayMs);
    return next();
  }
  middleware.limiter = limiter;
  return middleware;
}

/** The @koa/router that routes this request: the one given, else the one dispatching it (`ctx.router`). */
function routerOf(ctx, router) {
  const r = router || ctx.router;
  return r && typeof r.match === 'function' ? r : null;
}

/**
 * The route template: the last route (a layer with methods, not a `router.use()` one) the router
 * matches for the request, as @koa/router sets `ctx._matchedRoute`; without a router,
 * `ctx._matchedRoute` when a router already set it.
 */
function routeOf(ctx, router, path) {
  if (!router) return typeof ctx._matchedRoute === 'string' ? ctx._matchedRoute : undefined;
  const layers = router.match(path, ctx.method).pathAndMethod;
  for (let i = layers.length - 1; i >= 0; i--) {
    if (layers[i].methods.length > 0 && typeof layers[i].path === 'string') return layers[i].path;
  }
  return undefined;
}

/**
 * @koa/router's path matching: case-insensitive unless `sensitive`, a trailing slash ignored
 * unless `strict`; without a router Koa matches nothing, paths are compared as they are.
 */
function matching(router) {
  if (!router) return { caseInsensitive: false, ignoreTrailingSlash: false };
  const opts = router.opts || {};
  return { caseInsensitive: !opts.sensitive, ignoreTrailingSlash: !opts.strict };
}

module.exports = { rateLimit };
module.exports.default = rateLimit;
