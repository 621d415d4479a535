//! `NativeLimiter`: holds the core limiter; every async method submits
//! "core call → packed reply" to the thread's bridge (`bridge.rs`) as call
//! `ctx`, whose record settles the promise in `calls.js`. Argument errors
//! are thrown at once. `limiter.js` wraps it.

use std::future::Future;
use std::sync::Arc;

use napi::bindgen_prelude::{within_runtime_if_available, Buffer, Either, Uint32Array, Uint8Array, Unknown};
use napi::{Env, Result, ValueType};
use napi_derive::napi;
use polylimit::bridge::Bridge;
use polylimit::wire::packed::Reply;
use polylimit::{
    CheckOptions, CompleteOptions, Limiter, Naming, OverrideSpec, RequestInfo, RouteRule, RouteShorthand, SansIoCall,
    SansIoRequest,
};
use serde_json::Value;

use crate::bridge::NativeBridge;
use crate::errors::{config, guard, throw};
use crate::integral;

/// The native limiter class (use `Limiter` from `limiter.js`).
#[napi]
pub struct NativeLimiter {
    pub(crate) inner: Limiter,
    /// The thread's bridge every call is submitted to (`useBridge`).
    bridge: Option<Bridge>,
    /// The calls `sansio.js`'s socket carries, in the order sent, and the
    /// bytes of their replies received so far.
    sans_io: std::collections::VecDeque<SansIoSent>,
    received: Vec<u8>,
    records: Vec<u8>,
}

/// A call on `sansio.js`'s socket: a `check(key)`, or a middleware's
/// request (call `id` of `calls.js`), kept to decide it the usual way
/// when the core says so.
// Unboxed: a request's entry lives in the queue until its reply, one move, no allocation.
#[allow(clippy::large_enum_variant)]
enum SansIoSent {
    Check(SansIoCall),
    Request {
        id: u32,
        call: SansIoRequest,
        request: RequestInfo,
        rule: Option<Arc<RouteRule>>,
    },
}

/// A JavaScript value for the core's one rule on `cost` and `now_ms`
/// (`NaN` and the infinities, which JSON cannot hold, travel as text).
pub(crate) fn loose(value: Option<Unknown<'_>>) -> Result<Option<Value>> {
    let Some(value) = value else { return Ok(None) };
    // SAFETY: each cast reads the JavaScript type it was just checked to be.
    Ok(Some(match value.get_type()? {
        ValueType::Number => {
            let n: f64 = unsafe { value.cast()? };
            serde_json::Number::from_f64(n).map_or_else(|| Value::String(n.to_string()), Value::Number)
        }
        ValueType::Undefined | ValueType::Null => Value::Null,
        ValueType::String => Value::String(unsafe { value.cast()? }),
        ValueType::Boolean => Value::Bool(unsafe { value.cast()? }),
        other => Value::String(format!("<{other}>")),
    }))
}

/// `cost` and `nowMs` by the core's one rule; errors name the JavaScript option.
fn check_options(env: &Env, cost: Option<Unknown<'_>>, now_ms: Option<Unknown<'_>>) -> Result<CheckOptions> {
    CheckOptions::from_values(loose(cost)?.as_ref(), loose(now_ms)?.as_ref()).map_err(|e| match e {
        // The option's JavaScript name.
        polylimit::Error::Config { field, value, message } if field == "now_ms" => {
            config(env, "nowMs", value, &message)
        }
        e => throw(env, e),
    })
}

/// A middleware's `cost` for a request: none when absent (or null/undefined),
/// else a whole number the core's rule on a check's cost accepts.
pub(crate) fn request_cost(env: &Env, cost: Option<Unknown<'_>>) -> Result<Option<u64>> {
    match loose(cost)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => CheckOptions::from_values(Some(&v), None)
            .map(|o| Some(o.cost))
            .map_err(|e| throw(env, e)),
    }
}

