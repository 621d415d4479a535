'use strict';
// Middleware options → the limiter and route rule a middleware checks through. Only option
// translation lives here: what the options ask for, keys, headers, bodies and client IPs are
// decided by the core.
const { Limiter, call } = require('./limiter');
const native = require('./native');

/**
 * What a middleware checks each request by, as the core reads its options (one rule for every
 * middleware: polylimit::options::middleware, tests/conformance/middleware): `{ limiter, rule,
 * built }`. A limiter built from the options (from `buildFrom()` when given; `built: true`: the
 * middleware closes it), or the `limiter` given, else `enclosing()` (the Fastify plugin's, for a
 * route's config), with the route rule its `key`, `policy`, `count` name (read from
 * `ruleOptions`, default `options`) or, with none of them, its rules (`rule` null). A bad key or
 * policy throws a ConfigError here, when the middleware is built.
 */
function checkerFor(options, { enclosing, perRoute = false, ruleOptions = options, buildFrom } = {}) {
  const plan = planOf(options, enclosing !== undefined);
  if (plan.check === 'build') {
    return { limiter: limiterFrom(buildFrom ? buildFrom() : options), rule: null, built: true };
  }
  const limiter = options.limiter || enclosing();
  const rule = plan.check === 'route_rule' ? routeRuleFor(limiter, ruleOptions, perRoute) : null;
  return { limiter, rule, built: false };
}

/** The core's plan for a middleware's options; a bad `cost` value throws a ConfigError naming it. */
function planOf(options, enclosing) {
  return call(() => native.middlewarePlan(options, enclosing));
}

/** A limiter built from a middleware's options: the fields the core's plan gives a limiter. */
function limiterFrom(options) {
  const plan = planOf(options, false);
  const given = {};
  for (const name of plan.limiterFields) given[name] = options[name];
  if (plan.keyFunction) given.keyFunction = true;
  return new Limiter(given);
}

/**
 * The route rule of a middleware that checks through `limiter`: `limiter.routeRule(key, policy)`
 * with the core's defaults (no `key`: `['ip']`, or `['key']` with a `keyGenerator`; `perRoute`:
 * `route` first).
 */
function routeRuleFor(limiter, options, perRoute) {
  return limiter.routeRule(options.key, options.policy, {
    keyFunction: Boolean(options.keyGenerator),
    perRoute,
    count: options.count,
  });
}

/**
 * The name a handler reports its request's actual cost under (an LLM call's tokens), on the
 * object its framework gives it per request: Express `res.locals.polylimitCost`, Koa
 * `ctx.state.polylimitCost`, Hono `c.set('polylimitCost', n)`, Fastify `reply.polylimitCost`,
 * NestJS `req.polylimitCost`. The middleware passes it to `limiter.complete(token, status,
 * { cost })` after the response; the core checks it and caps it at the rules' `max_cost`.
 */
const COST_PROPERTY = 'polylimitCost';

/** The cost reported on `holder` (`holder.polylimitCost`), or undefined when none was: the reservation stands. */
function costIn(holder) {
  const cost = holder ? holder[COST_PROPERTY] : undefined;
  return cost === null ? undefined : cost;
}

/**
 * `limiter.complete(token, status, { cost })`, never rejecting: a cost the core refuses (not a
 * whole number, negative) is reported as a process warning and the request completed without it
 * (the status still gives back what it does not charge, a concurrency slot still comes back).
 */
function settle(limiter, token, status, cost) {
  if (cost === undefined) return limiter.complete(token, status).catch(() => {});
  // A cost the core refuses still completes the request without it; only the warning is ours.
  return limiter.complete(token, status, { cost }).catch((e) => {
    if (e && e.field === 'cost') {
      process.emitWarning(`polylimit: the reported cost was not used: ${e.message}`, { code: 'POLYLIMIT_COST' });
    }
  });
}

/**
 * Settles an allowed request whose outcome carries a `completion` token (a rule's `count` or
 * cost, a concurrency lease) as its response ends: when the handler calls `res.end()` (Express and
 * Fastify do), `limiter.complete(token, status, { cost: reported() })` runs first and the response
 * ends once it has answered, so the same client's next request sees the charge given back or the
 * slot free (on 'finish' it raced the next request). `reported()` reads the actual cost the handler
 * reported (default: Express's `res.locals.polylimitCost`; each adapter says where its handlers
 * put it). The status comes from the core's rule (`polylimit::ended_status`): a client that went
 * away before the response was done is charged as the status the handler answered with, settled
 * only once the handler is done with it, so a concurrency slot is not given to the next request
 * while this handler still runs; a handler that never ends the response keeps it until its lease
 * ends. Never throws into the app.
 */
