//! `CircuitBreaker` for the user's own downstream calls: the core's breaker;
//! the Python package adds `call(fn, fallback)` around these primitives.

use std::sync::Mutex;

use polylimit::breaker::Permit;
use polylimit::options::Naming;
use polylimit::{BreakerConfig, BreakerInput, CircuitBreaker, DurationInput};
use pyo3::prelude::*;

use crate::errors::{config_error, to_py_err};

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

/// A count as Python gives it: a number (a float that is whole too), kept
/// as a float so the core names a bad one with its value.
fn number(value: Option<&Bound<'_, PyAny>>, field: &str) -> PyResult<Option<f64>> {
    value
        .map(|v| {
            v.extract::<f64>()
                .map_err(|_| config_error(field, &v.to_string(), "is not a number"))
        })
        .transpose()
}

#[pymethods]
impl PyCircuitBreaker {
    /// `cooldown`: seconds or a duration string such as `"30s"`; an absent
    /// option is the core's default, every value is checked by the core.
    #[new]
    #[pyo3(signature = (threshold=None, cooldown=None, half_open_max=None))]
    fn new(
        threshold: Option<&Bound<'_, PyAny>>,
        cooldown: Option<&Bound<'_, PyAny>>,
        half_open_max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let cooldown = match cooldown {
            None => None,
            Some(c) => Some(match c.extract::<String>() {
                Ok(text) => DurationInput::Text(text),
                Err(_) => DurationInput::Number(
                    c.extract()
                        .map_err(|_| config_error("cooldown", &c.to_string(), "is not seconds or a duration string"))?,
                ),
            }),
        };
        let input = BreakerInput {
            threshold: number(threshold, "threshold")?,
            cooldown,
            half_open_max: number(half_open_max, "half_open_max")?,
        };
        let config = BreakerConfig::from_naming(Naming::Snake, &input).map_err(to_py_err)?;
        Ok(PyCircuitBreaker(CircuitBreaker::new(config)))
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
