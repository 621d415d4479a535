'use strict';
// Fastify plugin: an onRequest hook turns the request into the core's
// RequestInfo and the core's Outcome into the reply. Route-level config:
// `config: { rateLimit: false }` exempts a route; `config: { rateLimit: {...} }`
// gives it its own limiter (same options as the plugin's), or, under a plugin
// registered with `{ limiter }`, `{ key, policy }` checks through that limiter's
// route rule (same store, state, metrics and `close()`).
const fp = require('fastify-plugin');
const { limiterFor, routeRuleFor, decide, prefixOf } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Fastify's path matching, from its options (`routerOptions` in newer versions):
 * case-sensitive unless `caseSensitive: false`, a trailing slash significant
 * unless `ignoreTrailingSlash`.
 */
function matching(fastify) {
  const config = fastify.initialConfig || {};
  const router = config.routerOptions || {};
  const caseSensitive = router.caseSensitive ?? config.caseSensitive ?? true;
  const ignoreTrailingSlash = router.ignoreTrailingSlash ?? config.ignoreTrailingSlash ?? false;
  return { caseInsensitive: !caseSensitive, ignoreTrailingSlash: Boolean(ignoreTrailingSlash) };
}

function hookFor(limiter, rule, options, match) {
  const { skip, handler } = options;
  return async function polylimitOnRequest(request, reply) {
    if (skip && (await skip(request, reply))) return;
    const route = (request.routeOptions && request.routeOptions.url) || undefined;
    const outcome = await decide(limiter, rule, options, request.raw, request.raw.url, route, match, request, reply);
    request.rateLimit = outcome;
    // On the raw response, so the names keep the core's spelling (reply.header lowercases them).
    for (const [name, value] of outcome.headers) reply.raw.setHeader(name, value);
    if (outcome.status !== null) {
      if (handler) return handler(request, reply, outcome);
      return reply.code(outcome.status).type('application/json').send(outcome.body);
    }
    if (outcome.delayMs > 0) await sleep(outcome.delayMs);
  };
}

async function polylimitFastify(fastify, options) {
  const { global = true, ...rest } = options || {};
  const base = global || rest.policy || rest.rules || rest.limiter ? limiterFor(rest) : null;
  const match = matching(fastify);
  const baseHook = base && hookFor(base, routeRuleFor(rest), rest, match);
  fastify.decorate('polylimit', base);
  fastify.addHook('onRoute', (route) => {
    const config = route.config && route.config.rateLimit;
    if (config === false) return;
    let hook = null;
    if (config && typeof config === 'object') {
      const merged = { ...rest, ...config };
      const rule = routeRuleFor(merged);
      if (rule) {
        // The route's rule on the user's limiter: its store, state, metrics and close().
        hook = hookFor(merged.limiter, rule, merged, match);
      } else {
        // Its own key space, so it never shares state with the plugin-wide limiter.
        if (config.prefix === undefined && !merged.limiter) merged.prefix = `${prefixOf(merged)}:route:${route.url}`;
        hook = hookFor(limiterFor(merged), null, merged, match);
      }
    } else if (global && baseHook) {
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
