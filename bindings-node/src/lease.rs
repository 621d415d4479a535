//! Concurrency leases on `NativeLimiter`: `acquire` (a check that takes
//! slots until released) and `release`, submitted to the bridge like every
//! call. `limiter.js` wraps them as `limiter.acquire(key, { cost, nowMs })`
//! → `{ decision, lease }` and `lease.release({ nowMs })`; a lease is the
//! core's `Lease` (policy index, key, id), opaque to JavaScript.

use napi::bindgen_prelude::{Uint32Array, Unknown};
use napi::{Env, Result};
use napi_derive::napi;
use polylimit::wire::packed::Reply;
use polylimit::{CheckOptions, Lease};

use crate::errors::{config, throw};
use crate::limiter::{loose, NativeLimiter};

/// `cost` and `nowMs` as the core reads them (the option's JavaScript name in errors).
fn options(env: &Env, cost: Option<Unknown<'_>>, now_ms: Option<Unknown<'_>>) -> Result<CheckOptions> {
    CheckOptions::from_values(loose(cost)?.as_ref(), loose(now_ms)?.as_ref()).map_err(|e| match e {
        polylimit::Error::Config { field, value, message } if field == "now_ms" => {
            config(env, "nowMs", value, &message)
        }
        e => throw(env, e),
    })
}

#[napi]
impl NativeLimiter {
    /// Call `id`: acquires `key`; its record is the decision and the leases
    /// taken (none when denied or without a concurrency policy). Argument
    /// errors are thrown at once.
    #[napi(ts_args_type = "id: number, key: string, cost?: number, nowMs?: number")]
    pub fn acquire(
        &self,
        env: Env,
        id: u32,
        key: String,
        cost: Option<Unknown<'_>>,
        now_ms: Option<Unknown<'_>>,
    ) -> Result<()> {
        let options = options(&env, cost, now_ms)?;
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            let result = limiter.check_all(&key, options).await?;
            Ok(Reply::Acquired(result.decision(), result.leases))
        })
    }

    /// Call `id`: releases the leases `(policies[i], keys[i], ids[i])` (an
    /// acquire's) at `nowMs`, else on the store's clock; its record is how
    /// many were live.
    #[napi(ts_args_type = "id: number, policies: Uint32Array, keys: string[], ids: string[], nowMs?: number")]
    pub fn release(
        &self,
        env: Env,
        id: u32,
        policies: Uint32Array,
        keys: Vec<String>,
        ids: Vec<String>,
        now_ms: Option<Unknown<'_>>,
    ) -> Result<()> {
        let now = options(&env, None, now_ms)?.now_ms;
        if policies.len() != keys.len() || keys.len() != ids.len() {
            return Err(config(&env, "leases", keys.len(), "is not a lease list"));
        }
        let leases: Vec<Lease> = policies
            .iter()
            .zip(keys)
            .zip(ids)
            .map(|((&policy, key), id)| Lease {
                policy: policy as usize,
                key,
                id,
            })
            .collect();
        let limiter = self.inner.clone();
        self.submit(&env, id, move || async move {
            let released = match now {
                Some(now) => limiter.release_at(&leases, now).await?,
                None => limiter.release(&leases).await?,
            };
            Ok(Reply::Count(released as u64))
        })
    }
}
