//! Progress on stderr for the long store commands. It is drawn only when
//! stderr is a terminal: piped or redirected, a command prints nothing
//! extra.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    let pb = ProgressBar::with_draw_target(None, target());
    match total {
        Some(t) => set_total(&pb, t),
        None => pb.set_style(style(BYTES)),
    }
    pb.set_message(what.to_string());
    start(pb)
}

/// Gives a bar made by [`bytes`] its total: from then on it shows the bar
/// and the time left.
pub fn set_total(pb: &ProgressBar, total: u64) {
    pb.set_length(total);
    pb.set_style(style(BYTES_OF_TOTAL).progress_chars("=> "));
}

/// Sums, on a thread of its own, the sizes of the regular files under
/// `paths` (symbolic links not followed, unreadable entries counted as
/// empty) and hands the total to `pb` with [`set_total`]: a backup's time
/// left. Nothing is walked when the bar is not drawn. The walk stops, and
/// sets no total, when the returned guard is dropped.
pub fn total_of_tree(pb: &ProgressBar, paths: &[PathBuf]) -> TreeWalk {
    let stop = Arc::new(AtomicBool::new(false));
    if pb.is_hidden() {
        return TreeWalk(stop);
    }
    let (pb, paths, stopped) = (pb.clone(), paths.to_vec(), stop.clone());
    std::thread::spawn(move || {
        fn walk(p: &Path, stopped: &AtomicBool) -> u64 {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_file() => m.len(),
                Ok(m) if m.is_dir() => std::fs::read_dir(p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .take_while(|_| !stopped.load(Ordering::Relaxed))
                    .map(|e| walk(&e.path(), stopped))
                    .sum(),
                _ => 0,
            }
        }
        let total = paths.iter().map(|p| walk(p, &stopped)).sum();
        if !stopped.load(Ordering::Relaxed) {
            set_total(&pb, total);
        }
    });
    TreeWalk(stop)
}

/// Stops a [`total_of_tree`] walk when dropped.
pub struct TreeWalk(Arc<AtomicBool>);

impl Drop for TreeWalk {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
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