/// A `RequestInfo` from its JSON text.
fn request_arg(env: &Env, request: &str) -> Result<RequestInfo> {
    let value: Value =
        serde_json::from_str(request).map_err(|e| config(env, "request", "", &format!("is not JSON: {e}")))?;
    RequestInfo::from_value(&value).map_err(|e| throw(env, e))
}

/// A route rule built by `NativeLimiter.routeRule`; opaque to JavaScript.
#[napi]
pub struct NativeRouteRule {
    rule: Arc<RouteRule>,
}

#[napi]
impl NativeLimiter {
    /// From the options object, in JavaScript's names (`policy` |
    /// `policies`, `key`, `rules` (text or object), `rulesFile`, `store`, …):
    /// the core's one options list ([`Limiter::build`]).
    #[napi(constructor)]
    pub fn new(env: Env, options: Value) -> Result<Self> {
        guard(&env, || {
            within_runtime_if_available(|| Limiter::build(Naming::Camel, &integral(options)))
                .map(|inner| NativeLimiter {
                    inner,
                    bridge: None,
                    sans_io: Default::default(),
                    received: Vec::new(),
                    records: Vec::new(),
                })
                .map_err(|e| throw(&env, e))
        })
    }

    /// Submits every later call to `bridge` (the thread's, from `calls.js`).
    #[napi]
    pub fn use_bridge(&mut self, bridge: &NativeBridge) {
        self.bridge = Some(bridge.bridge.clone());
    }

    /// Starts check `id` of `key`; its result arrives through the completion
    /// handler. Argument errors are thrown at once.
    #[napi(ts_args_type = "id: number, key: string, cost?: number, nowMs?: number")]
    pub fn check_batched(
        &self,
        env: Env,
        id: u32,
        key: String,
        cost: Option<Unknown<'_>>,
        now_ms: Option<Unknown<'_>>,
    ) -> Result<()> {
        let options = check_options(&env, cost, now_ms)?;
        let limiter = self.inner.clone();
        self.send(&env, id, move || async move {
            limiter.check_with(&key, options).await.map(Reply::Decision)
        })
    }

    /// Starts the checks `ids[i]` of `keys[i]` (no options: cost 1, the
    /// store's clock), queued by `check` during one JavaScript turn: one
    /// call for all of them, and the bridge's dispatcher wakes once. Each
    /// result arrives like `checkBatched`'s.
    #[napi]
    pub fn check_many(&self, env: Env, ids: Uint32Array, keys: Vec<String>) -> Result<()> {
        if ids.len() != keys.len() {
            return Err(throw(
                &env,
                polylimit::Error::Internal(format!("checkMany: {} ids for {} keys", ids.len(), keys.len())),
            ));
        }
        let bridge = self.open_bridge(&env)?;
        for (&id, key) in ids.iter().zip(keys) {
            let limiter = self.inner.clone();
            bridge.submit(
                u64::from(id),
                lazy(move || async move {
                    limiter
                        .check_with(&key, CheckOptions::default())
                        .await
                        .map(Reply::Decision)
                }),
            );
        }
        Ok(())
    }

    /// Where `sansio.js` may open its own socket for `check(key)`
    /// (`{ host, port, timeoutMs }`), or null: every check goes through
    /// the bridge ([`Limiter::sans_io_address`]).
    #[napi]
    pub fn sans_io_address(&self) -> Option<Value> {
        let (host, port, timeout) = self.inner.sans_io_address()?;
        Some(serde_json::json!({ "host": host, "port": port, "timeoutMs": timeout.as_millis() as u64 }))
    }

    /// The bytes to send on `sansio.js`'s socket for `check(key)` (cost 1,
    /// the store's clock), its reply awaited after those of the checks sent
    /// before; null: decide it through the bridge ([`Limiter::sans_io_start`]).
    #[napi]
    pub fn sans_io_start(&mut self, key: String) -> Option<Buffer> {
        let mut out = Vec::with_capacity(128);
        let call = self.inner.sans_io_start(&key, CheckOptions::default(), &mut out)?;
        self.sans_io.push_back(SansIoSent::Check(call));
        Some(Buffer::from(out))
    }

