//! The terminal's width, for table mode to fit its rows on screen.
//!
//! Used only when results go to a terminal: output to files and pipes is never shortened.

use std::io::IsTerminal;

/// Columns of the terminal on stdout; `None` when stdout is not a terminal or its size is
/// unknown. `COLUMNS` (as shells export it) wins over the terminal's own report.
pub fn stdout_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(n) = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok()) {
        return Some(n).filter(|n| *n > 0);
    }
    ioctl_width()
}

#[cfg(unix)]
fn ioctl_width() -> Option<usize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which points to a live,
    // properly aligned local; a failing call leaves it untouched and returns -1.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (r == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(not(unix))]
fn ioctl_width() -> Option<usize> {
    None
}
