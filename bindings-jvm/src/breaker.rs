//! `CircuitBreaker` for the user's own downstream calls: the core's breaker
//! (the Kotlin `call` helper, `Breakers.kt`, wraps these primitives).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use polylimit::{BreakerConfig, Error};

use crate::errors::{guard, PolylimitError};

/// Opens after `threshold` consecutive failures, lets `halfOpenMax` probes
/// through after `cooldown`, closes when they all succeed.
#[derive(uniffi::Object)]
pub struct CircuitBreaker(polylimit::CircuitBreaker);

/// Permission to make one call; report it with `success` or `failure`. A
/// permit collected or closed without a report counts as a failure.
#[derive(uniffi::Object)]
pub struct Permit(Mutex<Option<polylimit::breaker::Permit>>);

/// The settings from the given values, the core's defaults for the others.
// The checks move to the core's `BreakerConfig::from_naming` (issue 33).
fn config(
    threshold: Option<i64>,
    cooldown: Option<String>,
    half_open_max: Option<i64>,
) -> Result<BreakerConfig, PolylimitError> {
    let default = BreakerConfig::default();
    let count = |name: &str, given: Option<i64>, default: u32| match given {
        None => Ok(default),
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| PolylimitError::from(Error::config(name, n, "is not a positive integer"))),
    };
    let cooldown = match cooldown {
        None => default.cooldown,
        Some(text) => match polylimit::duration::parse_duration_ms(&text) {
            Some(ms) if ms > 0 => Duration::from_millis(ms),
            _ => return Err(Error::config("cooldown", format!("{text:?}"), "is not a positive duration").into()),
        },
    };
    Ok(BreakerConfig {
        threshold: count("threshold", threshold, default.threshold)?,
        cooldown,
        half_open_max: count("halfOpenMax", half_open_max, default.half_open_max)?,
    })
}

#[uniffi::export]
impl CircuitBreaker {
    /// `threshold` (default 5), `cooldown` a duration string (default
    /// `"30s"`), `halfOpenMax` (default 3). Bad values throw `Config`.
    #[uniffi::constructor(default(threshold = None, cooldown = None, half_open_max = None))]
    pub fn new(
        threshold: Option<i64>,
        cooldown: Option<String>,
        half_open_max: Option<i64>,
    ) -> Result<Arc<Self>, PolylimitError> {
        guard(|| {
            Ok(Arc::new(CircuitBreaker(polylimit::CircuitBreaker::new(config(
                threshold,
                cooldown,
                half_open_max,
            )?))))
        })
    }

    /// A permit, or null while the breaker is open.
    pub fn acquire(&self) -> Option<Arc<Permit>> {
        self.0.acquire().map(|p| Arc::new(Permit(Mutex::new(Some(p)))))
    }

    /// `closed`, `open` or `half_open`.
    pub fn state(&self) -> String {
        self.0.state().as_str().to_string()
    }

    /// Milliseconds until an open breaker lets a probe through (0 otherwise).
    pub fn retry_in_ms(&self) -> i64 {
        i64::try_from(self.0.retry_in().as_millis()).unwrap_or(i64::MAX)
    }
}

impl Permit {
    fn take(&self) -> Result<polylimit::breaker::Permit, PolylimitError> {
        let mut permit = self.0.lock().unwrap_or_else(|e| e.into_inner());
        permit
            .take()
            .ok_or_else(|| Error::config("permit", "", "was already reported").into())
    }
}

#[uniffi::export]
impl Permit {
    /// Reports that the permitted call succeeded.
    pub fn success(&self) -> Result<(), PolylimitError> {
        self.take()?.success();
        Ok(())
    }

    /// Reports that the permitted call failed.
    pub fn failure(&self) -> Result<(), PolylimitError> {
        self.take()?.failure();
        Ok(())
    }
}
