//! Reload (issue 38): a running limiter takes new rules atomically, keeps
//! the state of the policies whose numbers did not change, starts the others
//! under new state keys, keeps serving on a bad file, and a `watch` picks up
//! a changed file. On the memory store and on a real Redis; decisions at an
//! explicit `now_ms`, never by sleeping (the watch test waits for its poll).

mod support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use polylimit::{CheckOptions, Error, Limiter, Naming, OverrideSpec, RequestInfo};
use serde_json::json;

static REDIS: LazyLock<support::RedisServer> = LazyLock::new(support::RedisServer::shared);

/// In a window of every test's windows (aligned to 1 min, 2 min and 1 h).
const NOW: i64 = 1_700_000_040_000;

fn at(now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    }
}

/// A rules file of this test (removed when dropped).
struct RulesFile(PathBuf);

impl RulesFile {
    fn new(name: &str, text: &str) -> RulesFile {
        let path = std::env::temp_dir().join(format!("polylimit-reload-{}-{name}.yaml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        RulesFile(path)
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }

    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for RulesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The stores a test runs on: `memory`, and Redis with a prefix of its own.
fn stores(prefix: &str) -> Vec<(&'static str, String)> {
    vec![
        ("memory", "store: memory\n".to_string()),
        (
            "redis",
            format!("store: {}\nprefix: {prefix}\ntimeout: 10s\n", REDIS.url()),
        ),
    ]
}

fn limiter(file: &RulesFile) -> Limiter {
    Limiter::build(Naming::Snake, &json!({ "rules_file": file.path() })).unwrap()
}

fn request(user: &str) -> RequestInfo {
    RequestInfo {
        method: "GET".into(),
        path: "/api/items".into(),
        peer: Some("198.51.100.7".into()),
        user: Some(user.into()),
        now_ms: Some(NOW),
        ..Default::default()
    }
}

#[tokio::test]
async fn state_is_kept_unless_the_numbers_it_is_measured_in_change() {
    for (store, head) in stores("reload-kept") {
        let rules = |policy: &str| format!("{head}policies:\n  api: {policy}\n");
        let file = RulesFile::new(
            &format!("kept-{store}"),
            &rules("{ algorithm: fixed_window, rate: 5/min }"),
        );
        let limiter = limiter(&file);
        for _ in 0..3 {
            assert!(limiter.check_with("k", at(NOW)).await.unwrap().allowed);
        }
        // The limit changed, the window did not: the 3 admitted still count.
        file.write(&rules("{ algorithm: fixed_window, rate: 6/min }"));
        limiter.reload().await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!((d.limit, d.remaining), (6, 2), "{store}: state kept");
        // The window changed: new state keys, a fresh window.
        file.write(&rules("{ algorithm: fixed_window, rate: 6/2min }"));
        limiter.reload().await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!((d.limit, d.remaining), (6, 5), "{store}: fresh state");
        // Back to the old window: its state is there again (same keys).
        file.write(&rules("{ algorithm: fixed_window, rate: 6/min }"));
        limiter.reload().await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!(d.remaining, 1, "{store}: the old window's state, under its own keys");
        // The algorithm changed: fresh.
        file.write(&rules("{ algorithm: sliding_window_counter, rate: 6/min }"));
        limiter.reload().await.unwrap();
        assert_eq!(limiter.check_with("k", at(NOW)).await.unwrap().remaining, 5, "{store}");
        if store == "redis" {
            for key in [
                "reload-kept:fixed_window:api:p60000:{k}",
                "reload-kept:fixed_window:api:p120000:{k}",
                "reload-kept:sliding_window_counter:api:p60000:{k}",
            ] {
                assert_eq!(
                    REDIS.command(&format!("EXISTS {key}")).as_deref(),
                    Some(":1\r\n"),
                    "{key}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_scaled_state_starts_afresh_when_its_count_changes() {
    for (store, head) in stores("reload-gcra") {
        let rules = |rate: &str, burst: u32| {
            format!("{head}policies:\n  api: {{ algorithm: gcra, rate: {rate}, burst: {burst} }}\n")
        };
        let file = RulesFile::new(&format!("gcra-{store}"), &rules("10/s", 5));
        let limiter = limiter(&file);
        for _ in 0..5 {
            assert!(limiter.check_with("k", at(NOW)).await.unwrap().allowed);
        }
        assert!(!limiter.check_with("k", at(NOW)).await.unwrap().allowed);
        // Burst only: the TAT is kept (still empty).
        file.write(&rules("10/s", 6));
        limiter.reload().await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert!(d.allowed && d.remaining == 0, "{store}: kept: {d:?}");
        // The count: the TAT's remainder is in 1/count ms, so new keys.
        file.write(&rules("20/2s", 6));
        limiter.reload().await.unwrap();
        assert_eq!(
            limiter.check_with("k", at(NOW)).await.unwrap().remaining,
            5,
            "{store}: fresh"
        );
        if store == "redis" {
            for key in ["reload-gcra:gcra:api:p1000c10:{k}", "reload-gcra:gcra:api:p2000c20:{k}"] {
                assert_eq!(
                    REDIS.command(&format!("EXISTS {key}")).as_deref(),
                    Some(":1\r\n"),
                    "{key}"
                );
            }
        }
    }
}

#[tokio::test]
async fn overrides_and_penalties_survive_a_reload_that_changes_the_window() {
    for (store, head) in stores("reload-records") {
        let rules = |rate: &str| {
            format!(
                "{head}overrides: true\npolicies:\n  api: {{ algorithm: fixed_window, rate: {rate}, \
                 penalty: {{ threshold: 1, within: 1h, cooldowns: [1h] }} }}\n"
            )
        };
        let file = RulesFile::new(&format!("records-{store}"), &rules("2/min"));
        let limiter = limiter(&file);
        let mut spec = OverrideSpec::new("50/min");
        spec.now_ms = Some(NOW);
        limiter.set_override("vip", &spec).await.unwrap();
        for _ in 0..3 {
            limiter.check_with("abuser", at(NOW)).await.unwrap();
        }
        let blocked = limiter.check_with("abuser", at(NOW + 1)).await.unwrap();
        assert_eq!(blocked.source, polylimit::Source::Penalty, "{store}");
        file.write(&rules("2/2min"));
        limiter.reload().await.unwrap();
        let o = limiter.get_override("vip", None, Some(NOW)).await.unwrap();
        assert!(o.is_some(), "{store}: the override stays");
        let d = limiter.check_with("abuser", at(NOW + 2)).await.unwrap();
        assert_eq!(d.source, polylimit::Source::Penalty, "{store}: the block stays");
        let d = limiter.check_with("vip", at(NOW + 2)).await.unwrap();
        assert_eq!(d.limit, 50, "{store}: the override's numbers");
    }
}

#[tokio::test]
async fn a_bad_reload_keeps_serving_and_is_counted() {
    for (store, head) in stores("reload-bad") {
        let rules = |policy: &str| format!("{head}policies:\n  api: {policy}\n");
        let file = RulesFile::new(
            &format!("bad-{store}"),
            &rules("{ algorithm: fixed_window, rate: 3/min }"),
        );
        let limiter = limiter(&file);
        assert!(limiter.check_with("k", at(NOW)).await.unwrap().allowed);
        file.write(&rules("{ algorithm: fixed_window, rate: often }"));
        match limiter.reload().await {
            Err(Error::Config { field, value, .. }) => {
                assert_eq!((field.as_str(), value.as_str()), ("policies.api.rate", "\"often\""))
            }
            other => panic!("{store}: {other:?}"),
        }
        file.write("policies: [");
        assert!(matches!(limiter.reload().await, Err(Error::Config { .. })), "{store}");
        // A setting that needs a restart.
        file.write("store: memory\nprefix: other\npolicies:\n  api: { rate: 1/s }\n");
        match limiter.reload().await {
            Err(Error::Config { field, .. }) => assert!(field == "prefix" || field == "store", "{store}: {field}"),
            other => panic!("{store}: {other:?}"),
        }
        // The old rules still decide, on their state.
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!((d.limit, d.remaining), (3, 1), "{store}");
        file.write(&rules("{ algorithm: fixed_window, rate: 4/min }"));
        limiter.reload().await.unwrap();
        let text = limiter.metrics_text();
        assert!(
            text.contains("polylimit_config_reloads_total{result=\"error\"} 3"),
            "{store}: {text}"
        );
        assert!(
            text.contains("polylimit_config_reloads_total{result=\"ok\"} 1"),
            "{store}: {text}"
        );
        assert!(
            text.contains(
                "polylimit_requests_total{policy=\"api\",route=\"\",decision=\"allowed\",source=\"store\"} 2"
            ),
            "{store}: a policy's counters carry over: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_under_load_loses_no_decision_and_admits_no_extra() {
    for (store, head) in stores("reload-load") {
        // The two files differ in policies (order and count), never in api's numbers.
        let a = format!("{head}policies:\n  api: {{ algorithm: fixed_window, rate: 200/min }}\nrules:\n  - {{ key: [user], policy: api }}\n");
        let b = format!(
            "{head}policies:\n  aaa: {{ rate: 1000/s }}\n  api: {{ algorithm: fixed_window, rate: 200/min }}\n\
             rules:\n  - {{ key: [user], policy: api }}\n"
        );
        let file = RulesFile::new(&format!("load-{store}"), &a);
        let limiter = limiter(&file);
        let admitted = Arc::new(AtomicUsize::new(0));
        let decided = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (limiter, admitted, decided) = (limiter.clone(), admitted.clone(), decided.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let outcome = limiter.check_request(&request("u1")).await.unwrap();
                    decided.fetch_add(1, Ordering::Relaxed);
                    if outcome.status.is_none() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        let reloads = {
            let (limiter, path) = (limiter.clone(), file.0.clone());
            tokio::spawn(async move {
                for n in 0..40 {
                    std::fs::write(&path, if n % 2 == 0 { &b } else { &a }).unwrap();
                    limiter.reload().await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        };
        for t in tasks {
            t.await.unwrap();
        }
        reloads.await.unwrap();
        assert_eq!(decided.load(Ordering::Relaxed), 400, "{store}");
        assert_eq!(admitted.load(Ordering::Relaxed), 200, "{store}: exactly the limit");
    }
}

#[tokio::test]
async fn a_token_given_before_a_reload_completes_on_the_state_it_charged() {
    for (store, head) in stores("reload-token") {
        let a = format!(
            "{head}policies:\n  api: {{ algorithm: fixed_window, rate: 3/min }}\n\
             rules:\n  - {{ key: [user], policy: api, count: failed }}\n"
        );
        // api moves to index 1 and its limit changes, its window does not.
        let b = format!(
            "{head}policies:\n  aaa: {{ rate: 1000/s }}\n  api: {{ algorithm: fixed_window, rate: 4/min }}\n\
             rules:\n  - {{ key: [user], policy: api, count: failed }}\n"
        );
        let file = RulesFile::new(&format!("token-{store}"), &a);
        let limiter = limiter(&file);
        let outcome = limiter.check_request(&request("u1")).await.unwrap();
        let token = outcome.completion.expect("a token");
        file.write(&b);
        limiter.reload().await.unwrap();
        // A success is not counted: the charge goes back to api's state.
        assert_eq!(limiter.complete(&token, Some(200)).await.unwrap(), 1, "{store}");
        let outcome = limiter.peek_request(&request("u1")).await.unwrap();
        assert_eq!(
            outcome.decisions[0].decision.remaining, 3,
            "{store}: nothing charged (a peek counts itself)"
        );
        assert_eq!(limiter.complete(&token, Some(200)).await.unwrap(), 0, "{store}: once");
    }
}

#[tokio::test]
async fn a_route_rule_follows_a_reload() {
    let rules = |rate: &str| format!("store: memory\npolicies:\n  api: {{ algorithm: fixed_window, rate: {rate} }}\n");
    let file = RulesFile::new("route", &rules("1/min"));
    let limiter = limiter(&file);
    let rule = limiter.route_rule(&["user"], Some("api")).unwrap();
    assert!(limiter
        .check_route(&request("u"), &rule)
        .await
        .unwrap()
        .status
        .is_none());
    assert_eq!(
        limiter.check_route(&request("u"), &rule).await.unwrap().status,
        Some(429)
    );
    file.write(&rules("3/min"));
    limiter.reload().await.unwrap();
    assert!(limiter
        .check_route(&request("u"), &rule)
        .await
        .unwrap()
        .status
        .is_none());
    file.write("store: memory\npolicies:\n  other: { rate: 1/s }\n");
    limiter.reload().await.unwrap();
    match limiter.check_route(&request("u"), &rule).await {
        Err(Error::Config { field, .. }) => assert_eq!(field, "policy"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn watch_picks_up_a_changed_file_and_needs_one() {
    let rules = |rate: &str| format!("store: memory\npolicies:\n  api: {{ algorithm: fixed_window, rate: {rate} }}\n");
    let file = RulesFile::new("watch", &rules("3/min"));
    let limiter = Limiter::build(Naming::Snake, &json!({ "rules_file": file.path(), "watch": "50ms" })).unwrap();
    let count = |l: &Limiter| l.policies().next().map(|p| p.count());
    assert_eq!(limiter.rules_generation(), 0);
    file.write(&rules("7/min"));
    let until = Instant::now() + Duration::from_secs(10);
    while count(&limiter) != Some(7) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(&limiter), Some(7), "the watch reloaded the file");
    assert_eq!(limiter.rules_generation(), 1, "one swap, seen by a binding's cache");
    file.write(&rules("never"));
    let until = Instant::now() + Duration::from_secs(10);
    while !limiter
        .metrics_text()
        .contains("polylimit_config_reloads_total{result=\"error\"} 1")
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(limiter
        .metrics_text()
        .contains("polylimit_config_reloads_total{result=\"error\"} 1"));
    assert_eq!(count(&limiter), Some(7), "a bad file keeps the old rules");
    assert_eq!(limiter.rules_generation(), 1, "a failed reload swaps nothing");
    limiter.close();

    for options in [
        json!({ "policy": { "rate": "1/s" }, "watch": true }),
        json!({ "rules": "policies: { api: { rate: 1/s } }", "watch": "1s" }),
    ] {
        match Limiter::build(Naming::Snake, &options) {
            Err(Error::Config { field, .. }) => assert_eq!(field, "watch"),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("watch without rules_file"),
        }
    }
    match Limiter::build(Naming::Snake, &json!({ "rules_file": file.path(), "watch": "soon" })) {
        Err(Error::Config { field, .. }) => assert_eq!(field, "watch"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a bad watch"),
    }
}

/// `watch` may stand in the rules file itself (the example apps only get a
/// path): the file then polls itself, an option given in code wins over it,
/// and a document that is no file (rules text, a parsed document) cannot ask.
#[tokio::test]
async fn a_rules_file_may_ask_to_be_watched() {
    let rules = |watch: &str, rate: &str| {
        format!("watch: {watch}\nstore: memory\npolicies:\n  api: {{ algorithm: fixed_window, rate: {rate} }}\n")
    };
    let count = |l: &Limiter| l.policies().next().map(|p| p.count());
    let file = RulesFile::new("watch-in-file", &rules("50ms", "3/min"));
    let limiter = Limiter::from_file(file.path()).unwrap();
    file.write(&rules("50ms", "7/min"));
    let until = Instant::now() + Duration::from_secs(10);
    while count(&limiter) != Some(7) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(&limiter), Some(7), "the file's own watch reloaded it");
    limiter.close();

    // `watch` in code wins over the file's: a file whose own `watch` is bad
    // builds and reloads with `watch: false` given.
    file.write(&rules("sometimes", "9/min"));
    let off = Limiter::build(Naming::Snake, &json!({ "rules_file": file.path(), "watch": false })).unwrap();
    assert_eq!(count(&off), Some(9));
    file.write(&rules("sometimes", "11/min"));
    off.reload().await.unwrap();
    assert_eq!(count(&off), Some(11));
    off.close();

    // A variable in the file: `true` is a boolean there too (every second).
    std::env::set_var("POLYLIMIT_TEST_WATCH_IN_FILE", "true");
    file.write(&rules("${POLYLIMIT_TEST_WATCH_IN_FILE}", "3/min"));
    Limiter::from_file(file.path()).unwrap().close();
    file.write(&rules("sometimes", "3/min"));
    match Limiter::from_file(file.path()) {
        Err(Error::Config { field, .. }) => assert_eq!(field, "watch"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a bad watch in the file"),
    }
    let text = rules("1s", "3/min");
    match Limiter::from_rules(&text) {
        Err(Error::Config { field, .. }) => assert_eq!(field, "watch"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("watch in rules text"),
    }
    match Limiter::from_document(&polylimit::parse_rules(&text).unwrap()) {
        Err(Error::Config { field, .. }) => assert_eq!(field, "watch"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("watch in a parsed document"),
    }
}

/// A policy-wide limit stays with its policy when a reload moves it to
/// another place among the policies (the memory store once kept limits by
/// the policy's index: after `a` was removed, `b` lost its limit).
#[tokio::test]
async fn a_policy_wide_limit_follows_its_policy_when_the_policies_change() {
    for (store, head) in stores("reload-limit-order") {
        let policy = |name: &str| format!("  {name}: {{ algorithm: fixed_window, rate: 100/h }}\n");
        let file = RulesFile::new(
            &format!("limit-order-{store}"),
            &format!("{head}overrides: true\npolicies:\n{}{}", policy("a"), policy("b")),
        );
        let limiter = limiter(&file);
        let mut spec = OverrideSpec::new("2/h");
        spec.policy = Some("b".into());
        spec.now_ms = Some(NOW);
        limiter.set_limit(&spec).await.unwrap();
        // `a` goes: `b` is now the first policy.
        file.write(&format!("{head}overrides: true\npolicies:\n{}", policy("b")));
        limiter.reload().await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!(d.limit, 2, "{store}: b keeps its limit");
    }
}
