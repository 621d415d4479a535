//! What one HTTP request costs the core in heap allocations on the memory
//! store (deterministic, unlike time on a shared machine): `check_request`
//! with the example rules file, as `make bench`'s HTTP lines measure it.
//! Every response carries its rate-limit headers, so the outcome's are
//! made in two allocations, not one per name and one per value.
//!
//! The bounds are those of a debug build (`make test`'s); an optimised one
//! elides a few more (`make bench` prints 7 and 21).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use futures_util::FutureExt;
use polylimit::{Limiter, RequestInfo};

/// Counts this thread's allocations (the test harness runs tests side by side).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's layout, unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as for dealloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn limiter() -> Limiter {
    let rules = include_str!("../../examples/polylimit.yaml").replace("${REDIS_URL:-memory}", "memory");
    Limiter::from_rules(&rules).unwrap()
}

/// A request as a Go client sends it, behind the example file's trusted proxy.
fn request(method: &str, path: &str, route: &str, user: Option<&str>) -> RequestInfo {
    RequestInfo {
        method: method.into(),
        path: path.into(),
        route: Some(route.into()),
        peer: Some("127.0.0.1:50312".into()),
        headers: vec![
            ("Host".into(), "127.0.0.1:8080".into()),
            ("X-Forwarded-For".into(), "203.0.113.7".into()),
        ],
        user: user.map(Into::into),
        ..RequestInfo::default()
    }
}

/// The allocations of one allowed `check_request` of `req` (a second later
/// than the last one: every request is allowed and charged), after a few
/// to warm the limiter's tables, and the headers it answered.
fn per_request(req: &mut RequestInfo) -> (u64, Vec<(String, String)>) {
    let limiter = limiter();
    let mut now_ms = 1_700_000_000_000;
    let mut once = |req: &mut RequestInfo| {
        now_ms += 1000;
        req.now_ms = Some(now_ms);
        let before = allocations();
        let outcome = limiter.check_request(req).now_or_never().unwrap().unwrap();
        let made = allocations() - before;
        assert_eq!(outcome.status, None, "allowed");
        (made, outcome.headers.to_vec())
    };
    for _ in 0..5 {
        once(req);
    }
    once(req)
}

#[test]
fn one_rule_on_memory() {
    let (made, headers) = per_request(&mut request("GET", "/api/items", "/api/items", None));
    // The key, the target, the forwarding chain, the engine's decisions, the
    // outcome's decisions, its header fields and their values: 21 before the
    // headers shared one buffer and the target, its owner and the engine's
    // view of it one vector.
    assert!(made <= 10, "{made} allocations per request");
    let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
            "RateLimit-Policy",
            "RateLimit"
        ]
    );
}

#[test]
fn two_rules_on_memory() {
    let (made, headers) = per_request(&mut request(
        "POST",
        "/api/payments/42",
        "/api/payments/{id}",
        Some("acme"),
    ));
    // 36 before.
    assert!(made <= 23, "{made} allocations per request");
    assert_eq!(headers.len(), 5);
}
