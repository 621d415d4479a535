'use strict';
// Middleware options → a Limiter built from rules. Only option translation
// lives here: keys, headers, bodies and client IPs are decided by the core.
const { Limiter, effectiveConfig } = require('./index');

// The middleware's own options: the rest go to the core as they are (its one options list).
const MIDDLEWARE_ONLY = ['limiter', 'keyGenerator', 'user', 'apiKey', 'skip', 'handler', 'requestPropertyName'];

/**
 * The options of the limiter a middleware builds: its options minus the middleware's own and
 * minus functions; with a `keyGenerator` and no `key`, the one rule is keyed by its result.
 */
function coreOptionsOf(options) {
  const out = {};
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined || typeof value === 'function' || MIDDLEWARE_ONLY.includes(name)) continue;
    out[name] = value;
  }
  if (options.keyGenerator && options.key === undefined) out.key = ['key'];
  return out;
}

/**
 * A limiter for middleware options: `limiter` (a Limiter you built), or one built by the core
 * from the other options (`policy` | `policies` with `key`, `rules` text or object, `rulesFile`,
 * `windowMs` + `limit`, `store`, …).
 */
function limiterFor(options) {
  if (options.limiter) return options.limiter;
  return new Limiter(coreOptionsOf(options));
}

/**
 * The route rule of a middleware that shares the user's limiter: with `limiter` and a `key`
 * or `policy` (a policy name of that limiter), the middleware checks through
 * `limiter.routeRule(key, policy)` (key default `['ip']`, `['key']` with a `keyGenerator`)
 * instead of the limiter's whole rules. Null otherwise. Bad key/policy throw a ConfigError here,
 * when the middleware is built.
 */
function routeRuleFor(options) {
  if (!options.limiter || (options.key === undefined && options.policy === undefined)) return null;
  const key = options.key ?? (options.keyGenerator ? ['key'] : ['ip']);
  return options.limiter.routeRule(key, options.policy);
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
 * `user` and `apiKey` functions. `rule` (from `routeRuleFor`), when given, decides instead of
 * the limiter's rules.
 */
async function decide(limiter, rule, options, raw, target, route, match, req, res) {
  const { keyGenerator, user, apiKey } = options;
  return limiter._checkHttp(
    rule,
    raw.method,
    target,
    route,
    raw.socket.remoteAddress || undefined,
    raw.rawHeaders,
    keyGenerator ? String(await keyGenerator(req, res)) : undefined,
    user ? nullable(await user(req)) : undefined,
    apiKey ? nullable(await apiKey(req)) : undefined,
    match.caseInsensitive,
    match.ignoreTrailingSlash,
  );
}

/** A user id or API key: a string, or null for none. */
function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

/** The key prefix the core gives a limiter built from these middleware options. */
function prefixOf(options) {
  return effectiveConfig(coreOptionsOf(options)).prefix;
}

module.exports = { limiterFor, routeRuleFor, decide, pathOf, prefixOf };
