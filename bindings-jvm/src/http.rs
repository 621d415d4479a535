//! The HTTP rules a framework adapter (the Spring filter) asks the core.

/// The status a request ended with, to settle its completion token: the
/// core's rule (`polylimit::ended_status`). `status` is the response's
/// status as the framework holds it; `handlerAnswered`: the handler wrote a
/// response (committed it); `handlerFailed`: it threw; `clientGone`: the
/// client left before the response was done. Null: no response.
#[uniffi::export]
pub fn ended_status(status: i32, handler_answered: bool, handler_failed: bool, client_gone: bool) -> Option<i32> {
    let status = u16::try_from(status).unwrap_or(0);
    polylimit::ended_status(status, handler_answered, handler_failed, client_gone).map(i32::from)
}
