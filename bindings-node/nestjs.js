'use strict';
// NestJS: a module holding the limiter, a guard that turns the request into the core's
// RequestInfo and the core's Outcome into the response, and the decorators that exempt a
// handler or give it its own rule. Nothing here imports Nest (its decorators only store
// metadata), so it serves Nest 10 to 12, CommonJS or ESM. No header, key, IP or body logic here.
const {
  checkerFor,
  costIn,
  decide,
  expressMatching,
  fastifyMatching,
  routeLimiterOptions,
  setHeaders,
  settleAfterResponse,
} = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The injection token of the module's `Polylimit` (its limiter: `polylimit.limiter`). */
const POLYLIMIT = 'POLYLIMIT';

/** What `@RateLimit()` / `@SkipRateLimit()` put on a handler or controller class. */
const marks = new WeakMap();

function mark(value) {
  return (target, key, descriptor) => {
    marks.set(descriptor ? descriptor.value : target, value);
    return descriptor;
  };
}

/**
 * `@RateLimit({ key, policy, count, perRoute })` on a handler or controller: its own rule, like a
 * Fastify route's `config.rateLimit`: a policy *name* (and `key`, `count`) is a rule of the
 * module's limiter, keyed per route unless `perRoute: false`; a limit of its own (`policy: {...}`,
 * `windowMs`/`limit`, ...) gets its own limiter, scoped to the route.
 */
function RateLimit(options = {}) {
  return mark({ skip: false, options });
}

/** `@SkipRateLimit()` on a handler or controller: not limited (`@SkipRateLimit(false)` undoes a class's). */
function SkipRateLimit(skip = true) {
  return mark({ skip: Boolean(skip) });
}

/**
 * The module's state: the limiter its options build (or the `limiter` given), its rule, and the
 * handlers' own rules (built when a handler is first called). Closes the limiters it built when
 * Nest closes the application.
 */
class Polylimit {
  constructor(options = {}) {
    this.options = options;
    this.built = [];
    this.root = this.check(options);
    this.limiter = this.root.limiter;
    this.byHandler = new WeakMap();
  }

  check(options, how) {
    const checker = checkerFor(options, how);
    if (checker.built) this.built.push(checker.limiter);
    return { ...checker, options };
  }

  /** The checker of a handler (`key`: the handler or its class, `route` its template): its own rule, or the module's. */
  checkerOf(key, config, route) {
    if (!config) return this.root;
    let checker = this.byHandler.get(key);
    if (!checker) {
      const merged = { ...this.options, ...config };
      checker = this.check(config, {
        enclosing: () => this.limiter,
        perRoute: config.perRoute ?? true,
        ruleOptions: merged,
        buildFrom: () => routeLimiterOptions(this.options, config, route),
      });
      checker.options = merged;
      this.byHandler.set(key, checker);
    }
    return checker;
  }

  onModuleDestroy() {
    for (const limiter of this.built.splice(0)) limiter.close();
  }
}

/**
 * The guard: `{ provide: APP_GUARD, useClass: PolylimitGuard }` (every route), or
 * `@UseGuards(PolylimitGuard)` on a controller or handler. HTTP only: other contexts (RPC,
 * WebSockets) pass. A refused request is answered here with the core's status, headers and body
 * (the guard then returns false, which Nest ends without writing: the response is sent); with a
 * `handler(context, outcome)` option, that function answers instead (throw your own exception).
 * `cost(req, res)` (or a number; also in `@RateLimit`) gives the request's cost. A handler
 * reports its request's actual cost (an LLM call's tokens) as `req.polylimitCost = n` (`@Req()`,
 * on the Express or the Fastify platform; on Express `res.locals.polylimitCost` too): passed to
 * `limiter.complete(token, status, { cost })` after the response.
 */
class PolylimitGuard {
  constructor(polylimit) {
    this.polylimit = polylimit;
  }

  async canActivate(context) {
    if (context.getType() !== 'http') return true;
    const handler = context.getHandler();
    const cls = context.getClass();
    const marked = marks.get(handler) ?? marks.get(cls);
    if (marked && marked.skip) return true;
    const http = context.switchToHttp();
    const req = http.getRequest();
    const res = http.getResponse();
    // Express platform: Express's req/res; Fastify platform: FastifyRequest/FastifyReply.
    const raw = req.raw || req;
    const out = res.raw || res;
    const route = routeOf(req);
    const config = marked && marked.options;
    const { limiter, rule, options } = this.polylimit.checkerOf(marks.has(handler) ? handler : cls, config, route);
    if (options.skip && (await options.skip(req, context))) return true;
    const target = req.originalUrl ?? raw.url;
    const match = req.raw ? fastifyMatching(req.server || {}) : expressMatching(req.app);
    const outcome = await decide(limiter, rule, options, raw, target, route, match, req, res);
    const property = options.requestPropertyName ?? 'rateLimit';
    if (property) req[property] = outcome;
    setHeaders(outcome, out);
    if (outcome.status !== null) {
      if (options.handler) return options.handler(context, outcome);
      out.statusCode = outcome.status;
      out.setHeader('Content-Type', 'application/json');
      out.end(outcome.body);
      return false;
    }
    // The handler's actual cost: `req.polylimitCost = n` (either platform), or Express's `res.locals`.
    settleAfterResponse(limiter, outcome, out, () => costIn(req) ?? costIn(res.locals));
    if (outcome.delayMs > 0) await sleep(outcome.delayMs);
    return true;
  }
}

/** The route template Nest routed the request by: Express's `req.route`, Fastify's `routeOptions.url`. */
function routeOf(req) {
  if (req.route && typeof req.route.path === 'string') return (req.baseUrl || '') + req.route.path;
  if (req.routeOptions && typeof req.routeOptions.url === 'string') return req.routeOptions.url;
  return undefined;
}

/** Nest's constructor injection of the guard's one argument, as `@Inject(POLYLIMIT)` records it. */
function declareInjection() {
  if (typeof Reflect.defineMetadata === 'function') {
    Reflect.defineMetadata('self:paramtypes', [{ index: 0, param: POLYLIMIT }], PolylimitGuard);
  }
}

/**
 * `imports: [PolylimitModule.forRoot({ policy: { rate: '100/min' }, store: 'redis://…' })]`:
 * the options of `rateLimit()` (express.js): a limit, a rules file, or a `limiter`. Global: the
 * guard and `POLYLIMIT` can be injected anywhere.
 */
class PolylimitModule {
  static forRoot(options = {}) {
    declareInjection();
    return {
      module: PolylimitModule,
      global: true,
      providers: [
        { provide: POLYLIMIT, useFactory: () => new Polylimit(options) },
        { provide: PolylimitGuard, useFactory: (polylimit) => new PolylimitGuard(polylimit), inject: [POLYLIMIT] },
      ],
      exports: [POLYLIMIT, PolylimitGuard],
    };
  }
}

module.exports = { PolylimitModule, PolylimitGuard, Polylimit, RateLimit, SkipRateLimit, POLYLIMIT };
