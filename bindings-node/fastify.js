'use strict';
// Fastify plugin: an onRequest hook turns the request into the core's
// RequestInfo and the core's Outcome into the reply. Route-level config:
// `config: { rateLimit: false }` exempts a route; `config: { rateLimit: {...} }`
// gives it its own limiter (same options as the plugin's).
const fp = require('fastify-plugin');
const { limiterFor, headerPairs } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function hookFor(limiter, options) {
  const { keyGenerator, skip, handler, user, apiKey } = options;
  return async function polylimitOnRequest(request, reply) {
    if (skip && (await skip(request, reply))) return;
    const url = request.raw.url;
    const q = url.indexOf('?');
    const info = {
      method: request.method,
      path: q === -1 ? url : url.slice(0, q),
      peer: request.raw.socket.remoteAddress,
      headers: headerPairs(request.headers),
    };
    const route = request.routeOptions && request.routeOptions.url;
    if (route) info.route = route;
    if (keyGenerator) info.key = String(await keyGenerator(request, reply));
    if (user) info.user = nullable(await user(request));
    if (apiKey) info.api_key = nullable(await apiKey(request));
    const outcome = await limiter.checkRequest(info);
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

function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

async function polylimitFastify(fastify, options) {
  const { global = true, ...rest } = options || {};
  const base = global || rest.policy || rest.rules || rest.limiter ? limiterFor(rest) : null;
  const baseHook = base && hookFor(base, rest);
  fastify.decorate('polylimit', base);
  fastify.addHook('onRoute', (route) => {
    const config = route.config && route.config.rateLimit;
    if (config === false) return;
    let hook = null;
    if (config && typeof config === 'object') {
      const merged = { ...rest, ...config };
      // Its own key space, so it never shares state with the plugin-wide limiter.
      if (config.prefix === undefined) merged.prefix = `${rest.prefix ?? 'polylimit'}:route:${route.url}`;
      hook = hookFor(limiterFor(merged), merged);
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
