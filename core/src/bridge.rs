//! The one way a binding gets the results of the calls it starts: it submits
//! a call with a `ctx` of its own, and takes the finished ones back in
//! batches of packed records ([`wire::packed`](crate::wire::packed): `u64`
//! ctx, `u8` kind, payload, one after another), decoded by one small reader
//! in its language.
//!
//! - One dispatcher task on the runtime polls every submitted call itself
//!   (a `FuturesUnordered`): the Redis commands of calls that arrive together
//!   are queued on the multiplexed connection before its writer runs, so they
//!   go out in one write. A `spawn` per call let the writer run after each.
//! - A panic in a call becomes [`Error::Internal`]; each result is encoded
//!   once, where it finishes.
//! - The results of one round of polls are queued together, then the host is
//!   woken at most once, and only when its reader said it found nothing
//!   ([`Bridge::try_take`] came back empty: "armed"). While the reader is
//!   still draining, nothing wakes it. A host with an event loop uses
//!   `try_take` and a [`Wake`]; a host with threads may block in
//!   [`Bridge::take_wait`] instead.

use std::future::Future;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use parking_lot::{Condvar, Mutex};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::wire::packed::{write_record, Reply};

/// A call the bridge runs: its result is packed as one record.
pub type Call = Pin<Box<dyn Future<Output = Result<Reply>> + Send>>;

/// How the bridge wakes its host when records are ready and the reader is
/// waiting for them.
pub enum Wake {
    /// Called on a runtime thread (or the thread of [`Bridge::push`]); it must
    /// not block nor call back into the bridge. A panic in it is swallowed.
    Call(Box<dyn Fn() + Send + Sync>),
    /// Writes one byte to this fd (the write end of a non-blocking pipe or
    /// socket the host's event loop watches; the host keeps it open while
    /// the bridge lives). A full pipe already holds a byte: nothing is lost.
    Fd(RawFd),
    /// No wake-up: the host blocks in [`Bridge::take_wait`].
    None,
}

impl Wake {
    fn wake(&self) {
        match self {
            Wake::Call(f) => {
                let _ = std::panic::catch_unwind(AssertUnwindSafe(f));
            }
            Wake::Fd(fd) => {
                // SAFETY: the host's open fd; ManuallyDrop never closes it.
                let mut file = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(*fd) });
                let _ = file.write(&[1]);
            }
            Wake::None => {}
        }
    }
}

struct Queue {
    /// Records finished and not yet taken.
    records: Vec<u8>,
    /// How many records `records` holds.
    count: usize,
    /// The reader found nothing: the next records wake it.
    armed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when records are queued (for [`Bridge::take_wait`]).
    ready: Condvar,
    wake: Wake,
}

impl Shared {
    /// Appends `batch` (`n` records) and wakes the host if it was waiting.
    fn deliver(&self, batch: &[u8], n: usize) {
        if n == 0 {
            return;
        }
        let wake = {
            let mut q = self.queue.lock();
            q.records.extend_from_slice(batch);
            q.count += n;
            std::mem::replace(&mut q.armed, false)
        };
        self.ready.notify_one();
        if wake {
            self.wake.wake();
        }
    }
}

/// Submits calls to the runtime and hands back their packed results. Cheap
/// to clone (every clone submits to the same dispatcher); the dispatcher ends
/// when the last clone is dropped, after the calls already submitted.
#[derive(Clone)]
pub struct Bridge {
    shared: Arc<Shared>,
    calls: mpsc::UnboundedSender<(u64, Call)>,
}

