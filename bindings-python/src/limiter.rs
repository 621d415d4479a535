//! `polylimit.Limiter`: each method clones the core limiter, runs the core
//! call (as an awaitable on the shared tokio runtime, or blocking with the GIL
//! released), and maps the error.

use polylimit::wire::packed::Reply;
use polylimit::{Limiter, Naming, RouteRule, RouteShorthand};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;

use crate::args::{check_options, complete_values, options_value, override_spec, request_info};
use crate::convert::{to_py, to_value};
use crate::decision::{PyDecision, PyOutcome};
use crate::errors::IntoPyResult;
use crate::lease::{self, PyLease};
use crate::{host, reader, runtime};

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

/// The status a middleware's request ends with (`polylimit::ended_status`,
/// SPEC §6), from what the middleware saw; `None`: no response.
#[pyfunction]
pub(crate) fn ended_status(
    status: u16,
    handler_answered: bool,
    handler_failed: bool,
    client_gone: bool,
) -> Option<u16> {
    polylimit::ended_status(status, handler_answered, handler_failed, client_gone)
}

/// `polylimit.effective_config(**options)`: the configuration `Limiter(...)`
/// would be built from, in canonical form, as a plain dict.
#[pyfunction]
#[pyo3(signature = (policy=None, store=None, **options))]
pub(crate) fn effective_config<'py>(
    py: Python<'py>,
    policy: Option<&Bound<'py, PyAny>>,
    store: Option<&Bound<'py, PyAny>>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let value = options_value(policy, store, options)?;
    let config = py
        .detach(|| polylimit::effective_config(Naming::Snake, &value))
        .into_py_result()?;
    to_py(py, &config)
}

#[pymethods]
impl PyLimiter {
    /// `Limiter(policy, store="memory", **options)`, or `Limiter(rules=...)` /
    /// `Limiter(rules_file=...)` for a rules document: every argument goes
    /// into one options object that the core reads (`Limiter::build`).
    #[new]
    #[pyo3(signature = (policy=None, store=None, **options))]
    fn new(
        py: Python<'_>,
        policy: Option<&Bound<'_, PyAny>>,
        store: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // `on_anomaly` is a callable, not an option of the core.
        let options = options.map(|o| o.copy()).transpose()?;
        let on_anomaly = match &options {
            Some(o) => {
                let callback = o.get_item("on_anomaly")?.filter(|c| !c.is_none());
                if o.contains("on_anomaly")? {
                    o.del_item("on_anomaly")?;
                }
                callback
            }
            None => None,
        };
        let value = options_value(policy, store, options.as_ref())?;
        let inner = py.detach(|| Limiter::build(Naming::Snake, &value)).into_py_result()?;
        if let Some(callback) = on_anomaly {
            if !callback.is_callable() {
                return Err(polylimit::Error::config(
                    "on_anomaly",
                    callback.repr()?,
                    "is not callable",
                ))
                .into_py_result();
            }
            crate::anomaly::install(py, &inner, callback.unbind())?;
        }
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
        host::submit(
            py,
            async move { inner.check_with(&key, options).await.map(Reply::Decision) },
        )
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
        runtime::block_on(py, inner.check_with(&key, options)).map(PyDecision)
    }

