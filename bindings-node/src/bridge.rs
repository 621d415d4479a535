//! The host side of the core's completion bridge ([`polylimit::bridge`]):
//! one per JavaScript thread (`calls.js`). Every async call of every limiter
//! is submitted with a ctx (the id its promise waits under in `calls.js`);
//! the bridge wakes the thread through a weak threadsafe function (it never
//! keeps the process alive), and `calls.js` takes the finished calls' packed
//! records ([`polylimit::wire::packed`]) into a buffer it lends once, read by
//! `packed.js`. Nothing else happens here: batching, panics and encoding are
//! the core's.

use std::sync::Arc;

use napi::bindgen_prelude::{within_runtime_if_available, Buffer, Either, Function, Uint8Array};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Result;
use napi_derive::napi;
use polylimit::bridge::{Bridge, Wake};

/// The bridge of one JavaScript thread (use `calls.js`).
#[napi]
pub struct NativeBridge {
    pub(crate) bridge: Bridge,
    /// The buffer `calls.js` lends for the records of each take.
    scratch: Uint8Array,
    /// The records of the last take (reused).
    records: Vec<u8>,
}

#[napi]
impl NativeBridge {
    /// `wake()` is called on the JavaScript thread when records are ready and
    /// the last `take` found none; `scratch` receives the records of each take.
    #[napi(constructor, ts_args_type = "wake: () => void, scratch: Uint8Array")]
    pub fn new(wake: Function<'_, (), ()>, scratch: Uint8Array) -> Result<Self> {
        let tsfn = wake
            .build_threadsafe_function::<()>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(|_| Ok(()))?;
        let tsfn = Arc::new(tsfn);
        let wake = Wake::Call(Box::new(move || {
            tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }));
        let bridge = within_runtime_if_available(|| Bridge::new(&tokio::runtime::Handle::current(), wake));
        Ok(NativeBridge {
            bridge,
            scratch,
            records: Vec::new(),
        })
    }

    /// The records finished since the last take: how many bytes were copied
    /// into the scratch buffer (0: none, and the next record wakes), or a
    /// Buffer of them when they do not fit.
    #[napi]
    pub fn take(&mut self) -> Either<u32, Buffer> {
        if self.bridge.try_take(&mut self.records) == 0 {
            return Either::A(0);
        }
        // `calls.js` reads the scratch buffer before its next take.
        hand_records(&mut self.records, &mut self.scratch)
    }
}

/// `records` into `scratch` (the count of bytes), or as a Buffer (taken
/// from `records`) when they do not fit: the one way a batch of records
/// reaches JavaScript. Called on the JavaScript thread, the only one
/// touching `scratch`.
pub(crate) fn hand_records(records: &mut Vec<u8>, scratch: &mut Uint8Array) -> Either<u32, Buffer> {
    // SAFETY: on the JavaScript thread (the caller's contract), the only one touching `scratch`.
    let into = unsafe { scratch.as_mut() };
    let n = records.len();
    if n <= into.len() {
        into[..n].copy_from_slice(records);
        Either::A(n as u32)
    } else {
        Either::B(Buffer::from(std::mem::take(records)))
    }
}
