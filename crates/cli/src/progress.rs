//! Progress on stderr for the long store commands. It is drawn only when
//! stderr is a terminal: piped or redirected, a command prints nothing
//! extra.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

const SPINNER: &str = "{spinner} {msg} ({elapsed})";
const BYTES_OF_TOTAL: &str = "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, {eta} left";
const BYTES: &str = "{spinner} {msg} {bytes} {bytes_per_sec} ({elapsed})";

fn style(template: &str) -> ProgressStyle {
    // The templates are the constants above, which the tests parse: the
    // fallback is never taken.
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// Ticks on its own, so that work with no progress reports still shows it
/// is alive; drawn once at once, so that even a short job shows what it did.
fn start(pb: ProgressBar) -> ProgressBar {
    if !pb.is_hidden() {
        pb.tick();
        pb.enable_steady_tick(Duration::from_millis(120));
    }
    pb
}

/// A spinner with the time taken, for work whose size is not known
/// (`gc`, `keys reencrypt`, `compact`). Call `finish_and_clear` when done.
pub fn spinner(what: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, target());
    pb.set_style(style(SPINNER));
    pb.set_message(what.to_string());
    start(pb)
}

/// Bytes done of `total` with the rate and, when `total` is known, a bar
/// and the time left.
pub fn bytes(what: &str, total: Option<u64>) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(total, target());
    pb.set_style(if total.is_some() {
        style(BYTES_OF_TOTAL).progress_chars("=> ")
    } else {
        style(BYTES)
    });
    pb.set_message(what.to_string());
    start(pb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse() {
        for t in [SPINNER, BYTES_OF_TOTAL, BYTES] {
            assert!(ProgressStyle::with_template(t).is_ok(), "{t}");
        }
    }
}
