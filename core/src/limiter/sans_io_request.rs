//! A request's sans-I/O path: [`Limiter::check_request`] (or
//! [`Limiter::check_route`]) with its one store call carried by the host's
//! own socket, as [`Limiter::sans_io_start`] carries a check. The core plans
//! the request and refuses (`None`: the usual path decides) anything but one
//! enforced (policy, key) target of a common shape that needs no completion
//! token; the outcome, from the reply or from the fallback when none came, is
//! the usual path's, made by the same code.

use std::sync::Arc;

use super::Limiter;
use crate::error::Result;
use crate::http::{Outcome, RequestInfo, RouteRule, SansIoRequest};

impl Limiter {
    /// Appends to `out` the bytes of the one call deciding `req` (by `rule`,
    /// or else by the rules file, as [`Limiter::check_route`] /
    /// [`Limiter::check_request`] would), or returns `None` with nothing
    /// appended: decide it the usual way. Sent on the socket of
    /// [`Limiter::sans_io_address`]; its reply follows those of the calls
    /// sent before it.
    pub fn sans_io_request_start(
        &self,
        req: &RequestInfo,
        rule: Option<&Arc<RouteRule>>,
        out: &mut Vec<u8>,
    ) -> Option<SansIoRequest> {
        let live = self.shared.live.read();
        live.http.sans_io_start(&live.engine, req, rule, out)
    }

    /// The outcome of `call` from its `reply` (one whole reply:
    /// [`crate::sans_io_reply_len`]), or `None`: decide the request the
    /// usual way (nothing was charged). A call finishes on the rules it
    /// started with, a reload since or not, as a call of the usual path does.
    pub fn sans_io_request_finish(&self, call: SansIoRequest, reply: &[u8]) -> Option<Result<Outcome>> {
        call.finish(reply).map(Ok)
    }

    /// The outcome of `call`, sent, when no reply came (the host's socket
    /// failed or stayed silent past the timeout): its policy's
    /// `on_store_error`, the breaker told of a failure; never sent again.
    /// On the rules it started with.
    pub fn sans_io_request_unanswered(&self, call: SansIoRequest) -> Option<Outcome> {
        call.unanswered()
    }
}