impl Bridge {
    /// A bridge whose dispatcher runs on `runtime`, waking its host by `wake`.
    /// The reader starts armed: the first records wake it.
    pub fn new(runtime: &tokio::runtime::Handle, wake: Wake) -> Bridge {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                records: Vec::new(),
                count: 0,
                armed: true,
            }),
            ready: Condvar::new(),
            wake,
        });
        let (calls, rx) = mpsc::unbounded_channel();
        runtime.spawn(dispatch(rx, shared.clone()));
        Bridge { shared, calls }
    }

    /// Runs `call` on the runtime; its result comes back as the record of
    /// `ctx`, exactly once (an error record for a panic).
    pub fn submit(&self, ctx: u64, call: impl Future<Output = Result<Reply>> + Send + 'static) {
        self.submit_boxed(ctx, Box::pin(call));
    }

    /// [`Bridge::submit`] of a call already boxed.
    pub fn submit_boxed(&self, ctx: u64, call: Call) {
        // The dispatcher lives as long as a sender does: this send cannot fail.
        let _ = self.calls.send((ctx, call));
    }

    /// Queues the record of a result the host already has (an answer made
    /// without waiting, an alert): it is taken like any other.
    pub fn push(&self, ctx: u64, result: &Result<Reply>) {
        let mut record = Vec::new();
        write_record(&mut record, ctx, result);
        self.shared.deliver(&record, 1);
    }

    /// Moves every record finished since the last take into `out` (cleared
    /// first) and returns how many; never blocks. When there are none, the
    /// reader is armed: the next record wakes the host (so wait for the
    /// wake-up, then take again).
    pub fn try_take(&self, out: &mut Vec<u8>) -> usize {
        out.clear();
        let mut q = self.shared.queue.lock();
        q.armed = q.count == 0;
        std::mem::swap(out, &mut q.records);
        std::mem::take(&mut q.count)
    }

    /// [`Bridge::try_take`], waiting up to `timeout` for a record when there
    /// is none (0 after the timeout). Never arms the wake-up.
    pub fn take_wait(&self, out: &mut Vec<u8>, timeout: Duration) -> usize {
        out.clear();
        let mut q = self.shared.queue.lock();
        if q.count == 0 {
            let _ = self.shared.ready.wait_while_for(&mut q, |q| q.count == 0, timeout);
        }
        std::mem::swap(out, &mut q.records);
        std::mem::take(&mut q.count)
    }
}

/// Runs one call, a panic turned into [`Error::Internal`].
async fn run(ctx: u64, call: Call) -> (u64, Result<Reply>) {
    let result = match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::Internal(format!("panic in a call: {what}")))
        }
    };
    (ctx, result)
}