    /// Takes bytes received on the socket: a record per whole reply, in
    /// the order sent (ctx 0; a decision, an error, or unit: decide that
    /// check through the bridge), into `scratch` (the count of bytes) or
    /// a Buffer when they do not fit.
    #[napi]
    pub fn sans_io_feed(&mut self, chunk: &[u8], mut scratch: Uint8Array) -> Either<u32, Buffer> {
        self.received.extend_from_slice(chunk);
        self.records.clear();
        let mut at = 0;
        while let Some(n) = polylimit::sans_io_reply_len(&self.received[at..]) {
            let Some(sent) = self.sans_io.pop_front() else { break };
            let reply = &self.received[at..at + n];
            at += n;
            let result = match sent {
                SansIoSent::Check(call) => match self.inner.sans_io_finish(&call, reply) {
                    Some(decided) => decided.map(Reply::Decision),
                    None => Ok(Reply::Unit),
                },
                SansIoSent::Request {
                    id,
                    call,
                    request,
                    rule,
                } => match self.inner.sans_io_request_finish(call, reply) {
                    Some(decided) => decided.map(outcome),
                    None => {
                        self.usual_request(id, request, rule);
                        Ok(Reply::Unit)
                    }
                },
            };
            polylimit::wire::packed::write_record(&mut self.records, 0, &result);
        }
        self.received.drain(..at);
        crate::bridge::hand_records(&mut self.records, &mut scratch)
    }

    /// The socket closed or timed out: forgets its bytes and decides each
    /// check it was carrying by the fallback (they may have been charged, so
    /// none is sent again): a record each, in the order sent, as
    /// `sansIoFeed` gives them (unit: the rules changed since; decide it
    /// through the bridge).
    #[napi]
    pub fn sans_io_reset(&mut self, mut scratch: Uint8Array) -> Either<u32, Buffer> {
        self.received.clear();
        self.records.clear();
        for sent in std::mem::take(&mut self.sans_io) {
            let result = match sent {
                SansIoSent::Check(call) => self
                    .inner
                    .sans_io_unanswered(&call)
                    .map_or(Reply::Unit, Reply::Decision),
                SansIoSent::Request {
                    id,
                    call,
                    request,
                    rule,
                } => match self.inner.sans_io_request_unanswered(call) {
                    Some(decided) => outcome(decided),
                    None => {
                        self.usual_request(id, request, rule);
                        Reply::Unit
                    }
                },
            };
            polylimit::wire::packed::write_record(&mut self.records, 0, &Ok(result));
        }
        crate::bridge::hand_records(&mut self.records, &mut scratch)
    }

    /// Submits request `id` the usual way (the core refused to finish it on
    /// `sansio.js`'s socket: nothing was charged).
    fn usual_request(&self, id: u32, request: RequestInfo, rule: Option<Arc<RouteRule>>) {
        let Some(bridge) = self.bridge.as_ref() else { return };
        let limiter = self.inner.clone();
        bridge.submit(
            u64::from(id),
            lazy(move || async move {
                match rule {
                    Some(rule) => limiter.check_route(&request, &rule).await.map(outcome),
                    None => limiter.check_request(&request).await.map(outcome),
                }
            }),
        );
    }

    /// Starts deciding request `id` (the `RequestInfo` as JSON text); its
    /// record is the outcome, with its per-rule decisions.
    #[napi]
    pub fn check_request_batched(&self, env: Env, id: u32, request: String) -> Result<()> {
        let request = request_arg(&env, &request)?;
        let limiter = self.inner.clone();
        self.send(&env, id, move || async move {
            limiter.check_request(&request).await.map(outcome)
        })
    }

