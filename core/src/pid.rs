//! This process's id without a system call per use. `std::process::id()`
//! asks the kernel each time (glibc no longer caches it), and every Redis
//! call compares it with its connection's (a forked child must never use
//! its parent's connection). The cached id is forgotten in a forked child
//! (`pthread_atfork`), so the child's first call reads its own.

use std::sync::atomic::{AtomicU32, Ordering};

static PID: AtomicU32 = AtomicU32::new(0);

/// This process's id (the child's own after a fork).
pub(crate) fn current() -> u32 {
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    if !forgotten_after_fork() {
        return std::process::id();
    }
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Registers (once) the handler that forgets the id in a forked child;
/// false where there is none, and then nothing is cached.
#[cfg(unix)]
fn forgotten_after_fork() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    unsafe extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    // SAFETY: `forget` only stores to an atomic, which is async-signal-safe.
    *REGISTERED.get_or_init(|| unsafe { libc::pthread_atfork(None, None, Some(forget)) } == 0)
}

#[cfg(not(unix))]
fn forgotten_after_fork() -> bool {
    false
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_reads_its_own_id() {
        let parent = current();
        assert_eq!(parent, std::process::id());
        // SAFETY: the child only reads its id, writes to a pipe and exits.
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        match unsafe { libc::fork() } {
            0 => {
                let ok = current() == std::process::id() && current() != parent;
                let byte = [u8::from(ok)];
                unsafe {
                    libc::write(fds[1], byte.as_ptr().cast(), 1);
                    libc::_exit(0);
                }
            }
            child => {
                assert!(child > 0);
                let mut byte = [0u8];
                assert_eq!(unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) }, 1);
                unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
                assert_eq!(byte[0], 1, "the child saw its parent's id");
                assert_eq!(current(), parent);
            }
        }
    }
}