    /// Acquires `key` (a check that, for a concurrency policy, takes `cost`
    /// slots until released); an awaitable resolving to `(Decision, Lease)`,
    /// the lease None when denied or when no policy is a concurrency one.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn acquire<'py>(
        &self,
        py: Python<'py>,
        key: String,
        cost: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = check_options(cost, now_ms)?;
        let limiter = self.inner.clone();
        let call = async move {
            let (decision, guard) = limiter.acquire_with(&key, options).await?;
            Ok(Reply::Acquired(
                decision,
                guard.map(|g| g.into_leases()).unwrap_or_default(),
            ))
        };
        host::submit_with(py, call, lease::acquired, Some(self.inner.clone()))
    }

    /// `acquire`, blocking with the GIL released.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        key: String,
        cost: Option<&Bound<'_, PyAny>>,
        now_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(PyDecision, Option<PyLease>)> {
        let options = check_options(cost, now_ms)?;
        let inner = &self.inner;
        let (decision, guard) = runtime::block_on(py, inner.acquire_with(&key, options))?;
        let leases = guard.map(|g| g.into_leases()).unwrap_or_default();
        Ok((PyDecision(decision), PyLease::new(inner, leases)))
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
        host::submit(py, async move {
            inner
                .check_all(&key, options)
                .await
                .map(|r| Reply::Decisions(r.decisions))
        })
    }

    /// Decides a request by the rules file; an awaitable resolving to an
    /// `Outcome`. `request` is a dict: method, path, route, peer, headers,
    /// user, api_key, key, cost, now_ms.
    fn check_request<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let req = request_info(request)?;
        let limiter = self.inner.clone();
        let call = async move { limiter.check_request(&req).await.map(|o| Reply::Outcome(o, true)) };
        host::submit_with(py, call, reader::value, Some(self.inner.clone()))
    }

    /// `check_request`, blocking with the GIL released.
    fn check_request_sync(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<PyOutcome> {
        let req = request_info(request)?;
        let inner = &self.inner;
        runtime::block_on(py, inner.check_request(&req)).map(PyOutcome)
    }

    /// A rule for one route (what `limit` and `depends` check): `key` is a list
    /// of key dimensions, `policy` one of this limiter's policy names (`None`:
    /// all). The defaults are the core's ([`Limiter::route_rule_for`]): no
    /// `key` is `["ip"]`, or `["key"]` with `key_function=True`; `per_route`
    /// puts `route` first. Bad values raise `ConfigError` naming `key` or `policy`.
    #[pyo3(signature = (key=None, policy=None, *, key_function=false, per_route=false, count=None))]
    fn route_rule(
        &self,
        key: Option<Vec<String>>,
        policy: Option<String>,
        key_function: bool,
        per_route: bool,
        count: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyRouteRule> {
        let count = count
            .filter(|c| !c.is_none())
            .map(|c| to_value(c, "count"))
            .transpose()?;
        let shorthand = RouteShorthand {
            key,
            policy,
            key_function,
            per_route,
            count,
        };
        self.inner.route_rule_for(&shorthand).map(PyRouteRule).into_py_result()
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
        let limiter = self.inner.clone();
        let call = async move { limiter.check_route(&req, &rule).await.map(|o| Reply::Outcome(o, true)) };
        host::submit_with(py, call, reader::value, Some(self.inner.clone()))
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
        runtime::block_on(py, inner.check_route(&req, rule)).map(PyOutcome)
    }

    /// The decision `check` would return now, charging nothing and recording
    /// no penalty; an awaitable resolving to a `Decision`.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn peek<'py>(
        &self,
        py: Python<'py>,
        key: String,
        cost: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        host::submit(
            py,
            async move { inner.peek_with(&key, options).await.map(Reply::Decision) },
        )
    }

    /// `peek`, blocking with the GIL released.
    #[pyo3(signature = (key, cost=None, now_ms=None))]
    fn peek_sync(
        &self,
        py: Python<'_>,
        key: String,
        cost: Option<&Bound<'_, PyAny>>,
        now_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        let options = check_options(cost, now_ms)?;
        let inner = &self.inner;
        runtime::block_on(py, inner.peek_with(&key, options)).map(PyDecision)
    }

    /// The `Outcome` `check_request` would return for `request` now,
    /// charging nothing; an awaitable.
    fn peek_request<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let req = request_info(request)?;
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner.peek_request(&req).await.map(|o| Reply::Outcome(o, true))
        })
    }

    /// `peek_request`, blocking with the GIL released.
    fn peek_request_sync(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<PyOutcome> {
        let req = request_info(request)?;
        let inner = &self.inner;
        runtime::block_on(py, inner.peek_request(&req)).map(PyOutcome)
    }

    /// Forgets every (policy, key) `check_request` would charge for
    /// `request`, penalties included; an awaitable resolving to how many.
    fn reset_request<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let req = request_info(request)?;
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner.reset_request(&req).await.map(|n| Reply::Count(n as u64))
        })
    }

    /// `reset_request`, blocking with the GIL released.
    fn reset_request_sync(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<usize> {
        let req = request_info(request)?;
        let inner = &self.inner;
        runtime::block_on(py, inner.reset_request(&req))
    }

    /// Settles a request after its response (`Outcome.completion`): gives
    /// back the charges whose rule's `count` does not count `status` (None or
    /// 0: no response, counted as failed); with `cost`, the request's actual
    /// cost (learned from the response), gives back or charges the
    /// difference from what it reserved, capped at its rules' `max_cost`
    /// (`now_ms`: the clock of that charge, for tests); an awaitable. Never
    /// raises because the store is down; a malformed token raises
    /// `ConfigError` naming `token`; a bad cost raises one naming `cost`
    /// after completing the request without it (as if none was reported).
    #[pyo3(signature = (token, status=None, cost=None, now_ms=None))]
    fn complete<'py>(
        &self,
        py: Python<'py>,
        token: String,
        status: Option<u16>,
        cost: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cost, now_ms) = complete_values(cost, now_ms)?;
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner
                .complete_values(&token, status, cost.as_ref(), now_ms.as_ref())
                .await
                .map(|_| Reply::Unit)
        })
    }

    /// `complete`, blocking with the GIL released.
    #[pyo3(signature = (token, status=None, cost=None, now_ms=None))]
    fn complete_sync(
        &self,
        py: Python<'_>,
        token: String,
        status: Option<u16>,
        cost: Option<&Bound<'_, PyAny>>,
        now_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (cost, now_ms) = complete_values(cost, now_ms)?;
        let inner = &self.inner;
        runtime::block_on(
            py,
            inner.complete_values(&token, status, cost.as_ref(), now_ms.as_ref()),
        )
        .map(|_| ())
    }

    /// Forgets every policy's state for `key`; an awaitable.
    fn reset<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        host::submit(py, async move { inner.reset(&key).await.map(|_| Reply::Unit) })
    }

    /// `reset`, blocking with the GIL released.
    fn reset_sync(&self, py: Python<'_>, key: String) -> PyResult<()> {
        let inner = &self.inner;
        runtime::block_on(py, inner.reset(&key))
    }

    /// Sets a per-key override (rate, burst, optional TTL) in the store;
    /// an awaitable of the override as a dict.
    #[pyo3(signature = (key, policy=None, rate=None, burst=None, ttl=None, now_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn set_override<'py>(
        &self,
        py: Python<'py>,
        key: String,
        policy: Option<&Bound<'py, PyAny>>,
        rate: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        ttl: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec = override_spec(policy, rate, burst, ttl, now_ms)?;
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner.set_override(&key, &spec).await.map(|o| Reply::Json(o.to_value()))
        })
    }

    /// `set_override`, blocking with the GIL released.
    #[pyo3(signature = (key, policy=None, rate=None, burst=None, ttl=None, now_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn set_override_sync<'py>(
        &self,
        py: Python<'py>,
        key: String,
        policy: Option<&Bound<'py, PyAny>>,
        rate: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        ttl: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec = override_spec(policy, rate, burst, ttl, now_ms)?;
        let inner = &self.inner;
        let value = runtime::block_on(py, inner.set_override(&key, &spec))?.to_value();
        to_py(py, &value)
    }

    /// The override in force for `key` (under `policy`): an awaitable of a dict or None.
    #[pyo3(signature = (key, policy=None, now_ms=None))]
    fn get_override<'py>(
        &self,
        py: Python<'py>,
        key: String,
        policy: Option<String>,
        now_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        host::submit(py, async move {
            let found = inner.get_override(&key, policy.as_deref(), now_ms).await?;
            Ok(Reply::Json(found.map_or(Value::Null, |o| o.to_value())))
        })
    }

    /// `get_override`, blocking with the GIL released.
    #[pyo3(signature = (key, policy=None, now_ms=None))]
    fn get_override_sync<'py>(
        &self,
        py: Python<'py>,
        key: String,
        policy: Option<String>,
        now_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = &self.inner;
        let found = runtime::block_on(py, inner.get_override(&key, policy.as_deref(), now_ms))?;
        to_py(py, &found.map_or(Value::Null, |o| o.to_value()))
    }

    /// Removes the override of `key` (under `policy`): an awaitable of
    /// whether one was in force.
    #[pyo3(signature = (key, policy=None))]
    fn remove_override<'py>(
        &self,
        py: Python<'py>,
        key: String,
        policy: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner.remove_override(&key, policy.as_deref()).await.map(Reply::Bool)
        })
    }

    /// `remove_override`, blocking with the GIL released.
    #[pyo3(signature = (key, policy=None))]
    fn remove_override_sync(&self, py: Python<'_>, key: String, policy: Option<String>) -> PyResult<bool> {
        let inner = &self.inner;
        runtime::block_on(py, inner.remove_override(&key, policy.as_deref()))
    }

    /// Reloads the limiter's rules file (or options), `${NAME}` expanded
    /// anew, and swaps the rules at once: an awaitable of None. A bad file
    /// raises `ConfigError` naming the field and keeps the old rules.
    fn reload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        host::submit(py, async move { inner.reload().await.map(|_| Reply::Unit) })
    }

    /// `reload`, blocking with the GIL released.
    fn reload_sync(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        runtime::block_on(py, inner.reload())
    }

    /// Sets a policy-wide limit (rate, burst, optional TTL) of `policy` in
    /// the store: every key of it, in every process; an awaitable of the
    /// limit as a dict.
    #[pyo3(signature = (policy=None, rate=None, burst=None, ttl=None, now_ms=None))]
    fn set_limit<'py>(
        &self,
        py: Python<'py>,
        policy: Option<&Bound<'py, PyAny>>,
        rate: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        ttl: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec = override_spec(policy, rate, burst, ttl, now_ms)?;
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner.set_limit(&spec).await.map(|l| Reply::Json(l.to_value()))
        })
    }

    /// `set_limit`, blocking with the GIL released.
    #[pyo3(signature = (policy=None, rate=None, burst=None, ttl=None, now_ms=None))]
    fn set_limit_sync<'py>(
        &self,
        py: Python<'py>,
        policy: Option<&Bound<'py, PyAny>>,
        rate: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        ttl: Option<&Bound<'py, PyAny>>,
        now_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec = override_spec(policy, rate, burst, ttl, now_ms)?;
        let inner = &self.inner;
        let value = runtime::block_on(py, inner.set_limit(&spec))?.to_value();
        to_py(py, &value)
    }

    /// The policy-wide limit in force for `policy`: an awaitable of a dict or None.
    #[pyo3(signature = (policy=None, now_ms=None))]
    fn get_limit<'py>(
        &self,
        py: Python<'py>,
        policy: Option<String>,
        now_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        host::submit(py, async move {
            let found = inner.get_limit(policy.as_deref(), now_ms).await?;
            Ok(Reply::Json(found.map_or(Value::Null, |l| l.to_value())))
        })
    }

    /// `get_limit`, blocking with the GIL released.
    #[pyo3(signature = (policy=None, now_ms=None))]
    fn get_limit_sync<'py>(
        &self,
        py: Python<'py>,
        policy: Option<String>,
        now_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = &self.inner;
        let found = runtime::block_on(py, inner.get_limit(policy.as_deref(), now_ms))?;
        to_py(py, &found.map_or(Value::Null, |l| l.to_value()))
    }

    /// Removes the policy-wide limit of `policy`: an awaitable of whether
    /// one was in force.
    #[pyo3(signature = (policy=None))]
    fn remove_limit<'py>(&self, py: Python<'py>, policy: Option<String>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        host::submit(py, async move {
            inner.remove_limit(policy.as_deref()).await.map(Reply::Bool)
        })
    }

    /// `remove_limit`, blocking with the GIL released.
    #[pyo3(signature = (policy=None))]
    fn remove_limit_sync(&self, py: Python<'_>, policy: Option<String>) -> PyResult<bool> {
        let inner = &self.inner;
        runtime::block_on(py, inner.remove_limit(policy.as_deref()))
    }

    /// Prometheus text exposition of this limiter's metrics.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    /// Every metric family, read now, as a dict: `start_unix_nanos` and
    /// `families` (name, help, kind, points); what `polylimit.otel` bridges.
    fn metrics_snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.metrics_snapshot().to_value())
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
