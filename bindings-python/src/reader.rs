//! The reader of the core bridge's records (`polylimit::wire::packed`, read
//! by the core's `read_record`): each finished call's `Reply` as the Python
//! object its method returns, each error as its exception.

use polylimit::wire::packed::{read_record, ErrorRecord, Reply};
use polylimit::Limiter;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::IntoPyObjectExt;

use crate::convert::to_py;
use crate::decision::{PyDecision, PyOutcome};
use crate::errors::record_err;

/// Turns a call's reply into the Python object its method resolves to. The
/// limiter is the one the call ran on, for a reply that needs it (a lease).
pub(crate) type Convert = fn(Python<'_>, Reply, Option<&Limiter>) -> PyResult<Py<PyAny>>;

/// The Python value of every reply but an acquire's (`lease::acquired`
/// makes its `Lease`): here its decision and `(policy, key, id)` per lease.
pub(crate) fn value(py: Python<'_>, reply: Reply, _limiter: Option<&Limiter>) -> PyResult<Py<PyAny>> {
    match reply {
        Reply::Unit => Ok(py.None()),
        Reply::Bool(b) => b.into_py_any(py),
        Reply::Count(n) => n.into_py_any(py),
        Reply::Decision(d) => PyDecision(d).into_py_any(py),
        Reply::Decisions(ds) => ds.into_iter().map(PyDecision).collect::<Vec<_>>().into_py_any(py),
        Reply::Acquired(d, leases) => {
            let leases: Vec<_> = leases.into_iter().map(|l| (l.policy, l.key, l.id)).collect();
            (PyDecision(d), leases).into_py_any(py)
        }
        Reply::Outcome(o, _) => PyOutcome(o).into_py_any(py),
        Reply::Json(v) => Ok(to_py(py, &v)?.unbind()),
    }
}

/// A call's result as Python has it: the value, or the exception.
pub(crate) fn result(
    py: Python<'_>,
    result: Result<Reply, ErrorRecord>,
    convert: Convert,
    limiter: Option<&Limiter>,
) -> PyResult<Py<PyAny>> {
    result.map_err(record_err).and_then(|reply| convert(py, reply, limiter))
}

/// `_polylimit._read_records(batch)`: every record of a batch as
/// `(ctx, value)`, an error's value being its exception (not raised). For
/// the shared vectors; a malformed batch raises `ValueError`.
#[pyfunction]
pub(crate) fn _read_records(py: Python<'_>, batch: &Bound<'_, PyBytes>) -> PyResult<Vec<(u64, Py<PyAny>)>> {
    let mut bytes = batch.as_bytes();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (ctx, read) = read_record(&mut bytes).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let item = match result(py, read, value, None) {
            Ok(v) => v,
            Err(e) => e.into_value(py).into_any(),
        };
        out.push((ctx, item));
    }
    Ok(out)
}
