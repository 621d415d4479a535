//! `polylimit.Limiter`: each method clones the core limiter, runs the core
//! call (as an awaitable on the shared tokio runtime, or blocking with the GIL
//! released), and maps the error.

use std::path::PathBuf;

use polylimit::{CheckOptions, Limiter, RequestInfo, RouteRule};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;

use crate::convert::to_value;
use crate::decision::{PyDecision, PyOutcome};
use crate::errors::{config_error, IntoPyResult};
use crate::{future, runtime};

/// A rate limiter (memory or Redis store). Cheap to share between tasks and threads.
#[pyclass(subclass, module = "polylimit._polylimit", name = "Limiter")]
pub struct PyLimiter {
    inner: Limiter,
}

/// A per-route rule of one limiter (`Limiter.route_rule`), for `check_route`.
#[pyclass(frozen, module = "polylimit._polylimit", name = "RouteRule")]
pub struct PyRouteRule(RouteRule);

#[pymethods]
impl PyRouteRule {
    fn __repr__(&self) -> String {
        format!("<{:?}>", self.0)
    }
}

/// `cost` and `now_ms` as Python gave them, checked by the core's one rule.
fn check_options(cost: Option<&Bound<'_, PyAny>>, now_ms: Option<&Bound<'_, PyAny>>) -> PyResult<CheckOptions> {
    let cost = cost.map(|c| to_value(c, "cost")).transpose()?;
    let now_ms = now_ms.map(|n| to_value(n, "now_ms")).transpose()?;
    CheckOptions::from_values(cost.as_ref(), now_ms.as_ref()).into_py_result()
}

fn request_info(request: &Bound<'_, PyAny>) -> PyResult<RequestInfo> {
    RequestInfo::from_value(&to_value(request, "request")?).into_py_result()
}

#[pymethods]
impl PyLimiter {
    /// `Limiter(policy, store="memory", **options)`, or `Limiter(rules=...)` /
    /// `Limiter(rules_file=...)` for a rules file (YAML/JSON text or a dict).
    #[new]
    #[pyo3(signature = (policy=None, store=None, *, rules=None, rules_file=None, **options))]
    fn new(
        py: Python<'_>,
        policy: Option<&Bound<'_, PyAny>>,
        store: Option<String>,
        rules: Option<&Bound<'_, PyAny>>,
        rules_file: Option<PathBuf>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut value = match options {
            Some(o) => to_value(o.as_any(), "")?,
            None => Value::Object(Default::default()),
        };
        if let Some(p) = policy {
            value["policy"] = to_value(p, "policy")?;
        }
        if let Some(s) = store {
            value["store"] = Value::String(s);
        }
        // A rules document, its `${NAME}` expanded by the core, one value at a time.
        let document = match (rules, rules_file) {
            (Some(_), Some(_)) => return Err(config_error("rules", "", "and rules_file are exclusive")),
            (Some(r), None) => Some(match r.extract::<String>() {
                Ok(text) => polylimit::parse_rules(&text),
                Err(_) => polylimit::expand_document(to_value(r, "rules")?),
            }),
            (None, Some(path)) => Some(polylimit::parse_rules(&std::fs::read_to_string(&path).map_err(
                |e| {
                    config_error(
                        "rules file",
                        &format!("{:?}", path.display().to_string()),
                        &format!("cannot be read: {e}"),
                    )
                },
            )?)),
            (None, None) => None,
        };
        let Some(document) = document else {
            let inner = py.detach(|| Limiter::from_value(&value)).into_py_result()?;
            return Ok(PyLimiter { inner });
        };
        let mut parsed = document.into_py_result()?;
        let Value::Object(extra) = value else {
            unreachable!("options is a dict")
        };
        if !extra.is_empty() {
            // Keyword options override the file's (store, prefix, …).
            if let Value::Object(map) = &mut parsed {
                map.extend(extra);
            }
        }
        let inner = py.detach(|| Limiter::from_document(&parsed)).into_py_result()?;
        Ok(PyLimiter { inner })
    }

