//! Python values ⇄ JSON values, the form the core's options, rules and
//! requests take.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDelta, PyDeltaAccess, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::errors::config_error;

/// Converts dicts, lists, tuples, str, int, float, bool and None; a
/// `datetime.timedelta` becomes the duration text `"<n>ms"`, an `os.PathLike`
/// its path; any other object
/// with a `to_dict()` method (the typed `Policy`) is converted through it.
pub(crate) fn to_value(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(delta) = obj.cast::<PyDelta>() {
        return timedelta_ms(delta, field);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(config_error(field, &obj.str()?.to_string(), "is out of range"));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        return Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| config_error(field, &v.to_string(), "is not a finite number"));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let k: String = k.extract().map_err(|_| {
                config_error(
                    field,
                    &k.repr().map(|r| r.to_string()).unwrap_or_default(),
                    "is not a string key",
                )
            })?;
            let sub = if field.is_empty() {
                k.clone()
            } else {
                format!("{field}.{k}")
            };
            map.insert(k, to_value(&v, &sub)?);
        }
        return Ok(Value::Object(map));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            items.push(to_value(&item?, &format!("{field}[{i}]"))?);
        }
        return Ok(Value::Array(items));
    }
    if obj.hasattr("__fspath__")? {
        // A path (`pathlib.Path`, any `os.PathLike`): its text, as `rules_file` takes.
        return to_value(&obj.call_method0("__fspath__")?, field);
    }
    if obj.hasattr("to_dict")? {
        return to_value(&obj.call_method0("to_dict")?, field);
    }
    Err(config_error(
        field,
        &obj.repr()?.to_string(),
        "is not a dict, list, str, number, bool or None",
    ))
}

/// A timedelta as `"<n>ms"`, in whole milliseconds (finer is a `ConfigError`).
fn timedelta_ms(delta: &Bound<'_, PyDelta>, field: &str) -> PyResult<Value> {
    let micros = i128::from(delta.get_days()) * 86_400_000_000
        + i128::from(delta.get_seconds()) * 1_000_000
        + i128::from(delta.get_microseconds());
    if micros % 1000 != 0 {
        return Err(config_error(
            field,
            &delta.repr()?.to_string(),
            "is finer than a millisecond",
        ));
    }
    Ok(Value::String(format!("{}ms", micros / 1000)))
}

/// JSON → plain Python objects (dict, list, str, int, float, bool, None).
pub(crate) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}
