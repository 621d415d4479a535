//! `NativeCircuitBreaker`: the core breaker, with permits kept by id so the
//! JS `CircuitBreaker.call(fn, fallback)` can report the outcome of its call.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use napi::bindgen_prelude::Either;
use napi::{Env, Result};
use napi_derive::napi;
use polylimit::breaker::Permit;
use polylimit::options::Naming;
use polylimit::{BreakerConfig, BreakerInput, CircuitBreaker, DurationInput};

use crate::errors::{guard, throw};

/// The native breaker class (use `CircuitBreaker` from `index.js`).
#[napi]
pub struct NativeCircuitBreaker {
    inner: CircuitBreaker,
    next: u32,
    permits: Mutex<HashMap<u32, Permit>>,
}

#[napi]
impl NativeCircuitBreaker {
    /// `threshold` failures open it for `cooldown` (ms or a duration such
    /// as "30s"); `halfOpenMax` probes close it. Undefined or null: the
    /// core's default; the core checks every value.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        threshold: Option<f64>,
        cooldown: Option<Either<f64, String>>,
        half_open_max: Option<f64>,
    ) -> Result<Self> {
        guard(&env, || {
            let input = BreakerInput {
                threshold,
                cooldown: cooldown.map(|c| match c {
                    Either::A(ms) => DurationInput::Number(ms),
                    Either::B(text) => DurationInput::Text(text),
                }),
                half_open_max,
            };
            let config = BreakerConfig::from_naming(Naming::Camel, &input).map_err(|e| throw(&env, e))?;
            Ok(NativeCircuitBreaker {
                inner: CircuitBreaker::new(config),
                next: 0,
                permits: Mutex::default(),
            })
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
