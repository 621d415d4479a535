//! `CircuitBreaker` for the user's own downstream calls: the core's breaker;
//! the Python package adds `call(fn, fallback)` around these primitives.

use std::sync::Mutex;
use std::time::Duration;

use polylimit::breaker::Permit;
use polylimit::{BreakerConfig, CircuitBreaker};
use pyo3::prelude::*;

use crate::convert::to_value;
use crate::errors::config_error;

/// Permission to make one call; give it back with `success` or `failure`.
/// A permit garbage-collected without a report counts as a failure.
#[pyclass(frozen, module = "polylimit._polylimit", name = "Permit")]
pub struct PyPermit(Mutex<Option<Permit>>);

impl PyPermit {
    fn take(&self) -> PyResult<Permit> {
        self.0
            .lock()
            .map_err(|_| config_error("permit", "", "is poisoned"))?
            .take()
            .ok_or_else(|| config_error("permit", "", "was already used"))
    }
}

/// Opens after `threshold` consecutive failures, lets `half_open_max`
/// probes through after `cooldown`, closes when they all succeed.
#[pyclass(subclass, frozen, module = "polylimit._polylimit", name = "CircuitBreaker")]
pub struct PyCircuitBreaker(CircuitBreaker);

fn cooldown(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    if let Ok(text) = value.extract::<String>() {
        return polylimit::duration::parse_duration_ms(&text)
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| config_error("cooldown", &format!("{text:?}"), "is not a duration"));
    }
    let secs: f64 = value
        .extract()
        .map_err(|_| config_error("cooldown", &value.to_string(), "is not seconds or a duration string"))?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            config_error(
                "cooldown",
                &to_value(value, "cooldown").map(|v| v.to_string()).unwrap_or_default(),
                "is not a positive duration",
            )
        })
}

#[pymethods]
impl PyCircuitBreaker {
    /// `cooldown`: seconds (float) or a duration string such as `"30s"`.
    #[new]
    #[pyo3(signature = (threshold=5, cooldown=None, half_open_max=3))]
    fn new(threshold: u32, cooldown: Option<&Bound<'_, PyAny>>, half_open_max: u32) -> PyResult<Self> {
        if threshold == 0 {
            return Err(config_error("threshold", "0", "is not a positive integer"));
        }
        if half_open_max == 0 {
            return Err(config_error("half_open_max", "0", "is not a positive integer"));
        }
        let cooldown = match cooldown {
            Some(c) => self::cooldown(c)?,
            None => Duration::from_secs(30),
        };
        Ok(PyCircuitBreaker(CircuitBreaker::new(BreakerConfig {
            threshold,
            cooldown,
            half_open_max,
        })))
    }

    /// A permit, or None while the breaker is open.
    fn acquire(&self) -> Option<PyPermit> {
        self.0.acquire().map(|p| PyPermit(Mutex::new(Some(p))))
    }

    /// Reports that the permitted call succeeded.
    fn success(&self, permit: &PyPermit) -> PyResult<()> {
        permit.take()?.success();
        Ok(())
    }

    /// Reports that the permitted call failed.
    fn failure(&self, permit: &PyPermit) -> PyResult<()> {
        permit.take()?.failure();
        Ok(())
    }

    /// `closed`, `open` or `half_open`.
    #[getter]
    fn state(&self) -> &'static str {
        self.0.state().as_str()
    }

    /// Seconds until an open breaker lets a probe through (0 otherwise).
    #[getter]
    fn retry_in(&self) -> f64 {
        self.0.retry_in().as_secs_f64()
    }
}