function settleAfterResponse(limiter, outcome, res, reported = () => costIn(res.locals)) {
  const token = outcome.completion;
  if (!token) return;
  const end = res.end;
  res.end = function endAfterSettling(...args) {
    res.end = end;
    // The handler (or the framework for it) answered: the core's rule charges a client that
    // left since as that answer's status, never as "no response".
    const status = native.endedStatus(res.statusCode, true, false, res.destroyed && !res.writableFinished);
    let settled;
    try {
      settled = settle(limiter, token, status, reported());
    } catch {
      return end.apply(this, args);
    }
    settled.then(() => end.apply(res, args));
    return this;
  };
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
 * `user` and `apiKey` functions, and to `cost` when it is one (else `cost` is the request's cost
 * as given, or undefined: the rules'). `rule` (from `routeRuleFor`), when given, decides instead of
 * the limiter's rules.
 */
function decide(limiter, rule, options, raw, target, route, match, req, res) {
  const { keyGenerator, user, apiKey, cost } = options;
  if (keyGenerator || user || apiKey || typeof cost === 'function') {
    return decideAwaiting(limiter, rule, options, raw, target, route, match, req, res);
  }
  // Nothing to await: the check itself (an async function's extra turns cost a request ~µs).
  try {
    return limiter._checkHttp(
      rule,
      raw.method,
      target,
      route,
      raw.socket.remoteAddress || undefined,
      raw.rawHeaders,
      undefined,
      undefined,
      undefined,
      match.caseInsensitive,
      match.ignoreTrailingSlash,
      undefined,
      undefined,
      cost,
    );
  } catch (e) {
    return Promise.reject(e);
  }
}

/** `decide` with the options' functions awaited. */
async function decideAwaiting(limiter, rule, options, raw, target, route, match, req, res) {
  const { keyGenerator, user, apiKey } = options;
  const cost = typeof options.cost === 'function' ? await options.cost(req, res) : options.cost;
  return limiter._checkHttp(
    rule,
    raw.method,
    target,
    route,
    raw.socket.remoteAddress || undefined,
    raw.rawHeaders,
    keyGenerator ? nullable(await keyGenerator(req, res)) : undefined,
    user ? nullable(await user(req)) : undefined,
    apiKey ? nullable(await apiKey(req)) : undefined,
    match.caseInsensitive,
    match.ignoreTrailingSlash,
    undefined,
    undefined,
    cost,
  );
}

/** A user id or API key: a string, or null for none. */
function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

/** Sets an outcome's headers on a Node response, names as the core spells them. */
function setHeaders(outcome, res) {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i++) res.setHeader(headers[i][0], headers[i][1]);
}

/**
 * Express's path matching, from the app's settings: case-insensitive unless
 * `case sensitive routing`, a trailing slash ignored unless `strict routing`.
 */
function expressMatching(app) {
  const setting = (name) => Boolean(app && typeof app.get === 'function' && app.get(name));
  return { caseInsensitive: !setting('case sensitive routing'), ignoreTrailingSlash: !setting('strict routing') };
}

/**
 * Fastify's path matching, from its options (`routerOptions` in newer versions):
 * case-sensitive unless `caseSensitive: false`, a trailing slash significant
 * unless `ignoreTrailingSlash`.
 */
function fastifyMatching(fastify) {
  const config = fastify.initialConfig || {};
  const router = config.routerOptions || {};
  const caseSensitive = router.caseSensitive ?? config.caseSensitive ?? true;
  const ignoreTrailingSlash = router.ignoreTrailingSlash ?? config.ignoreTrailingSlash ?? false;
  return { caseInsensitive: !caseSensitive, ignoreTrailingSlash: Boolean(ignoreTrailingSlash) };
}

/**
 * The options of a route's own limiter (a Fastify route's `config.rateLimit`, a Nest
 * handler's `@RateLimit`): the enclosing middleware's, its limit replaced by the route's (which
 * fields a route's limit replaces is the core's rule: the middleware plan's `replaces`).
 */
function routeLimiterOptions(plugin, config, url) {
  const base = { ...plugin };
  delete base.limiter;
  for (const name of planOf(config, true).replaces) delete base[name];
  return { ...base, ...config, route: url };
}

module.exports = {
  COST_PROPERTY,
  checkerFor,
  costIn,
  decide,
  expressMatching,
  fastifyMatching,
  pathOf,
  routeLimiterOptions,
  setHeaders,
  settle,
  settleAfterResponse,
};
