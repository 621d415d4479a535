//! The C surface of the core's completion bridge (`polylimit::bridge`): a
//! host submits pending operations with a `ctx` of its own and takes their
//! results back in batches of packed records (`wire::packed`: `u64` ctx,
//! `u8` kind, payload, back to back), woken by one byte on a pipe it watches
//! or blocking in `polylimit_bridge_take_wait`. No runtime thread ever calls
//! into the host's language.

use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use polylimit::bridge::{Bridge, Wake};

use crate::pending::polylimit_pending_t;
use crate::{runtime, Status};

/// A completion bridge. Thread-safe for submitting; one thread takes at a
/// time. Freed once with `polylimit_bridge_free`.
pub struct polylimit_bridge_t {
    pub(crate) inner: Bridge,
    /// The records of the last take, lent to the caller until the next.
    lent: Mutex<Vec<u8>>,
    /// The wake-up's write end, -1 once the bridge is freed: calls still
    /// running then write nothing to an fd the host may have closed.
    wake_fd: Arc<Mutex<RawFd>>,
}

/// A lock that a panic elsewhere never poisons for good (nothing panics
/// while one of these is held).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bridge whose finished records wake the host by one byte written to
/// `wake_fd` (the write end of a non-blocking pipe), or never (`wake_fd` =
/// -1: the host blocks in `polylimit_bridge_take_wait`). The first record
/// wakes the host. NULL if the runtime cannot start.
#[no_mangle]
pub extern "C" fn polylimit_bridge_open(wake_fd: i32) -> *mut polylimit_bridge_t {
    let open = catch_unwind(|| {
        let fd = Arc::new(Mutex::new(wake_fd));
        let wake = if wake_fd < 0 {
            Wake::None
        } else {
            let fd = fd.clone();
            Wake::Call(Box::new(move || {
                let fd = lock(&fd);
                if *fd >= 0 {
                    // SAFETY: the host's open fd (not yet freed: checked under
                    // the lock free takes); ManuallyDrop never closes it.
                    let mut pipe = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(*fd) });
                    // A full pipe already holds a byte the host will read: nothing is lost.
                    let _ = pipe.write(&[1]);
                }
            }))
        };
        Box::into_raw(Box::new(polylimit_bridge_t {
            inner: Bridge::new(runtime().handle(), wake),
            lent: Mutex::new(Vec::new()),
            wake_fd: fd,
        }))
    });
    open.unwrap_or(std::ptr::null_mut())
}

/// Frees a bridge. Calls still running finish and their records are
/// dropped; once this returns, nothing more is written to `wake_fd`. NULL
/// is ignored.
///
/// # Safety
/// `bridge` is NULL or a bridge from `polylimit_bridge_open` not yet freed;
/// no call using it may be running or start afterwards.
#[no_mangle]
pub unsafe extern "C" fn polylimit_bridge_free(bridge: *mut polylimit_bridge_t) {
    if !bridge.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the bridge came from `Box::into_raw` in `polylimit_bridge_open`, freed once.
            let bridge = unsafe { Box::from_raw(bridge) };
            *lock(&bridge.wake_fd) = -1;
        }));
    }
}

/// Runs a pending operation (from any `polylimit_limiter_try_*`) on the
/// runtime; its result comes back once as the packed record of `ctx`
/// (decision, outcome, acquired, count, unit, or an error). Consumes
/// `pending`. Returns `POLYLIMIT_PENDING`, or `POLYLIMIT_INVALID_ARGUMENT`
/// (freeing `pending`, queueing nothing) when `pending` or `bridge` is NULL.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet
/// submitted or freed; `bridge` is NULL or a live bridge.
#[no_mangle]
pub unsafe extern "C" fn polylimit_pending_submit(
    pending: *mut polylimit_pending_t,
    bridge: *const polylimit_bridge_t,
    ctx: u64,
) -> i32 {
    if pending.is_null() {
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    // SAFETY: `pending` came from `Box::into_raw` in this crate and is consumed once.
    let pending = unsafe { Box::from_raw(pending) };
    let submitted = catch_unwind(AssertUnwindSafe(move || {
        // SAFETY: the caller passes NULL or a live bridge.
        let Some(bridge) = (unsafe { bridge.as_ref() }) else {
            return Status::POLYLIMIT_INVALID_ARGUMENT;
        };
        bridge.inner.submit_boxed(ctx, pending.work);
        Status::POLYLIMIT_PENDING
    }));
    submitted.unwrap_or(Status::POLYLIMIT_INTERNAL) as i32
}

/// Lends every record finished since the last take (packed, back to back)
/// in `*records` (`*len` bytes) until the next take on this bridge; returns
/// how many. Never blocks; when none, the next record wakes `wake_fd`. 0
/// (writing nothing) when an argument is NULL.
///
/// # Safety
/// `bridge` is NULL or a live bridge; `records` and `len` are NULL or
/// writable. One thread takes at a time.
#[no_mangle]
pub unsafe extern "C" fn polylimit_bridge_take(
    bridge: *const polylimit_bridge_t,
    records: *mut *const u8,
    len: *mut usize,
) -> usize {
    // SAFETY: the caller's promises, passed on.
    unsafe { take(bridge, records, len, |b, out| b.try_take(out)) }
}

/// `polylimit_bridge_take`, waiting up to `timeout_ms` for a record when
/// there is none (then 0). Never arms the wake-up.
///
/// # Safety
/// As `polylimit_bridge_take`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_bridge_take_wait(
    bridge: *const polylimit_bridge_t,
    timeout_ms: u32,
    records: *mut *const u8,
    len: *mut usize,
) -> usize {
    let timeout = Duration::from_millis(u64::from(timeout_ms));
    // SAFETY: the caller's promises, passed on.
    unsafe { take(bridge, records, len, |b, out| b.take_wait(out, timeout)) }
}

