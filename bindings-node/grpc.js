'use strict';
// @grpc/grpc-js server interceptor: a call becomes the core's gRPC request (full method name,
// peer, metadata), the core's outcome becomes the call's answer (status code and message,
// rate-limit metadata in the headers, retry-after in the trailers). No status, key, IP or header
// logic here: the core's gRPC request kind has it. A stream is one request, checked once as it
// opens; the call's final status code settles it (count-after-response, concurrency slots).
const grpc = require('@grpc/grpc-js');
const { Limiter } = require('./limiter');
const { COST_PROPERTY, checkerFor, costIn, settle: settleWith } = require('./options');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `new grpc.Server({ interceptors: [polylimitInterceptor(limiter)] })`: every call is checked by
 * the limiter's rules (a rule's `match.path` is the full method name, `/pkg.Service/Method`), or
 * by a route rule with `polylimitInterceptor({ limiter, key, policy })`, or by a limiter built
 * from the options (`{ policy, store, key }`, `{ rulesFile }`) as `rateLimit()` builds one.
 * `user(metadata, call)`, `apiKey(metadata, call)`, `keyGenerator(metadata, call)` give those key
 * dimensions; `skip(metadata, call, method)` true lets a call through unchecked; `cost(metadata,
 * call)` (or a number) gives the call's cost. A handler reports its call's actual cost (an LLM
 * call's tokens) with `reportCost(call, n)`: passed to `limiter.complete(token, code, { cost })`
 * as the call ends.
 */
function polylimitInterceptor(limiterOrOptions = {}) {
  const options = limiterOrOptions instanceof Limiter ? { limiter: limiterOrOptions } : limiterOrOptions;
  const { limiter, rule } = checkerFor(options, { perRoute: Boolean(options.perRoute) });
  const { skip, keyGenerator, user, apiKey } = options;

  async function decide(methodDescriptor, call, metadata) {
    if (skip && (await skip(metadata, call, methodDescriptor))) return null;
    const cost = typeof options.cost === 'function' ? await options.cost(metadata, call) : options.cost;
    return limiter._checkHttp(
      rule,
      'POST',
      methodDescriptor.path,
      undefined, // the route is the full method name
      call.getPeer(),
      rawMetadata(metadata),
      keyGenerator ? nullable(await keyGenerator(metadata, call)) : undefined,
      user ? nullable(await user(metadata, call)) : undefined,
      apiKey ? nullable(await apiKey(metadata, call)) : undefined,
      false,
      false,
      undefined,
      true,
      cost,
    );
  }

  function interceptor(methodDescriptor, call) {
    let outcome = null;
    let settled = false;
    let headersSent = false;
    // Where the handler's `reportCost(call, n)` puts the call's actual cost.
    const reported = {};
    // The call's end (its status code, or CANCELLED when the client went away): once.
    const settle = (code) => {
      if (settled || !outcome || !outcome.completion) return Promise.resolve();
      settled = true;
      return settleWith(limiter, outcome.completion, code, costIn(reported));
    };
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, proceed) {
            decide(methodDescriptor, call, metadata).then(
              async (o) => {
                outcome = o;
                if (o && o.status !== null) return refuse(call, o);
                // The handler's call carries this metadata (`call.metadata`): its key to `reported`.
                if (o && o.completion) costs.set(metadata, reported);
                if (o && o.delayMs > 0) await sleep(o.delayMs);
                return proceed(metadata);
              },
              (err) => call.sendStatus({ code: grpc.status.INTERNAL, details: `polylimit: ${err.message}`, metadata: new grpc.Metadata() }),
            );
          },
          onCancel() {
            settle(grpc.status.CANCELLED);
          },
        });
      },
      sendMetadata(metadata, next) {
        headersSent = true;
        if (outcome) for (const [name, value] of outcome.headers) metadata.set(name, value);
        next(metadata);
      },
      sendStatus(status, next) {
        // A call ending with no message (an error status) would answer trailers only: its
        // rate-limit metadata goes out as headers first, as on every other call.
        if (!headersSent && outcome && outcome.headers.length > 0) {
          headersSent = true;
          call.sendMetadata(toMetadata(outcome.headers));
        }
        // Settled before the status goes out: the client's next call sees the charge given back or the slot free.
        settle(status.code).then(() => next(status));
      },
    });
  }
  interceptor.limiter = limiter;
  return interceptor;
}

/** The calls being checked, by their metadata (the handler's `call.metadata`): where their actual cost goes. */
const costs = new WeakMap();

/**
 * `reportCost(call, n)` in a handler (unary or streaming; `call` the handler's call object): the
 * call's actual cost (an LLM call's tokens), passed to `limiter.complete(token, code, { cost })`
 * as the call ends; the core checks it and caps it at the rules' `max_cost` (the last report
 * wins). Returns false when no polylimit interceptor settles this call (none checked it, or its
 * rules carry no cost or `count`: its reservation is final).
 */
function reportCost(call, cost) {
  const holder = call && call.metadata ? costs.get(call.metadata) : undefined;
  if (!holder) return false;
  holder[COST_PROPERTY] = cost;
  return true;
}

/** A refused call: the rate-limit metadata as its headers, the code, message and trailers. */
function refuse(call, outcome) {
  call.sendMetadata(toMetadata(outcome.headers));
  call.sendStatus({ code: outcome.status, details: outcome.body || '', metadata: toMetadata(outcome.trailers || []) });
}

function toMetadata(pairs) {
  const md = new grpc.Metadata();
  for (const [name, value] of pairs) md.add(name, value);
  return md;
}

/** The call's metadata as `[name, value, …]`, every value of a repeated key its own pair; binary (`-bin`) keys left out. */
function rawMetadata(metadata) {
  const out = [];
  for (const [name, values] of Object.entries(metadata.toJSON())) {
    if (name.endsWith('-bin')) continue;
    for (const value of values) out.push(name, String(value));
  }
  return out;
}

/** A user id or API key: a string, or null for none. */
function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

module.exports = { polylimitInterceptor, reportCost };
module.exports.default = polylimitInterceptor;
