//! Ctrl-C while a statement runs stops the statement, not the shell (unix).
//!
//! The SIGINT handler only sets a flag when a statement is running (async-signal-safe); a
//! watcher thread turns the flag into `Connection::interrupt`. With no statement running,
//! Ctrl-C ends the process as it would without a handler (exit code 130). At the
//! interactive prompt the line editor reads Ctrl-C itself (the terminal is in raw mode).

use std::sync::atomic::{AtomicBool, Ordering};

/// A statement is running (Ctrl-C interrupts it instead of ending the process).
static RUNNING: AtomicBool = AtomicBool::new(false);
/// Ctrl-C was pressed while a statement ran; the watcher interrupts it.
static PENDING: AtomicBool = AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn on_sigint(_signal: libc::c_int) {
    if RUNNING.load(Ordering::Acquire) {
        PENDING.store(true, Ordering::Release);
    } else {
        // SAFETY: `_exit` is async-signal-safe; ending the process is what SIGINT does by
        // default.
        unsafe { libc::_exit(130) }
    }
}

/// Installs the handler; Ctrl-C during a statement interrupts it through `conn`.
pub fn install(conn: basalt::Interrupter) {
    #[cfg(unix)]
    {
        let handler = on_sigint as extern "C" fn(libc::c_int);
        // SAFETY: the handler only touches atomics or calls `_exit` (async-signal-safe).
        unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
        let _ = std::thread::Builder::new().name("basalt-ctrl-c".into()).spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_millis(25));
                if PENDING.swap(false, Ordering::AcqRel) {
                    conn.interrupt();
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = conn;
}

/// Marks a statement as running while it lives.
pub struct Running(());

impl Running {
    /// A statement starts.
    pub fn start() -> Running {
        PENDING.store(false, Ordering::Release);
        RUNNING.store(true, Ordering::Release);
        Running(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}
