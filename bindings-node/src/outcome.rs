//! Finished requests (`checkRequestBatched`, `peekRequestBatched`, the
//! middlewares' `checkHttpBatched`) and the errors of every batched call
//! (checks' too) cross to JavaScript this one way, without JSON: each
//! wake-up hands `outcome.js` numbers (copied into a `Float64Array` it
//! lends) and one string holding every text of the batch, one after
//! another, each text's length (in UTF-16 units, as JavaScript counts)
//! among the numbers. JavaScript slices the texts out into the
//! outcome object `checkRequest` resolves with. Every value is the core's:
//! the status, each header's name and value as the core wrote them, the
//! body, the completion token, the decisions (each as the core's
//! [`decision_record`]). Nothing is computed here.
//!
//! A record, one after another in the numbers (`outcome.js` reads the same order):
//! - an outcome: `id, 0, status (-1: none), delay_ms, headers, body length
//!   (-1: none), completion length (-1: none), decisions`, then per header its
//!   name's and value's lengths, then per decision `rule length, policy
//!   length, shadow (0/1)` and its 8-number [`decision_record`]; the texts in
//!   the same order (header names and values, body, completion, each
//!   decision's rule and policy);
//! - an error: `id, 1, length` of its error record (JSON text, the same
//!   record every other call rejects with).

use napi::bindgen_prelude::{Either, Float64Array, FnArgs, Function, ToNapiValue};
use napi::{check_status, sys, Result};
use polylimit::wire::{decision_record, DECISION_RECORD_LEN};
use polylimit::Outcome;

use crate::queue::{Batch, Queue};

/// The numbers and texts of the records queued since the JS thread last took them.
#[derive(Default)]
pub struct OutcomeBatch {
    pub nums: Vec<f64>,
    pub text: String,
}

/// The length of `s` as JavaScript counts it (UTF-16 code units).
fn js_len(s: &str) -> f64 {
    let units = if s.is_ascii() {
        s.len()
    } else {
        s.encode_utf16().count()
    };
    units as f64
}

impl OutcomeBatch {
    fn text(&mut self, s: &str) {
        self.nums.push(js_len(s));
        self.text.push_str(s);
    }

    /// Appends the record of request `id`'s outcome (see the module's comment).
    pub fn outcome(&mut self, id: u32, o: &Outcome) {
        let nums = &mut self.nums;
        nums.reserve(8 + 2 * o.headers.len() + o.decisions.len() * (3 + DECISION_RECORD_LEN));
        nums.push(f64::from(id));
        nums.push(0.0);
        nums.push(o.status.map_or(-1.0, f64::from));
        nums.push(o.delay_ms as f64);
        nums.push(o.headers.len() as f64);
        // The lengths of the body and the token come before the header lengths, so the
        // texts are in the order: headers, body, completion, decisions.
        let body_at = nums.len();
        nums.push(-1.0);
        nums.push(-1.0);
        nums.push(o.decisions.len() as f64);
        for (name, value) in &o.headers {
            self.text(name);
            self.text(value);
        }
        if let Some(body) = &o.body {
            self.nums[body_at] = js_len(body);
            self.text.push_str(body);
        }
        if let Some(token) = &o.completion {
            self.nums[body_at + 1] = js_len(token);
            self.text.push_str(token);
        }
        for d in &o.decisions {
            self.text(&d.rule);
            self.text(&d.policy);
            self.nums.push(if d.shadow { 1.0 } else { 0.0 });
            self.nums.extend_from_slice(&decision_record(0, &d.decision));
        }
    }

    /// Appends the record of request `id`'s error (its JSON record).
    pub fn error(&mut self, id: u32, error: &serde_json::Value) {
        self.nums.push(f64::from(id));
        self.nums.push(1.0);
        self.text(&error.to_string());
    }
}

impl Batch for OutcomeBatch {
    fn is_empty(&self) -> bool {
        self.nums.is_empty()
    }
}

/// A batch's numbers as a new `Float64Array` (V8's memory, a copy), for a
/// batch larger than the scratch array `outcome.js` lends (see [`HttpCompletions::new`]).
pub struct Numbers(Vec<f64>);

impl ToNapiValue for Numbers {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let bytes = std::mem::size_of_val(val.0.as_slice());
        let mut data = std::ptr::null_mut();
        let mut buffer = std::ptr::null_mut();
        check_status!(
            unsafe { sys::napi_create_arraybuffer(env, bytes, &mut data, &mut buffer) },
            "cannot create the outcome batch's ArrayBuffer"
        )?;
        if bytes > 0 {
            // SAFETY: `data` is the new buffer's `bytes` bytes, `val.0` holds as many.
            unsafe { std::ptr::copy_nonoverlapping(val.0.as_ptr().cast::<u8>(), data.cast::<u8>(), bytes) };
        }
        let mut array = std::ptr::null_mut();
        check_status!(
            unsafe {
                sys::napi_create_typedarray(
                    env,
                    sys::TypedarrayType::float64_array,
                    val.0.len(),
                    buffer,
                    0,
                    &mut array,
                )
            },
            "cannot create the outcome batch's Float64Array"
        )?;
        Ok(array)
    }
}

/// The numbers of a batch: how many were written into the scratch array, or the numbers
/// themselves when they do not fit.
pub type BatchNumbers = Either<u32, Numbers>;

/// Finished requests and errors of one limiter, handed to JavaScript as one
/// [`OutcomeBatch`] per wake-up (`handler(nums, text)`).
#[derive(Clone)]
pub struct HttpCompletions(Queue<OutcomeBatch, FnArgs<(BatchNumbers, String)>>);

impl HttpCompletions {
    /// `handler(nums, text)` is called on the JS thread; weak (unref'd), like the other
    /// completion functions. `nums` is how many numbers were copied into `scratch` (a
    /// `Float64Array` JavaScript keeps and reads before the next batch), or, when they do not
    /// fit, a `Float64Array` of them: no `ArrayBuffer` per batch (each one is memory outside
    /// V8's heap that the collector tracks and sweeps).
    pub fn new(
        handler: Function<'_, FnArgs<(BatchNumbers, String)>, ()>,
        mut scratch: Float64Array,
    ) -> Result<HttpCompletions> {
        let queue = Queue::new(handler, move |batch: OutcomeBatch| {
            // SAFETY: on the JS thread (the queue's callback), which is the only one touching
            // `scratch`; JavaScript reads it only inside the handler called next.
            let into = unsafe { scratch.as_mut() };
            let nums = if batch.nums.len() <= into.len() {
                into[..batch.nums.len()].copy_from_slice(&batch.nums);
                Either::A(batch.nums.len() as u32)
            } else {
                Either::B(Numbers(batch.nums))
            };
            Ok(FnArgs::from((nums, batch.text)))
        })?;
        Ok(HttpCompletions(queue))
    }

    /// Wakes the JS thread (once) if records were queued since it last took them.
    pub fn flush(&self) {
        self.0.flush();
    }

    /// Queues the outcome or error record of request `id`; `flush` wakes the JS thread.
    pub fn complete(&self, id: u32, result: std::result::Result<&Outcome, &serde_json::Value>) {
        self.0.push(|batch| match result {
            Ok(outcome) => batch.outcome(id, outcome),
            Err(error) => batch.error(id, error),
        });
    }
}