/// The dispatcher: takes submitted calls, polls them all, packs each result
/// as it finishes, and delivers each round's records together. Ends when
/// every sender is gone and the last call finished.
async fn dispatch(mut rx: mpsc::UnboundedReceiver<(u64, Call)>, shared: Arc<Shared>) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    let mut batch = Vec::new();
    std::future::poll_fn(|cx| {
        while open {
            match rx.poll_recv(cx) {
                Poll::Ready(Some((ctx, call))) => running.push(run(ctx, call)),
                Poll::Ready(None) => open = false,
                Poll::Pending => break,
            }
        }
        let mut n = 0;
        while let Poll::Ready(Some((ctx, result))) = running.poll_next_unpin(cx) {
            write_record(&mut batch, ctx, &result);
            n += 1;
        }
        shared.deliver(&batch, n);
        batch.clear();
        if open || !running.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Decision, Source};
    use crate::error::ErrorKind;
    use crate::wire::packed::{read_record, ErrorRecord};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc as std_mpsc;
    use tokio::sync::oneshot;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// The records of `bytes`: each ctx and result.
    fn records(mut bytes: &[u8]) -> Vec<(u64, std::result::Result<Reply, ErrorRecord>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            out.push(read_record(&mut bytes).unwrap());
        }
        out
    }

    /// Takes (blocking) until `n` records came, in the order they came.
    fn take_n(bridge: &Bridge, n: usize) -> Vec<(u64, std::result::Result<Reply, ErrorRecord>)> {
        let mut all = Vec::new();
        let mut buf = Vec::new();
        while all.len() < n {
            let got = bridge.take_wait(&mut buf, Duration::from_secs(10));
            assert!(got > 0, "no record within 10 s ({} of {n})", all.len());
            let read = records(&buf);
            assert_eq!(read.len(), got);
            all.extend(read);
        }
        all
    }

    fn decision(remaining: u64) -> Decision {
        Decision {
            allowed: true,
            limit: 10,
            remaining,
            reset_after_ms: 0,
            retry_after_ms: None,
            delay_ms: 0,
            source: Source::Local,
        }
    }

    /// A wake-up that counts and signals each call.
    fn counting() -> (Wake, Arc<AtomicUsize>, std_mpsc::Receiver<()>) {
        let count = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std_mpsc::channel();
        let c = count.clone();
        let tx = Mutex::new(tx);
        let wake = Wake::Call(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
            let _ = tx.lock().send(());
        }));
        (wake, count, rx)
    }

    #[test]
    fn a_panic_is_an_internal_error_and_the_other_calls_go_on() {
        let rt = runtime();
        let bridge = Bridge::new(rt.handle(), Wake::None);
        bridge.submit(1, async {
            if true {
                panic!("boom");
            }
            Ok(Reply::Unit)
        });
        bridge.submit(2, async { Ok(Reply::Count(7)) });
        let mut got = take_n(&bridge, 2);
        got.sort_by_key(|r| r.0);
        assert_eq!(
            got,
            vec![
                (
                    1,
                    Err(ErrorRecord {
                        kind: ErrorKind::Internal,
                        message: "internal error: panic in a call: boom".into(),
                        field: None,
                        value: None,
                        key: None,
                    })
                ),
                (2, Ok(Reply::Count(7))),
            ]
        );
    }

    #[test]
    fn records_come_in_the_order_the_calls_finish() {
        let rt = runtime();
        let bridge = Bridge::new(rt.handle(), Wake::None);
        let mut gates = Vec::new();
        for ctx in 0..3u64 {
            let (tx, rx) = oneshot::channel::<()>();
            gates.push(tx);
            bridge.submit(ctx, async move {
                rx.await.map_err(|_| Error::Closed)?;
                Ok(Reply::Decision(decision(ctx)))
            });
        }
        let mut order = Vec::new();
        // Finish 2, then 0, then 1: each is taken before the next finishes.
        let mut gates: Vec<Option<oneshot::Sender<()>>> = gates.into_iter().map(Some).collect();
        for ctx in [2usize, 0, 1] {
            gates[ctx].take().unwrap().send(()).unwrap();
            let got = take_n(&bridge, 1);
            assert_eq!(got, vec![(ctx as u64, Ok(Reply::Decision(decision(ctx as u64))))]);
            order.push(got[0].0);
        }
        assert_eq!(order, [2, 0, 1]);
        // An error is a record too, in its place.
        bridge.submit(9, async { Err(Error::Closed) });
        assert_eq!(take_n(&bridge, 1)[0].1.as_ref().unwrap_err().kind, ErrorKind::Closed);
    }

    #[test]
    fn one_wake_up_per_batch_and_none_while_the_reader_drains() {
        let rt = runtime();
        let (wake, wakes, signal) = counting();
        let bridge = Bridge::new(rt.handle(), wake);
        let mut buf = Vec::new();
        assert_eq!(bridge.try_take(&mut buf), 0, "armed");
        // 200 calls waiting on one gate finish in the same rounds.
        let (open, gate) = tokio::sync::watch::channel(false);
        for ctx in 0..200u64 {
            let mut gate = gate.clone();
            bridge.submit(ctx, async move {
                gate.wait_for(|open| *open).await.map_err(|_| Error::Closed)?;
                Ok(Reply::Unit)
            });
        }
        open.send(true).unwrap();
        signal.recv_timeout(Duration::from_secs(10)).unwrap();
        // Drained with blocking takes: no take arms the reader, so every
        // later round of the 200 wakes nobody.
        assert_eq!(take_n(&bridge, 200).len(), 200);
        assert_eq!(wakes.load(Ordering::SeqCst), 1);
        // Armed again by an empty try_take: the next record wakes once more.
        assert_eq!(bridge.try_take(&mut buf), 0);
        bridge.push(500, &Ok(Reply::Bool(true)));
        bridge.push(501, &Ok(Reply::Bool(false)));
        assert_eq!(wakes.load(Ordering::SeqCst), 2);
        assert_eq!(bridge.try_take(&mut buf), 2);
        assert_eq!(
            records(&buf),
            vec![(500, Ok(Reply::Bool(true))), (501, Ok(Reply::Bool(false)))]
        );
        // A non-empty take does not arm: nothing to wake for.
        bridge.push(502, &Ok(Reply::Unit));
        assert_eq!(wakes.load(Ordering::SeqCst), 2);
    }

    /// Many threads submit while one reader takes with `try_take` and sleeps
    /// on the wake-up between takes: every record arrives, no sleep is
    /// missed (the reader would wait forever: the timeout fails the test).
    #[test]
    fn no_lost_wake_up_under_a_race() {
        const THREADS: u64 = 8;
        const EACH: u64 = 2000;
        let rt = runtime();
        let (wake, wakes, signal) = counting();
        let bridge = Bridge::new(rt.handle(), wake);
        let submitters: Vec<_> = (0..THREADS)
            .map(|t| {
                let bridge = bridge.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let ctx = t * EACH + i;
                        if i % 3 == 0 {
                            bridge.push(ctx, &Ok(Reply::Count(ctx)));
                        } else {
                            bridge.submit(ctx, async move {
                                if ctx.is_multiple_of(2) {
                                    tokio::task::yield_now().await;
                                }
                                Ok(Reply::Count(ctx))
                            });
                        }
                    }
                })
            })
            .collect();
        let mut seen = vec![false; (THREADS * EACH) as usize];
        let (mut total, mut sleeps) = (0, 0);
        let mut buf = Vec::new();
        while total < seen.len() {
            let n = bridge.try_take(&mut buf);
            if n == 0 {
                sleeps += 1;
                signal
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_else(|_| panic!("lost wake-up: {total} of {} records", seen.len()));
                continue;
            }
            for (ctx, result) in records(&buf) {
                assert_eq!(result, Ok(Reply::Count(ctx)));
                assert!(!std::mem::replace(&mut seen[ctx as usize], true), "{ctx} twice");
                total += 1;
            }
        }
        for s in submitters {
            s.join().unwrap();
        }
        // One wake-up per sleep at most (and one for the reader's start, armed).
        assert!(
            wakes.load(Ordering::SeqCst) <= sleeps + 1,
            "{wakes:?} wakes for {sleeps} sleeps"
        );
    }

    #[test]
    fn an_fd_is_woken_with_one_byte() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let rt = runtime();
        let (reader, writer) = UnixStream::pair().unwrap();
        reader.set_nonblocking(true).unwrap();
        let bridge = Bridge::new(rt.handle(), Wake::Fd(writer.as_raw_fd()));
        bridge.push(1, &Ok(Reply::Unit));
        bridge.push(2, &Ok(Reply::Unit));
        let mut byte = [0u8; 8];
        assert_eq!((&reader).read(&mut byte).unwrap(), 1, "one byte for both");
        let mut buf = Vec::new();
        assert_eq!(bridge.try_take(&mut buf), 2);
        assert_eq!(bridge.try_take(&mut buf), 0);
        bridge.submit(3, async { Ok(Reply::Unit) });
        // Blocking read this time: the dispatcher writes the byte.
        reader.set_nonblocking(false).unwrap();
        assert_eq!((&reader).read(&mut byte).unwrap(), 1);
        assert_eq!(
            records(&{
                bridge.try_take(&mut buf);
                buf.clone()
            }),
            vec![(3, Ok(Reply::Unit))]
        );
        drop(bridge);
        drop(writer);
    }
}
