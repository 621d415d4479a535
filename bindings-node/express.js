'use strict';
// Express middleware: the request becomes the core's RequestInfo, the core's
// Outcome becomes the response. No header, key, IP or body logic here.
const { checkerFor, decide, expressMatching, pathOf, setHeaders, settleAfterResponse } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `app.use(rateLimit({ policy, store, key: ['ip'] }))`, or `rateLimit({ rules: 'polylimit.yaml' })`.
 * Options familiar from express-rate-limit: `windowMs`, `limit`/`max`, `keyGenerator(req, res)`,
 * `skip(req, res)`, `handler(req, res, next, outcome)`, `standardHeaders`, `legacyHeaders`,
 * `requestPropertyName` (default `rateLimit`). Also `user(req)` and `apiKey(req)` for those key dimensions,
 * and `cost(req, res)` (or a number) for the request's cost, which the core checks against the
 * rules' `max_cost`. A handler reports the request's actual cost (an LLM call's tokens) as
 * `res.locals.polylimitCost = n`: passed to `limiter.complete(token, status, { cost })` after the response.
 * `count: 'failed' | 'successful' | ['4xx', 503]` (express-rate-limit's skipSuccessfulRequests /
 * skipFailedRequests): the request is charged first and given back after the response when its
 * status does not count.
 * `rateLimit({ limiter, key: ['ip'], policy: 'api' })` checks through that limiter's route rule
 * (its store, state, metrics and `close()`; `perRoute: true` adds the `route` dimension, for one
 * budget per route); `rateLimit({ limiter })` applies its rules file.
 */
function rateLimit(options = {}) {
  const { limiter, rule } = checkerFor(options, { perRoute: Boolean(options.perRoute) });
  const { skip, handler } = options;
  const property = options.requestPropertyName ?? 'rateLimit';

  async function middleware(req, res, next) {
    try {
      if (skip && (await skip(req, res))) return next();
      const target = req.originalUrl ?? req.url;
      const route = routeOf(req, pathOf(target));
      const outcome = await decide(limiter, rule, options, req, target, route, expressMatching(req.app), req, res);
      if (property) req[property] = outcome;
      setHeaders(outcome, res);
      if (outcome.status !== null) {
        if (handler) return handler(req, res, next, outcome);
        res.statusCode = outcome.status;
        res.setHeader('Content-Type', 'application/json');
        res.end(outcome.body);
        return undefined;
      }
      settleAfterResponse(limiter, outcome, res);
      if (outcome.delayMs > 0) await sleep(outcome.delayMs);
      return next();
    } catch (e) {
      return next(e);
    }
  }
  middleware.limiter = limiter;
  return middleware;
}

/**
 * The route template of the request. Under `app.use()` Express has not routed
 * yet, so ask its router which route it will pick (as the FastAPI adapter asks
 * Starlette), recursing into mounted routers: the `route` key dimension is then
 * the same template in every language.
 */
function routeOf(req, path) {
  if (req.route && typeof req.route.path === 'string') return (req.baseUrl || '') + req.route.path;
  const router = req.app && (req.app._router || req.app.router);
  if (!router || !Array.isArray(router.stack)) return undefined;
  return findRoute(router.stack, req.method, path, '');
}

/** Express 4's router names it `_handles_method`, Express 5's (router 2) `_handlesMethod`. */
function handlesMethod(route, method) {
  const handles = route._handlesMethod || route._handles_method;
  return typeof handles === 'function' ? handles.call(route, method) : true;
}

/**
 * The part of `path` a layer matches, or null. Express 4's `layer.match()`
 * returns a boolean and sets `layer.path`; Express 5's returns `{ path }`.
 */
function matched(layer, path) {
  const m = layer.match(path);
  if (!m) return null;
  return typeof m === 'object' ? m.path : layer.path;
}

function findRoute(stack, method, path, prefix) {
  for (const layer of stack) {
    if (layer.route) {
      if (typeof layer.route.path === 'string' && handlesMethod(layer.route, method) && matched(layer, path) !== null) {
        return prefix + layer.route.path;
      }
    } else if (layer.handle && Array.isArray(layer.handle.stack)) {
      const at = matched(layer, path);
      if (at === null || at === undefined) continue;
      const found = findRoute(layer.handle.stack, method, path.slice(at.length) || '/', prefix + at);
      if (found) return found;
    }
  }
  return undefined;
}

module.exports = { rateLimit };
module.exports.default = rateLimit;
