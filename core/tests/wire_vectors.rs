//! tests/conformance/wire/packed.json: the core writes every record to the
//! bytes written down, and reads them back to the same result. Set
//! `POLYLIMIT_UPDATE_VECTORS=1` to write the hex of a new record (then check
//! it by hand against the layout in `wire::packed`).

use std::path::PathBuf;

use polylimit::wire::packed::{read_record, write_record, ErrorRecord, Reply};
use polylimit::{Decision, Error, ErrorKind, Lease, Outcome, RuleDecision, Source};
use serde_json::Value;

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/wire/packed.json")
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn opt_str(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn decision(v: &Value) -> Decision {
    let source = v["source"].as_str().unwrap();
    Decision {
        allowed: v["allowed"].as_bool().unwrap(),
        limit: u64_of(&v["limit"]),
        remaining: u64_of(&v["remaining"]),
        reset_after_ms: u64_of(&v["reset_after_ms"]),
        retry_after_ms: v["retry_after_ms"].as_u64(),
        delay_ms: u64_of(&v["delay_ms"]),
        source: *Source::ALL.iter().find(|s| s.as_str() == source).unwrap(),
    }
}

fn outcome(v: &Value) -> Outcome {
    let strings = |v: &Value| -> Vec<(String, String)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| (opt_str(&p[0]).unwrap(), opt_str(&p[1]).unwrap()))
            .collect()
    };
    Outcome {
        status: v["status"].as_u64().map(|s| s as u16),
        headers: strings(&v["headers"]).into_iter().collect(),
        body: opt_str(&v["body"]),
        trailers: strings(&v["trailers"]).into_iter().collect(),
        delay_ms: u64_of(&v["delay_ms"]),
        decisions: v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| RuleDecision {
                rule: opt_str(&d["rule"]).unwrap().into(),
                policy: opt_str(&d["policy"]).unwrap().into(),
                decision: decision(d),
                shadow: d["shadow"].as_bool().unwrap(),
            })
            .collect(),
        leases: Vec::new(),
        completion: opt_str(&v["completion"]),
    }
}

/// The core error a vector's error record describes (its message is how it displays).
fn error(v: &Value) -> Error {
    let message = v["message"].as_str().unwrap();
    let after = |prefix: &str| message.strip_prefix(prefix).unwrap().to_string();
    match v["kind"].as_str().unwrap() {
        "config" => {
            let (field, value) = (opt_str(&v["field"]).unwrap(), opt_str(&v["value"]).unwrap());
            let message = after(&format!("{field}: {value} "));
            Error::Config { field, value, message }
        }
        "store" => {
            let key = opt_str(&v["key"]).unwrap();
            let message = after(&format!("store error for key {key:?}: "));
            Error::Store { key, message }
        }
        "store_unavailable" => Error::StoreUnavailable {
            message: after("store unavailable: "),
            source: None,
        },
        "closed" => Error::Closed,
        "internal" => Error::Internal(after("internal error: ")),
        other => panic!("error kind {other}"),
    }
}

fn result(record: &Value) -> Result<Reply, Error> {
    let v = &record["value"];
    Ok(match record["kind"].as_str().unwrap() {
        "error" => return Err(error(v)),
        "unit" => Reply::Unit,
        "bool" => Reply::Bool(v.as_bool().unwrap()),
        "count" => Reply::Count(u64_of(v)),
        "decision" => Reply::Decision(decision(v)),
        "decisions" => Reply::Decisions(v.as_array().unwrap().iter().map(decision).collect()),
        "acquired" => Reply::Acquired(
            decision(&v["decision"]),
            v["leases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| Lease {
                    policy: u64_of(&l["policy"]) as usize,
                    key: opt_str(&l["key"]).unwrap(),
                    id: opt_str(&l["id"]).unwrap(),
                })
                .collect(),
        ),
        "outcome" => {
            let o = outcome(v);
            let with = !o.decisions.is_empty();
            Reply::Outcome(o, with)
        }
        "json" => Reply::Json(v.clone()),
        other => panic!("record kind {other}"),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_core_writes_and_reads_every_record() {
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path()).unwrap()).unwrap();
    let update = std::env::var_os("POLYLIMIT_UPDATE_VECTORS").is_some();
    let mut batch = Vec::new();
    let mut failures = Vec::new();
    let records = doc["records"].as_array_mut().unwrap();
    assert!(!records.is_empty());
    for record in records.iter_mut() {
        let name = record["name"].as_str().unwrap().to_string();
        let ctx = u64_of(&record["ctx"]);
        let want = result(record);
        let mut bytes = Vec::new();
        write_record(&mut bytes, ctx, &want);
        batch.extend_from_slice(&bytes);
        if update {
            record["hex"] = Value::String(hex(&bytes));
        } else if record["hex"].as_str() != Some(&hex(&bytes)) {
            failures.push(format!("{name}: wrote {}, want {}", hex(&bytes), record["hex"]));
        }
        let mut rest = &bytes[..];
        let (got_ctx, got) = read_record(&mut rest).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(rest.is_empty(), "{name}: {} bytes left", rest.len());
        let want = want.map_err(|e| ErrorRecord::from(&e));
        if (got_ctx, &got) != (ctx, &want) {
            failures.push(format!("{name}: read {got_ctx} {got:?}, want {ctx} {want:?}"));
        }
        // A truncated record is malformed, never a panic or a shorter record.
        for n in 0..bytes.len() {
            assert!(read_record(&mut &bytes[..n]).is_err(), "{name}: truncated to {n}");
        }
    }
    if update {
        doc["batch"] = Value::String(hex(&batch));
        let text = serde_json::to_string_pretty(&doc).unwrap();
        std::fs::write(path(), text + "\n").unwrap();
        return;
    }
    if doc["batch"].as_str() != Some(&hex(&batch)) {
        failures.push("batch: not every record one after another".into());
    }
    // The batch reads back record by record, in order.
    let mut rest = &batch[..];
    let mut ctxs = Vec::new();
    while !rest.is_empty() {
        ctxs.push(read_record(&mut rest).unwrap().0);
    }
    let want: Vec<u64> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u64_of(&r["ctx"]))
        .collect();
    assert_eq!(ctxs, want);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let kinds: Vec<ErrorKind> = ErrorKind::ALL.to_vec();
    for kind in kinds {
        assert!(
            doc["records"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["value"]["kind"] == kind.as_str()),
            "no vector for error kind {}",
            kind.as_str()
        );
    }
}
