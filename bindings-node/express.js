'use strict';
// Express middleware: the request becomes the core's RequestInfo, the core's
// Outcome becomes the response. No header, key, IP or body logic here.
const { limiterFor, headerPairs } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `app.use(rateLimit({ policy, store, key: ['ip'] }))`, or `rateLimit({ rules: 'polylimit.yaml' })`.
 * Options familiar from express-rate-limit: `windowMs`, `limit`/`max`, `keyGenerator(req, res)`,
 * `skip(req, res)`, `handler(req, res, next, outcome)`, `standardHeaders`, `legacyHeaders`,
 * `requestPropertyName` (default `rateLimit`). Also `user(req)` and `apiKey(req)` for those key dimensions.
 */
function rateLimit(options = {}) {
  const limiter = limiterFor(options);
  const { keyGenerator, skip, handler, user, apiKey } = options;
  const property = options.requestPropertyName ?? 'rateLimit';

  async function middleware(req, res, next) {
    try {
      if (skip && (await skip(req, res))) return next();
      const url = req.originalUrl ?? req.url;
      const q = url.indexOf('?');
      const info = {
        method: req.method,
        path: q === -1 ? url : url.slice(0, q),
        peer: req.socket.remoteAddress,
        headers: headerPairs(req.headers),
      };
      if (req.route && req.route.path) info.route = (req.baseUrl || '') + req.route.path;
      if (keyGenerator) info.key = String(await keyGenerator(req, res));
      if (user) info.user = nullable(await user(req));
      if (apiKey) info.api_key = nullable(await apiKey(req));
      const outcome = await limiter.checkRequest(info);
      if (property) req[property] = outcome;
      for (const [name, value] of outcome.headers) res.setHeader(name, value);
      if (outcome.status !== null) {
        if (handler) return handler(req, res, next, outcome);
        res.statusCode = outcome.status;
        res.setHeader('Content-Type', 'application/json');
        res.end(outcome.body);
        return undefined;
      }
      if (outcome.delayMs > 0) await sleep(outcome.delayMs);
      return next();
    } catch (e) {
      return next(e);
    }
  }
  middleware.limiter = limiter;
  return middleware;
}

function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

module.exports = { rateLimit };
module.exports.default = rateLimit;
