//! `NativeCircuitBreaker`: the core breaker, with permits kept by id so the
//! JS `CircuitBreaker.call(fn, fallback)` can report the outcome of its call.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use napi::bindgen_prelude::Either;
use napi::{Env, Result};
use napi_derive::napi;
use polylimit::breaker::Permit;
use polylimit::{BreakerConfig, CircuitBreaker};

use crate::errors::config;

/// The native breaker class (use `CircuitBreaker` from `index.js`).
#[napi]
pub struct NativeCircuitBreaker {
    inner: CircuitBreaker,
    next: u32,
    permits: Mutex<HashMap<u32, Permit>>,
}

fn count(env: &Env, field: &str, v: f64) -> Result<u32> {
    if v.fract() == 0.0 && (1.0..=u32::MAX as f64).contains(&v) {
        Ok(v as u32)
    } else {
        Err(config(env, field, v, "is not a positive integer"))
    }
}

#[napi]
impl NativeCircuitBreaker {
    /// `threshold` failures open it for `cooldown_ms`; `half_open_max` probes close it.
    #[napi(constructor)]
    pub fn new(env: Env, threshold: f64, cooldown: Either<f64, String>, half_open_max: f64) -> Result<Self> {
        let cooldown_ms = match cooldown {
            Either::A(ms) => ms,
            Either::B(text) => match polylimit::duration::parse_duration_ms(&text) {
                Some(ms) => ms as f64,
                None => return Err(config(&env, "cooldown", format!("{text:?}"), "is not a duration")),
            },
        };
        if !(cooldown_ms.is_finite() && cooldown_ms > 0.0) {
            return Err(config(&env, "cooldown", cooldown_ms, "is not a positive duration"));
        }
        Ok(NativeCircuitBreaker {
            inner: CircuitBreaker::new(BreakerConfig {
                threshold: count(&env, "threshold", threshold)?,
                cooldown: Duration::from_micros((cooldown_ms * 1000.0) as u64),
                half_open_max: count(&env, "halfOpenMax", half_open_max)?,
            }),
            next: 0,
            permits: Mutex::default(),
        })
    }

    /// A permit id, or null when the breaker is open.
    #[napi]
    pub fn acquire(&mut self) -> Option<u32> {
        let permit = self.inner.acquire()?;
        self.next = self.next.wrapping_add(1);
        let id = self.next;
        self.map().insert(id, permit);
        Some(id)
    }

    /// Reports that the call of permit `id` succeeded.
    #[napi]
    pub fn success(&self, id: u32) {
        if let Some(p) = self.map().remove(&id) {
            p.success();
        }
    }

    /// Reports that the call of permit `id` failed.
    #[napi]
    pub fn failure(&self, id: u32) {
        if let Some(p) = self.map().remove(&id) {
            p.failure();
        }
    }

    /// closed, open or half_open.
    #[napi(getter)]
    pub fn state(&self) -> String {
        self.inner.state().as_str().to_string()
    }

    fn map(&self) -> MutexGuard<'_, HashMap<u32, Permit>> {
        self.permits.lock().unwrap_or_else(|e| e.into_inner())
    }
}
