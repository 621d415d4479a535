//! The handle the Kotlin facade (`Limiter.kt`) makes its direct calls with:
//! a C-ABI limiter of `polylimit-capi` (the Go binding's C surface, linked
//! into this library, its `polylimit_*` symbols exported) on the same core
//! limiter. Those calls take primitive arguments and one packed buffer,
//! where a uniffi call lowers records into `RustBuffer`s and allocates a
//! call status: 11-78 µs of JVM CPU a call.

use crate::errors::{guard, PolylimitError};
use crate::limiter::NativeLimiter;

#[uniffi::export]
impl NativeLimiter {
    /// A new C-ABI handle (`polylimit_limiter_t *`) on this limiter, for
    /// `polylimit_limiter_try_check` and the others; the caller frees it
    /// once with `polylimit_limiter_free`.
    pub fn direct_handle(&self) -> Result<u64, PolylimitError> {
        guard(|| Ok(polylimit_capi::shared::from_core(self.core().clone()) as u64))
    }
}
