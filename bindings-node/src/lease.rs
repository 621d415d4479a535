//! Concurrency leases on `NativeLimiter`: `acquire` (a check that takes
//! slots until released) and `release`. `index.js` wraps them as
//! `limiter.acquire(key, { cost, nowMs })` → `{ decision, lease }` and
//! `lease.release({ nowMs })`. Results cross as JSON text: `{"error": record}`
//! or the value; a lease is `[policy, key, id]` (the core's `Lease`), opaque
//! to JavaScript.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use napi::bindgen_prelude::{PromiseRaw, Unknown};
use napi::{Env, Result};
use napi_derive::napi;
use polylimit::{CheckOptions, Decision, Lease};
use serde_json::{json, Value};

use crate::errors::{config, record, throw};
use crate::limiter::{loose, NativeLimiter};

/// Runs `fut` on napi's tokio runtime; resolves with its value or
/// `{"error": record}` (a panic is an internal error), as JSON text.
fn spawn_json<F>(env: &Env, fut: F) -> Result<PromiseRaw<'_, String>>
where
    F: 'static + Send + Future<Output = polylimit::Result<Value>>,
{
    env.spawn_future(AssertUnwindSafe(fut).catch_unwind().map(|r| {
        let r = r.unwrap_or_else(|_| Err(polylimit::Error::Internal("panic in a check".into())));
        Ok(match r {
            Ok(value) => value.to_string(),
            Err(e) => json!({ "error": record(&e) }).to_string(),
        })
    }))
}

/// `nowMs` as the core reads it (the option's JavaScript name in errors).
fn now_ms(env: &Env, cost: Option<Unknown<'_>>, now_ms: Option<Unknown<'_>>) -> Result<CheckOptions> {
    CheckOptions::from_values(loose(cost)?.as_ref(), loose(now_ms)?.as_ref()).map_err(|e| match e {
        polylimit::Error::Config { field, value, message } if field == "now_ms" => {
            config(env, "nowMs", value, &message)
        }
        e => throw(env, e),
    })
}

fn decision(d: &Decision) -> Value {
    json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "resetAfterMs": d.reset_after_ms,
        "retryAfterMs": d.retry_after_ms,
        "delayMs": d.delay_ms,
        "source": d.source.as_str(),
    })
}

#[napi]
impl NativeLimiter {
    /// Acquires `key`: resolves with `{"decision": …, "leases": [[policy,
    /// key, id], …]}` (no leases when denied or without a concurrency
    /// policy) or `{"error": …}`. Argument errors are thrown at once.
    #[napi(
        ts_args_type = "key: string, cost?: number, nowMs?: number",
        ts_return_type = "Promise<string>"
    )]
    pub fn acquire<'e>(
        &self,
        env: &'e Env,
        key: String,
        cost: Option<Unknown<'_>>,
        now_ms_arg: Option<Unknown<'_>>,
    ) -> Result<PromiseRaw<'e, String>> {
        let options = now_ms(env, cost, now_ms_arg)?;
        let limiter = self.inner.clone();
        spawn_json(env, async move {
            let result = limiter.check_all(&key, options).await?;
            let leases: Vec<Value> = result.leases.iter().map(|l| json!([l.policy, l.key, l.id])).collect();
            Ok(json!({ "decision": decision(&result.decision()), "leases": leases }))
        })
    }

    /// Releases leases (`acquire`'s `leases`, as JSON text) at `nowMs`, else
    /// on the store's clock: resolves with `{"released": n}` (how many were
    /// live) or `{"error": …}`.
    #[napi(ts_args_type = "leases: string, nowMs?: number", ts_return_type = "Promise<string>")]
    pub fn release<'e>(
        &self,
        env: &'e Env,
        leases: String,
        now_ms_arg: Option<Unknown<'_>>,
    ) -> Result<PromiseRaw<'e, String>> {
        let now = now_ms(env, None, now_ms_arg)?.now_ms;
        let parsed: Vec<(usize, String, String)> = serde_json::from_str(&leases)
            .map_err(|e| config(env, "leases", "", &format!("is not a lease list: {e}")))?;
        let leases: Vec<Lease> = parsed
            .into_iter()
            .map(|(policy, key, id)| Lease { policy, key, id })
            .collect();
        let limiter = self.inner.clone();
        spawn_json(env, async move {
            let released = match now {
                Some(now) => limiter.release_at(&leases, now).await?,
                None => limiter.release(&leases).await?,
            };
            Ok(json!({ "released": released }))
        })
    }
}
