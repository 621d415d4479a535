'use strict';
// Fastify plugin: an onRequest hook turns the request into the core's
// RequestInfo and the core's Outcome into the reply. Route-level config:
// `config: { rateLimit: false }` exempts a route; `config: { rateLimit: { key, policy } }`
// (a policy *name*) checks through the plugin's limiter (the `limiter` it was given, or the
// one it built from its options or rules file) by `limiter.routeRule`, keyed per route unless
// `perRoute: false`; a route config with its own limit (`policy: {...}`, `windowMs`, …) gets its
// own limiter, which the core scopes to the route (`route` option). The plugin closes the
// limiters it built when Fastify closes; a `limiter` you gave stays yours. `cost(request, reply)`
// (or a number, also in a route's config) gives the request's cost; a handler reports its actual
// cost (an LLM call's tokens) as `reply.polylimitCost = n` (a reply decorator), passed to
// `limiter.complete(token, status, { cost })` after the response.
const fp = require('fastify-plugin');
const {
  COST_PROPERTY,
  checkerFor,
  costIn,
  decide,
  fastifyMatching,
  routeLimiterOptions,
  setHeaders,
  settleAfterResponse,
} = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function hookFor(limiter, rule, options, match) {
  const { skip, handler } = options;
  return async function polylimitOnRequest(request, reply) {
    if (skip && (await skip(request, reply))) return;
    const route = (request.routeOptions && request.routeOptions.url) || undefined;
    const outcome = await decide(limiter, rule, options, request.raw, request.raw.url, route, match, request, reply);
    request.rateLimit = outcome;
    // On the raw response, so the names keep the core's spelling (reply.header lowercases them).
    setHeaders(outcome, reply.raw);
    if (outcome.status !== null) {
      if (handler) return handler(request, reply, outcome);
      return reply.code(outcome.status).type('application/json').send(outcome.body);
    }
    // After the response (also an aborted one): give back what `count` does not charge.
    settleAfterResponse(limiter, outcome, reply.raw, () => costIn(reply));
    if (outcome.delayMs > 0) await sleep(outcome.delayMs);
  };
}

async function polylimitFastify(fastify, options) {
  const { global = true, ...rest } = options || {};
  const built = [];
  const check = (opts, how) => {
    const checker = checkerFor(opts, how);
    if (checker.built) built.push(checker.limiter);
    return checker;
  };
  // The plugin's limiter: the one given, or built from the options (now when global, else
  // when a route first names a rule of it); when global, its rule too.
  const plugin = global ? check(rest) : null;
  let base = rest.limiter || (plugin && plugin.limiter);
  const pluginLimiter = () => {
    if (!base) base = check(rest).limiter;
    return base;
  };
  const match = fastifyMatching(fastify);
  const baseHook = global && hookFor(base, plugin.rule, rest, match);
  fastify.decorate('polylimit', { getter: () => base });
  // `reply.polylimitCost = n`: the handler's actual cost for its request, read after the response.
  if (!fastify.hasReplyDecorator(COST_PROPERTY)) fastify.decorateReply(COST_PROPERTY, null);
  fastify.addHook('onClose', async () => {
    for (const limiter of built) limiter.close();
  });
  fastify.addHook('onRoute', (route) => {
    const config = route.config && route.config.rateLimit;
    if (config === false) return;
    let hook = null;
    if (config && typeof config === 'object') {
      // A rule of the plugin's limiter (or the route's `limiter`): its store, state, metrics,
      // close(); or, for a route giving a limit of its own, its own limiter in the key space the
      // core gives one route.
      const merged = { ...rest, ...config };
      const { limiter, rule } = check(config, {
        enclosing: pluginLimiter,
        perRoute: config.perRoute ?? true,
        ruleOptions: merged,
        buildFrom: () => routeLimiterOptions(rest, config, route.url),
      });
      hook = hookFor(limiter, rule, merged, match);
    } else if (baseHook) {
      hook = baseHook;
    }
    if (!hook) return;
    const existing = route.onRequest ? [].concat(route.onRequest) : [];
    route.onRequest = [hook, ...existing];
  });
}

module.exports = fp(polylimitFastify, { fastify: '>=4', name: 'polylimit' });
module.exports.default = module.exports;
module.exports.polylimitFastify = module.exports;
