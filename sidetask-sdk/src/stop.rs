//! Stop requests: a per-task flag, and SIGTERM for the whole process (a handler that only stores
//! an atomic, which is async-signal-safe).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

static SIGTERM_SEEN: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

extern "C" fn on_sigterm(_sig: libc::c_int) {
    SIGTERM_SEEN.store(true, Ordering::SeqCst);
}

/// Makes SIGTERM request a clean stop of every side task in this process (once per process).
pub fn install_sigterm_handler() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler only performs an
        // atomic store (async-signal-safe); SA_RESTART keeps interrupted system calls transparent.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigterm as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        }
    });
}

/// Whether SIGTERM has been received since the handler was installed.
pub fn sigterm_received() -> bool {
    SIGTERM_SEEN.load(Ordering::SeqCst)
}

/// A cloneable stop request for one task (also set by SIGTERM when the handler is installed).
#[derive(Clone, Debug, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst) || sigterm_received()
    }
}
