//! Printing that stops quietly when the reader goes away.
//!
//! The Rust runtime ignores SIGPIPE, so a write to a closed pipe
//! (`gvault scan | head -1`) fails with `BrokenPipe`, and std's `println!`
//! turns that into a panic. This module defines `print!`, `println!`,
//! `eprint!` and `eprintln!` for the whole crate (they shadow std's: the
//! module is declared first in `main.rs`, with `#[macro_use]`). They write
//! as std's do, but on `BrokenPipe` they unwind with a [`BrokenPipe`]
//! payload through [`std::panic::resume_unwind`], which prints nothing.
//! Destructors run on the way out (stores close, temporary directories are
//! removed) and [`run`] in `main` turns the payload into exit status
//! [`EXIT_BROKEN_PIPE`]. Writes that return `io::Result` (`get`, `scan`,
//! `export`) take the ordinary error path; [`is_broken_pipe`] recognises
//! them.
//!
//! Exit status 141 (128 + SIGPIPE) is what a shell reports for a Unix tool
//! that SIGPIPE killed (`yes | head -1`): the output was cut short, which
//! is not success (a `verify` that found damage must not look clean).

use std::io::Write;

/// The exit status when stdout or stderr was closed by its reader.
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// The unwinding payload of a write to a closed pipe.
#[derive(Debug)]
pub struct BrokenPipe;

/// Writes to stdout (`to_stderr` false) or stderr; a closed pipe unwinds
/// with [`BrokenPipe`], any other failure panics as std's macros do.
#[doc(hidden)]
pub fn write_std(to_stderr: bool, args: std::fmt::Arguments<'_>) {
    let r = if to_stderr {
        std::io::stderr().lock().write_fmt(args)
    } else {
        std::io::stdout().lock().write_fmt(args)
    };
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::panic::resume_unwind(Box::new(BrokenPipe));
        }
        let what = if to_stderr { "stderr" } else { "stdout" };
        panic!("failed printing to {what}: {e}");
    }
}

macro_rules! print {
    ($($arg:tt)*) => {
        $crate::output::write_std(false, format_args!($($arg)*))
    };
}

macro_rules! println {
    () => {
        $crate::output::write_std(false, format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_std(false, format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[allow(unused_macros)] // for completeness: no command prints a partial line to stderr
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::output::write_std(true, format_args!($($arg)*))
    };
}

macro_rules! eprintln {
    () => {
        $crate::output::write_std(true, format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_std(true, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Whether `e`, or an error it wraps, is a write to a closed pipe.
pub fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return true;
            }
        }
        if let Some(j) = err.downcast_ref::<serde_json::Error>() {
            if j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// Runs the command `f` (which returns the exit status): a closed stdout
/// or stderr ends it with [`EXIT_BROKEN_PIPE`] and no message; any other
/// panic goes on unwinding.
pub fn run(f: impl FnOnce() -> i32) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(payload) if payload.is::<BrokenPipe>() => EXIT_BROKEN_PIPE,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipe_is_found_through_wrappers() {
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let boxed: Box<dyn std::error::Error> = Box::new(io);
        assert!(is_broken_pipe(&*boxed));
        let other: Box<dyn std::error::Error> = "no such key".into();
        assert!(!is_broken_pipe(&*other));
        let json = serde_json::Error::io(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&json));
    }

    #[test]
    fn the_payload_becomes_the_exit_status() {
        assert_eq!(run(|| 3), 3);
        assert_eq!(
            run(|| std::panic::resume_unwind(Box::new(BrokenPipe))),
            EXIT_BROKEN_PIPE
        );
    }
}