/// Takes with `how` into the lent buffer and lends it.
///
/// # Safety
/// As `polylimit_bridge_take`.
unsafe fn take(
    bridge: *const polylimit_bridge_t,
    records: *mut *const u8,
    len: *mut usize,
    how: impl FnOnce(&Bridge, &mut Vec<u8>) -> usize,
) -> usize {
    // SAFETY: the caller passes NULL or a live bridge.
    let Some(bridge) = (unsafe { bridge.as_ref() }) else {
        return 0;
    };
    if records.is_null() || len.is_null() {
        return 0;
    }
    let taken = catch_unwind(AssertUnwindSafe(|| {
        let mut lent = lock(&bridge.lent);
        let n = how(&bridge.inner, &mut lent);
        // SAFETY: checked non-NULL; the caller promises writable pointers.
        // The bytes stay put until the next take replaces `lent`.
        unsafe { (*records, *len) = (lent.as_ptr(), lent.len()) };
        n
    }));
    taken.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{polylimit_limiter_build, polylimit_limiter_free, polylimit_limiter_t};
    use polylimit::wire::packed::{read_record, ErrorRecord, Reply};
    use polylimit::{ErrorKind, RequestInfo, Source};

    /// Every record of one blocking take of `n`.
    fn take_all(bridge: *const polylimit_bridge_t, n: usize) -> Vec<(u64, Result<Reply, ErrorRecord>)> {
        let (mut records, mut len) = (std::ptr::null(), 0);
        let mut out = Vec::new();
        while out.len() < n {
            // SAFETY: a live bridge, writable locals; this test is the only reader.
            let got = unsafe { polylimit_bridge_take_wait(bridge, 10_000, &mut records, &mut len) };
            assert!(got > 0, "no record within 10 s");
            // SAFETY: lent until the next take.
            let mut bytes = unsafe { std::slice::from_raw_parts(records, len) };
            while !bytes.is_empty() {
                out.push(read_record(&mut bytes).unwrap());
            }
        }
        out
    }

    /// A limiter whose store accepts connections and never answers (`silent`
    /// listens, nobody reads): every call waits for it until the timeout,
    /// then falls back open.
    fn silent_store(silent: &std::net::TcpListener, policy: &str) -> *mut polylimit_limiter_t {
        let port = silent.local_addr().unwrap().port();
        let options = format!(r#"{{"Policy": {policy}, "Store": "redis://127.0.0.1:{port}", "Timeout": 300000000}}"#);
        let options = std::ffi::CString::new(options).unwrap();
        let mut limiter = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and writable locals.
        let rc = unsafe { polylimit_limiter_build(options.as_ptr(), &mut limiter, std::ptr::null_mut()) };
        assert_eq!(rc, Status::POLYLIMIT_OK as i32);
        limiter
    }

    fn submit(bridge: *const polylimit_bridge_t, ctx: u64, work: polylimit::bridge::Call) {
        submit_pending(bridge, ctx, Box::into_raw(Box::new(polylimit_pending_t { work })));
    }

    fn submit_pending(bridge: *const polylimit_bridge_t, ctx: u64, pending: *mut polylimit_pending_t) {
        // SAFETY: a pending operation of this crate, consumed once; a live bridge.
        let rc = unsafe { polylimit_pending_submit(pending, bridge, ctx) };
        assert_eq!(rc, Status::POLYLIMIT_PENDING as i32);
    }

    #[test]
    fn each_pending_operation_comes_back_as_its_record() {
        let bridge = polylimit_bridge_open(-1);
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let limiter = silent_store(
            &silent,
            r#"{"Algorithm": "concurrency", "Limit": 3, "OnStoreError": "fail_open"}"#,
        );
        let (mut out_len, mut owned, mut pending) = (0, std::ptr::null_mut(), std::ptr::null_mut());
        let mut request = Vec::new();
        let peer = RequestInfo {
            peer: Some("203.0.113.7".into()),
            ..RequestInfo::default()
        };
        polylimit::wire::packed::write_request(&peer, &mut request);
        // SAFETY: a live limiter, `request` readable, writable locals.
        let rc = unsafe {
            crate::limiter::polylimit_limiter_try_check_request(
                limiter,
                request.as_ptr(),
                request.len(),
                0,
                0,
                crate::packed::POLYLIMIT_WITH_DECISIONS,
                std::ptr::null_mut(),
                0,
                &mut out_len,
                &mut owned,
                &mut pending,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, Status::POLYLIMIT_PENDING as i32);
        submit_pending(bridge, 1, pending);
        let leases = r#"[[0, "k", "id"]]"#;
        let mut released = 0;
        // SAFETY: as above.
        let rc = unsafe {
            crate::lease::polylimit_limiter_try_release(
                limiter,
                leases.as_ptr(),
                leases.len(),
                -1,
                &mut released,
                &mut pending,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, Status::POLYLIMIT_PENDING as i32);
        submit_pending(bridge, 2, pending);
        submit(bridge, 3, Box::pin(async { Ok(Reply::Unit) }));
        submit(
            bridge,
            4,
            Box::pin(async { Err(polylimit::Error::config("policy", "\"x\"", "is not a policy")) }),
        );
        submit(
            bridge,
            5,
            Box::pin(async {
                if true {
                    panic!("boom");
                }
                Ok(Reply::Unit)
            }),
        );
        let mut got = take_all(bridge, 5);
        got.sort_by_key(|r| r.0);
        match &got[0] {
            (1, Ok(Reply::Outcome(o, true))) => {
                assert_eq!(o.status, None);
                assert_eq!(o.decisions.len(), 1);
                assert_eq!(o.decisions[0].decision.source, Source::FailOpen);
            }
            other => panic!("the request's record: {other:?}"),
        }
        assert_eq!(got[1], (2, Ok(Reply::Count(0))));
        assert_eq!(got[2], (3, Ok(Reply::Unit)));
        assert_eq!(
            got[3],
            (
                4,
                Err(ErrorRecord {
                    kind: ErrorKind::Config,
                    message: "policy: \"x\" is not a policy".into(),
                    field: Some("policy".into()),
                    value: Some("\"x\"".into()),
                    key: None,
                })
            )
        );
        assert_eq!(got[4].1.as_ref().unwrap_err().kind, ErrorKind::Internal);
        // SAFETY: live handles, freed once.
        unsafe {
            polylimit_limiter_free(limiter);
            polylimit_bridge_free(bridge);
        }
    }

    #[test]
    fn nothing_is_written_to_the_pipe_after_free() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let (reader, writer) = UnixStream::pair().unwrap();
        reader.set_nonblocking(true).unwrap();
        let bridge = polylimit_bridge_open(writer.as_raw_fd());
        // SAFETY: a live bridge; the clone outlives it, as a running call's does.
        let running = unsafe { &*bridge }.inner.clone();
        let (gate, wait) = tokio::sync::oneshot::channel::<()>();
        submit(
            bridge,
            1,
            Box::pin(async move {
                let _ = wait.await;
                Ok(Reply::Unit)
            }),
        );
        // SAFETY: a live bridge, freed once; the call still runs.
        unsafe { polylimit_bridge_free(bridge) };
        gate.send(()).unwrap();
        let mut buf = Vec::new();
        assert_eq!(running.take_wait(&mut buf, Duration::from_secs(10)), 1);
        // Armed again, then a record on this thread: its wake-up would write now.
        assert_eq!(running.try_take(&mut buf), 0);
        running.push(2, &Ok(Reply::Unit));
        let mut byte = [0u8; 1];
        assert!((&reader).read(&mut byte).is_err(), "a byte written after free");
    }
}