    /// Starts peek `id` of `key` (the decision a check would get, nothing
    /// charged); its result arrives like `checkBatched`'s.
    #[napi(ts_args_type = "id: number, key: string, cost?: number, nowMs?: number")]
    pub fn peek_batched(
        &self,
        env: Env,
        id: u32,
        key: String,
        cost: Option<Unknown<'_>>,
        now_ms: Option<Unknown<'_>>,
    ) -> Result<()> {
        let options = check_options(&env, cost, now_ms)?;
        let limiter = self.inner.clone();
        self.send(&env, id, move || async move {
            limiter.peek_with(&key, options).await.map(Reply::Decision)
        })
    }

    /// Starts peeking request `id` (the `RequestInfo` as JSON text): the
    /// outcome `checkRequestBatched` would give, nothing charged.
    #[napi]
    pub fn peek_request_batched(&self, env: Env, id: u32, request: String) -> Result<()> {
        let request = request_arg(&env, &request)?;
        let limiter = self.inner.clone();
        self.send(&env, id, move || async move {
            limiter.peek_request(&request).await.map(outcome)
        })
    }

    /// Call `id`: forgets every (policy, key) `checkRequest` would charge for
    /// the request (JSON text); its record is how many were forgotten.
    #[napi]
    pub fn reset_request(&self, env: Env, id: u32, request: String) -> Result<()> {
        let request = request_arg(&env, &request)?;
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            let n = limiter.reset_request(&request).await?;
            Ok(Reply::Count(n as u64))
        })
    }

    /// Starts deciding request `id` for a middleware, from typed arguments
    /// (no JSON): `raw_headers` is Node's `rawHeaders`, `[name, value, name,
    /// value, …]` in the order received; `peer` is absent for a Unix socket;
    /// `case_insensitive` / `ignore_trailing_slash` are the router's matching
    /// rules. With a `rule` (from `routeRule`) the request is decided by that
    /// rule instead of the limiter's rules (same store, state, metrics and
    /// `close`). Its record is the outcome, like `checkRequestBatched`'s.
    /// `now_ms` (tests) decides at that time. `grpc`: a gRPC call (the
    /// interceptor's): `path` its full method name, `peer` the library's peer
    /// string, `raw_headers` its metadata. `cost`: the request's cost (a
    /// middleware's cost function or number; absent: the rules'), checked by
    /// the core's rule on a check's cost (thrown at once, naming `cost`), then
    /// against the rules' `max_cost` (a 400 outcome). `sans_io`: `sansio.js`'s
    /// socket may carry it: the bytes to send on it are returned when the
    /// core takes it that way ([`Limiter::sans_io_request_start`]), its
    /// record then coming from `sansIoFeed`; else null, and it is submitted.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn check_http_batched(
        &mut self,
        env: Env,
        id: u32,
        rule: Option<&NativeRouteRule>,
        method: String,
        path: String,
        route: Option<String>,
        peer: Option<String>,
        raw_headers: Vec<String>,
        key: Option<String>,
        user: Option<String>,
        api_key: Option<String>,
        case_insensitive: Option<bool>,
        ignore_trailing_slash: Option<bool>,
        now_ms: Option<i64>,
        grpc: Option<bool>,
        cost: Option<Unknown<'_>>,
        sans_io: Option<bool>,
    ) -> Result<Option<Buffer>> {
        let cost = request_cost(&env, cost)?;
        let mut flat = raw_headers.into_iter();
        let mut headers = Vec::with_capacity(flat.len() / 2);
        while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
            headers.push((name, value));
        }
        let request = RequestInfo {
            method,
            path,
            route,
            peer,
            headers,
            user,
            api_key,
            key,
            cost,
            now_ms,
            case_insensitive: case_insensitive.unwrap_or(false),
            ignore_trailing_slash: ignore_trailing_slash.unwrap_or(false),
            grpc: grpc.unwrap_or(false),
        };
        if sans_io == Some(true) && !self.inner.is_closed() {
            let mut out = Vec::with_capacity(160);
            let route = rule.map(|r| &r.rule);
            if let Some(call) = self.inner.sans_io_request_start(&request, route, &mut out) {
                self.sans_io.push_back(SansIoSent::Request {
                    id,
                    call,
                    request,
                    rule: route.cloned(),
                });
                return Ok(Some(Buffer::from(out)));
            }
        }
        let limiter = self.inner.clone();
        match rule {
            Some(rule) => {
                let rule = rule.rule.clone();
                self.send(&env, id, move || async move {
                    limiter.check_route(&request, &rule).await.map(outcome)
                })
            }
            None => self.send(&env, id, move || async move {
                limiter.check_request(&request).await.map(outcome)
            }),
        }
        .map(|()| None)
    }

    /// A rule for one route (a middleware's `key` and `policy`), checked
    /// through this limiter by `checkHttpBatched`, with the core's shorthand
    /// defaults ([`Limiter::route_rule_for`]): no `key` is `['ip']`, or
    /// `['key']` with a key function; `perRoute` puts `route` first. Bad
    /// input is a config error naming `key` or `policy`.
    #[napi]
    pub fn route_rule(
        &self,
        env: Env,
        key: Option<Vec<String>>,
        policy: Option<String>,
        key_function: Option<bool>,
        per_route: Option<bool>,
        count: Option<Value>,
    ) -> Result<NativeRouteRule> {
        let shorthand = RouteShorthand {
            key,
            policy,
            key_function: key_function.unwrap_or(false),
            per_route: per_route.unwrap_or(false),
            count: count.map(integral),
        };
        guard(&env, || {
            self.inner
                .route_rule_for(&shorthand)
                .map(|rule| NativeRouteRule { rule: Arc::new(rule) })
                .map_err(|e| throw(&env, e))
        })
    }

    /// The bridge, or the thrown error of a closed limiter.
    fn open_bridge(&self, env: &Env) -> Result<&Bridge> {
        if self.inner.is_closed() {
            return Err(throw(env, polylimit::Error::Closed));
        }
        self.bridge.as_ref().ok_or_else(|| {
            throw(
                env,
                polylimit::Error::Internal("no bridge: call useBridge first".into()),
            )
        })
    }

    /// Submits a decision (a check, a request) as call `id` ([`lazy`]); throws once the limiter is closed.
    fn send<C, F>(&self, env: &Env, id: u32, call: C) -> Result<()>
    where
        C: FnOnce() -> F + Send + 'static,
        F: Future<Output = polylimit::Result<Reply>> + Send + 'static,
    {
        self.open_bridge(env)?.submit(u64::from(id), lazy(call));
        Ok(())
    }

    /// Submits any other call as call `id` ([`lazy`]; a closed limiter's answer is the core's).
    pub(crate) fn submit<C, F>(&self, env: &Env, id: u32, call: C) -> Result<()>
    where
        C: FnOnce() -> F + Send + 'static,
        F: Future<Output = polylimit::Result<Reply>> + Send + 'static,
    {
        let bridge = self.bridge.as_ref().ok_or_else(|| {
            throw(
                env,
                polylimit::Error::Internal("no bridge: call useBridge first".into()),
            )
        })?;
        bridge.submit(u64::from(id), lazy(call));
        Ok(())
    }

    /// Call `id`: settles a request after its response (`outcome.completion`):
    /// gives back the charges whose rule's `count` does not count `status`
    /// (absent or 0: no response, counted as failed); with `cost`, the
    /// request's actual cost, gives back or charges the difference from its
    /// reservation (`nowMs`: that charge's clock, for tests). Its record is
    /// unit, or the config error of a malformed token or cost; never fails
    /// because the store is down.
    #[napi]
    pub fn complete(
        &self,
        env: Env,
        id: u32,
        token: String,
        status: Option<u32>,
        cost: Option<Unknown<'_>>,
        now_ms: Option<Unknown<'_>>,
    ) -> Result<()> {
        let status = match status {
            None => None,
            Some(s) => Some(u16::try_from(s).map_err(|_| config(&env, "status", s, "is not an HTTP status"))?),
        };
        let (cost, now_ms) = (loose(cost)?, loose(now_ms)?);
        // The clock's error under its JS name, thrown here; the core checks the cost.
        CompleteOptions::from_values(None, now_ms.as_ref()).map_err(|e| match e {
            polylimit::Error::Config { field, value, message } if field == "now_ms" => {
                config(&env, "nowMs", value, &message)
            }
            e => throw(&env, e),
        })?;
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            limiter
                .complete_values(&token, status, cost.as_ref(), now_ms.as_ref())
                .await?;
            Ok(Reply::Unit)
        })
    }

    /// Call `id`: forgets every policy's state for `key`.
    #[napi]
    pub fn reset(&self, env: Env, id: u32, key: String) -> Result<()> {
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            limiter.reset(&key).await?;
            Ok(Reply::Unit)
        })
    }

    /// Call `id`: reloads the limiter's rules file (or options) and swaps
    /// the rules at once; a bad file is a config error, the old rules stay.
    #[napi]
    pub fn reload(&self, env: Env, id: u32) -> Result<()> {
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            limiter.reload().await?;
            Ok(Reply::Unit)
        })
    }

    /// Call `id`, per-key overrides: `op` is `set` (`spec` the JSON of `{
    /// policy, rate, burst, ttl, nowMs }`), `get` (`{ policy, nowMs }`) or
    /// `remove` (`{ policy }`). Its record is JSON: the override (or null, or
    /// whether one was removed).
    #[napi]
    pub fn override_call(&self, env: Env, id: u32, op: String, key: String, spec: String) -> Result<()> {
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            let spec: Value = serde_json::from_str(&spec)
                .map_err(|e| polylimit::Error::config("override", "", format!("is not JSON: {e}")))?;
            let text = |field: &str| spec.get(field).and_then(Value::as_str).map(str::to_string);
            let now_ms = spec.get("nowMs").filter(|v| !v.is_null()).map(|v| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f as i64)
                    .ok_or_else(|| polylimit::Error::config("nowMs", v, "is not a time in ms since the epoch"))
            });
            let now_ms = now_ms.transpose()?;
            let value = match op.as_str() {
                "set" => {
                    let spec = OverrideSpec::from_value(&spec, Naming::Camel)?;
                    limiter.set_override(&key, &spec).await?.to_value()
                }
                "get" => limiter
                    .get_override(&key, text("policy").as_deref(), now_ms)
                    .await?
                    .map_or(Value::Null, |o| o.to_value()),
                _ => Value::Bool(limiter.remove_override(&key, text("policy").as_deref()).await?),
            };
            Ok(Reply::Json(value))
        })
    }

    /// Call `id`, policy-wide limits: `op` is `set` (`spec` the JSON of `{
    /// policy, rate, burst, ttl, nowMs }`), `get` (`{ policy, nowMs }`) or
    /// `remove` (`{ policy }`). Its record is JSON: the limit (or null, or
    /// whether one was removed).
    #[napi]
    pub fn limit_call(&self, env: Env, id: u32, op: String, spec: String) -> Result<()> {
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            let spec: Value = serde_json::from_str(&spec)
                .map_err(|e| polylimit::Error::config("limit", "", format!("is not JSON: {e}")))?;
            let text = |field: &str| spec.get(field).and_then(Value::as_str).map(str::to_string);
            let now_ms = spec.get("nowMs").filter(|v| !v.is_null()).map(|v| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f as i64)
                    .ok_or_else(|| polylimit::Error::config("nowMs", v, "is not a time in ms since the epoch"))
            });
            let now_ms = now_ms.transpose()?;
            let value = match op.as_str() {
                "set" => {
                    let spec = OverrideSpec::from_value(&spec, Naming::Camel)?;
                    limiter.set_limit(&spec).await?.to_value()
                }
                "get" => limiter
                    .get_limit(text("policy").as_deref(), now_ms)
                    .await?
                    .map_or(Value::Null, |l| l.to_value()),
                _ => Value::Bool(limiter.remove_limit(text("policy").as_deref()).await?),
            };
            Ok(Reply::Json(value))
        })
    }

    /// Prometheus text of the limiter's metrics.
    #[napi]
    pub fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    /// Every metric family, read now, as JSON: `start_unix_nanos` and
    /// `families` (name, help, kind, points); `limiter.metricsSnapshot()` parses it.
    #[napi]
    pub fn metrics_snapshot_json(&self) -> String {
        self.inner.metrics_snapshot().to_value().to_string()
    }

    /// The store circuit breaker's state: closed, open or half_open.
    #[napi]
    pub fn breaker_state(&self) -> String {
        self.inner.breaker_state().as_str().to_string()
    }

    /// Closes the limiter: later checks fail with `POLYLIMIT_CLOSED`; the
    /// calls in flight still settle.
    #[napi]
    pub fn close(&mut self) {
        self.inner.close();
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }
}

