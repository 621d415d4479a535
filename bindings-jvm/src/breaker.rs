//! `CircuitBreaker` for the user's own downstream calls: the core's breaker
//! (the Kotlin `call` helper, `Breakers.kt`, wraps these primitives).

use std::sync::{Arc, Mutex};

use polylimit::{BreakerConfig, BreakerInput, DurationInput, Error, Naming};

use crate::errors::{guard, PolylimitError};

/// Opens after `threshold` consecutive failures, lets `halfOpenMax` probes
/// through after `cooldown`, closes when they all succeed.
#[derive(uniffi::Object)]
pub struct CircuitBreaker(polylimit::CircuitBreaker);

/// Permission to make one call; report it with `success` or `failure`. A
/// permit collected or closed without a report counts as a failure.
#[derive(uniffi::Object)]
pub struct Permit(Mutex<Option<polylimit::breaker::Permit>>);

/// The settings from the given values, the core's defaults and checks for the others.
fn config(
    threshold: Option<i64>,
    cooldown: Option<String>,
    half_open_max: Option<i64>,
) -> Result<BreakerConfig, PolylimitError> {
    let input = BreakerInput {
        threshold: threshold.map(|n| n as f64),
        cooldown: cooldown.map(DurationInput::Text),
        half_open_max: half_open_max.map(|n| n as f64),
    };
    Ok(BreakerConfig::from_naming(Naming::Camel, &input)?)
}

#[uniffi::export]
impl CircuitBreaker {
    /// `threshold`, `cooldown` (a duration string such as `"30s"`) and
    /// `halfOpenMax`; each left out is the core's default. Bad values throw
    /// `Config` naming the field and the value.
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
