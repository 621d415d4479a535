'use strict';
// Hono middleware: the request becomes the core's RequestInfo, the core's Outcome becomes the
// response. No header, key, IP or body logic here (options.js and the core have it).
const native = require('./native');
const { checkerFor, costIn, decide, settle, settleAfterResponse } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `app.use(rateLimit({ policy, store, key: ['ip'] }))`, `rateLimit({ rules: 'polylimit.yaml' })` or
 * `rateLimit({ limiter, key, policy })`: the options of the Express middleware (express.js), with
 * Hono's context where Express passes `req, res`: `keyGenerator(c)`, `skip(c)`, `user(c)`,
 * `apiKey(c)`, `handler(c, outcome)` (returns the Response), `cost(c)` (or a number); the outcome
 * is `c.get('rateLimit')` (`requestPropertyName`). A handler reports its request's actual cost (an
 * LLM call's tokens) with `c.set('polylimitCost', n)`: passed to `limiter.complete(token, status,
 * { cost })` after the response. The client address is the peer of @hono/node-server's request
 * (`c.env.incoming`); elsewhere (Bun, Deno) give `getPeer(c)` (e.g. Bun's
 * `server.requestIP(c.req.raw).address`, Deno's `c.env.remoteAddr.hostname`).
 */
function rateLimit(options = {}) {
  const { limiter, rule } = checkerFor(options, { perRoute: Boolean(options.perRoute) });
  const { skip, handler, getPeer } = options;
  const property = options.requestPropertyName ?? 'rateLimit';

  async function middleware(c, next) {
    if (skip && (await skip(c))) return next();
    const incoming = c.env && c.env.incoming;
    const peer = getPeer ? await getPeer(c) : incoming && incoming.socket && incoming.socket.remoteAddress;
    const raw = {
      method: c.req.method,
      socket: { remoteAddress: peer || undefined },
      rawHeaders: incoming ? incoming.rawHeaders : rawHeaders(c.req.raw.headers),
    };
    // Node's request target as received; elsewhere the absolute URL (the core takes its path).
    const target = incoming ? incoming.url : c.req.url;
    // Hono's router is case-sensitive and, by default (`strict`), keeps the trailing slash.
    const match = { caseInsensitive: false, ignoreTrailingSlash: false };
    const outcome = await decide(limiter, rule, options, raw, target, routeOf(c), match, c, undefined);
    if (property) c.set(property, outcome);
    if (outcome.status !== null) {
      if (handler) return handler(c, outcome);
      const headers = new Headers(outcome.headers);
      headers.set('content-type', 'application/json');
      return new Response(outcome.body, { status: outcome.status, headers });
    }
    if (outcome.delayMs > 0) await sleep(outcome.delayMs);
    const outgoing = c.env && c.env.outgoing;
    if (outcome.completion && outgoing) {
      // On Node the response settles as it ends, like Express's (options.js).
      settleAfterResponse(limiter, outcome, outgoing, () => costIn(c.var)); // c.set('polylimitCost', n)
    }
    await next();
    for (const [name, value] of outcome.headers) c.res.headers.set(name, value);
    if (outcome.completion && !outgoing) {
      // Elsewhere: once the handler answered (its status), before the response is sent.
      await settle(limiter, outcome.completion, native.endedStatus(c.res.status, true, false, false), costIn(c.var));
    }
    return undefined;
  }
  middleware.limiter = limiter;
  return middleware;
}

/**
 * The route template: the last route Hono matched for the request, unless that is this
 * middleware itself (no route matched: a 404). Hono 4's `c.req.matchedRoutes` (the request's own:
 * right whichever copy of Hono the app loaded), else the `hono/route` helper that replaces it.
 */
function routeOf(c) {
  const routes = 'matchedRoutes' in c.req ? c.req.matchedRoutes : require('hono/route').matchedRoutes(c);
  const last = routes.length - 1;
  if (last < 0 || last === c.req.routeIndex) return undefined;
  return routes[last].path;
}

/** A Fetch Headers as Node's `rawHeaders` (`[name, value, …]`). */
function rawHeaders(headers) {
  const out = [];
  for (const [name, value] of headers) out.push(name, value);
  return out;
}

module.exports = { rateLimit };
module.exports.default = rateLimit;