/// What the JS thread hands the bridge for `call`: its captures, not its
/// future. A check's future is kilobytes (room for every state it may reach),
/// and boxing it moves all of it; built and boxed where it first runs, on the
/// runtime, it costs the JS thread one small allocation.
async fn lazy<C, F>(call: C) -> polylimit::Result<Reply>
where
    C: FnOnce() -> F + Send + 'static,
    F: Future<Output = polylimit::Result<Reply>> + Send + 'static,
{
    Box::pin(call()).await
}

/// A request's outcome as a reply, with its per-rule decisions.
fn outcome(o: polylimit::Outcome) -> Reply {
    Reply::Outcome(o, true)
}

/// The configuration a limiter would be built from (`effectiveConfig` in
/// `index.js`): every option under its rules-file name with its effective
/// value, each policy with every field, and the rules.
#[napi]
pub fn effective_config(env: Env, options: Value) -> Result<Value> {
    guard(&env, || {
        polylimit::effective_config(Naming::Camel, &integral(options)).map_err(|e| throw(&env, e))
    })
}

/// The status a middleware's request ends with (`polylimit::ended_status`,
/// SPEC §6), from the facts the middleware saw; null: no response.
#[napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn ended_status(status: u32, handler_answered: bool, handler_failed: bool, client_gone: bool) -> Option<u32> {
    let status = u16::try_from(status).unwrap_or(0);
    polylimit::ended_status(status, handler_answered, handler_failed, client_gone).map(u32::from)
}

/// Counts `onAnomaly` callbacks that threw or rejected, in the limiter's
/// `polylimit_anomaly_callback_errors_total`, without holding the limiter.
#[napi]
pub struct AnomalyErrors(std::sync::Arc<std::sync::atomic::AtomicU64>);

#[napi]
impl AnomalyErrors {
    /// Counts one failed callback.
    #[napi]
    pub fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[napi]
impl NativeLimiter {
    /// Sends the alerts of adaptive policies as JSON records on `bridge`
    /// under `ctx` (`calls.js` hands each to the limiter's `onAnomaly` on the
    /// JS thread), without blocking the deciding task.
    #[napi(ts_args_type = "bridge: NativeBridge, ctx: number")]
    pub fn set_anomaly_bridge(&self, bridge: &NativeBridge, ctx: i64) -> AnomalyErrors {
        let bridge = bridge.bridge.clone();
        let ctx = ctx as u64;
        self.inner
            .set_anomaly_sink(Some(Arc::new(move |event: &polylimit::adaptive::AnomalyEvent| {
                bridge.push(ctx, &Ok(Reply::Json(event.to_json())))
            })));
        AnomalyErrors(self.inner.anomaly_callback_errors())
    }
}
