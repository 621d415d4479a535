//! The core's modules form layers, and a lower module never imports a higher
//! one: policy → algorithm → store → resilience → engine → http, with config,
//! the public `Limiter` (`limiter`) and wire on top. `metrics` (the counters
//! and their text form) sits below `resilience` and `engine`, which record
//! into it; above them it would have to be called back from below. The timeout of a store call lives in the
//! Redis store, because a timeout must also drop that store's connection.
//! This reads the sources and fails on any `crate::<module>` path (or a root
//! re-export of one) that points up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Every module of `core/src`, lowest first. A new module must be placed here.
const LAYERS: &[&str] = &[
    // Foundation: errors, durations, `${NAME}` expansion, document parsing.
    "error",
    "duration",
    "env",
    "document",
    // The tokio runtime the bindings run checks on.
    "runtime",
    // This process's id, cached and forgotten in a forked child.
    "pid",
    // The work a limiter runs off the request's path, counted to wait for it.
    "background",
    // The option names of each language.
    "options",
    // The client helper's Retry-After rules, for outgoing calls (errors under each language's names).
    "client",
    // A policy's `adaptive` field and the alerts' types.
    "adaptive",
    "policy",
    "algorithm",
    // The result of a check, built from the algorithms' verdicts.
    "decision",
    "store",
    // The parts `resilience` and `engine` are made of: the breaker and the
    // counters the limiter records into.
    "breaker",
    "metrics",
    // The alerts the limiter records transitions into.
    "anomaly",
    "resilience",
    "engine",
    // Per-key overrides: the limiter's set/get/remove (their storage is the store's).
    "overrides",
    // Policy-wide limits set at runtime: set/get/remove, as overrides.
    "limits",
    "http",
    "config",
    // The documentation site's reference page, built from the options and the configuration.
    "reference",
    // The public `Limiter`: the front door over the engine, the HTTP layer and the configuration.
    "limiter",
    "wire",
    // The completion bridge: runs a binding's calls, hands their packed results back in batches.
    "bridge",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("core/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `http/rules.rs` → `http`.
fn module_of(path: &Path) -> String {
    let relative = path.strip_prefix(src()).expect("a file under core/src");
    let first = relative
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segment of every path after `crate::` in `code` (comments
/// removed), `crate::{a::X, b}` counting as `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // Top-level items of the group: the first segment of each.
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            found.push(identifier(group[start..i].trim()).to_string());
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            found.push(identifier(group[start..i].trim()).to_string());
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
            } else {
                found.push(identifier(rest).to_string());
            }
        }
    }
    found.retain(|name| !name.is_empty());
    found
}

/// Names lib.rs re-exports at the root (`pub use http::{Limiter, …}`) → their module.
fn root_exports() -> HashMap<String, String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs is readable");
    let mut exports = HashMap::new();
    for line in lib.lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = identifier(rest).to_string();
        let items = rest.split_once("::").map_or("", |(_, items)| items);
        let items = items
            .trim_end_matches(';')
            .trim_start_matches('{')
            .trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            let name = name.rsplit("::").next().unwrap_or(name);
            exports.insert(name.trim().to_string(), module.clone());
        }
    }
    exports
}

/// Every upward import in the core: `file: module → higher module`.
fn upward_imports() -> Vec<String> {
    let rank: HashMap<&str, usize> = LAYERS.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let exports = root_exports();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in files {
        let module = module_of(&file);
        if module == "lib" {
            continue;
        }
        let Some(&own) = rank.get(module.as_str()) else {
            problems.push(format!("{}: module `{module}` is not in LAYERS", file.display()));
            continue;
        };
        let code = std::fs::read_to_string(&file).expect("a readable source file");
        for name in crate_paths(&code) {
            let target = match rank.get(name.as_str()) {
                Some(_) => name.clone(),
                None => match exports.get(&name) {
                    Some(module) => module.clone(),
                    None => {
                        problems.push(format!(
                            "{}: `crate::{name}` is neither a module nor a root export",
                            file.display()
                        ));
                        continue;
                    }
                },
            };
            if rank[target.as_str()] > own {
                problems.push(format!(
                    "{}: `{module}` imports `crate::{name}` from the higher layer `{target}`",
                    file.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn no_module_imports_a_higher_layer() {
    let problems = upward_imports();
    assert!(problems.is_empty(), "layering broken:\n{}", problems.join("\n"));
}

#[test]
fn every_module_of_lib_rs_is_placed() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs is readable");
    for line in lib.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("mod ").or_else(|| line.strip_prefix("pub mod ")) else {
            continue;
        };
        let name = identifier(rest);
        assert!(LAYERS.contains(&name), "module `{name}` of lib.rs is not in LAYERS");
    }
}

#[test]
fn the_scanner_sees_every_form_of_import() {
    let code = "use crate::http::rules::{HttpRules, HTTP_FIELDS};\n\
                use crate::{limiter::Engine, wire};\n\
                let x = crate::config::load();\n\
                // crate::metrics in a comment is no import\n";
    assert_eq!(crate_paths(code), ["http", "limiter", "wire", "config"]);
}