    /// Checks `key`; an awaitable resolving to a `Decision`. Runs on the
    /// core's tokio runtime, so the event loop never blocks.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn check<'py>(
        &self,
        py: Python<'py>,
        key: String,
        cost: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        future::spawn(py, async move { inner.check_with(&key, options).await })
    }

    /// Checks `key` and blocks until decided, with the GIL released.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn check_sync(
        &self,
        py: Python<'_>,
        key: String,
        cost: Option<&Bound<'_, PyAny>>,
        now_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        let options = check_options(cost, now_ms)?;
        let inner = &self.inner;
        py.detach(|| runtime::runtime().block_on(inner.check_with(&key, options)))
            .map(PyDecision)
            .into_py_result()
    }

    /// Every policy's decision for `key` (allowed only if all allow); an awaitable.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn check_all<'py>(
        &self,
        py: Python<'py>,
        key: String,
        cost: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        future::spawn(
            py,
            async move { inner.check_all(&key, options).await.map(|r| r.decisions) },
        )
    }

    /// Decides a request by the rules file; an awaitable resolving to an
    /// `Outcome`. `request` is a dict: method, path, route, peer, headers,
    /// user, api_key, key, cost, now_ms.
    fn check_request<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let req = request_info(request)?;
        let inner = self.inner.clone();
        future::spawn(py, async move { inner.check_request(&req).await })
    }

    /// `check_request`, blocking with the GIL released.
    fn check_request_sync(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<PyOutcome> {
        let req = request_info(request)?;
        let inner = &self.inner;
        py.detach(|| runtime::runtime().block_on(inner.check_request(&req)))
            .map(PyOutcome)
            .into_py_result()
    }

    /// A rule for one route (what `limit` and `depends` check): `key` is a list
    /// of key dimensions, `policy` one of this limiter's policy names (`None`:
    /// all). Bad values raise `ConfigError` naming `key` or `policy`.
    #[pyo3(signature = (key, policy=None))]
    fn route_rule(&self, key: Vec<String>, policy: Option<String>) -> PyResult<PyRouteRule> {
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        self.inner
            .route_rule(&key, policy.as_deref())
            .map(PyRouteRule)
            .into_py_result()
    }

    /// Decides a request (a dict, as for `check_request`) by one route rule of
    /// this limiter, on its state; an awaitable resolving to an `Outcome`.
    fn check_route<'py>(
        &self,
        py: Python<'py>,
        request: &Bound<'py, PyAny>,
        rule: &Bound<'py, PyRouteRule>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = request_info(request)?;
        let rule = rule.get().0.clone();
        let inner = self.inner.clone();
        future::spawn(py, async move { inner.check_route(&req, &rule).await })
    }

    /// `check_route`, blocking with the GIL released.
    fn check_route_sync(
        &self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        rule: &Bound<'_, PyRouteRule>,
    ) -> PyResult<PyOutcome> {
        let req = request_info(request)?;
        let rule = &rule.get().0;
        let inner = &self.inner;
        py.detach(|| runtime::runtime().block_on(inner.check_route(&req, rule)))
            .map(PyOutcome)
            .into_py_result()
    }

    /// Forgets every policy's state for `key`; an awaitable.
    fn reset<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        future::spawn(py, async move { inner.reset(&key).await })
    }

    /// `reset`, blocking with the GIL released.
    fn reset_sync(&self, py: Python<'_>, key: String) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| runtime::runtime().block_on(inner.reset(&key)))
            .into_py_result()
    }

    /// Prometheus text exposition of this limiter's metrics.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    /// Closes the limiter: later checks raise `ClosedError`.
    fn close(&self) {
        self.inner.close()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// `closed`, `open` or `half_open`: the store's circuit breaker.
    #[getter]
    fn breaker_state(&self) -> &'static str {
        self.inner.breaker_state().as_str()
    }

    /// The policies' names, in order.
    #[getter]
    fn policy_names(&self) -> Vec<String> {
        self.inner.policies().map(|p| p.name().to_string()).collect()
    }
}
