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

/// Gives a bar made by [`bytes`] without a total its total: from then on
/// it shows the bar and the time left.
pub fn set_total(pb: &ProgressBar, total: u64) {
    pb.set_length(total);
    pb.set_style(style(BYTES_OF_TOTAL).progress_chars("=> "));
}

/// Sums, on a thread of its own, the sizes of the regular files under
/// `paths` (symbolic links not followed, unreadable directories skipped)
/// and hands the total to `pb` with [`set_total`]: a backup's time left.
/// Nothing is walked when the bar is not drawn. The walk stops early
/// when the returned guard is dropped.
pub fn total_of_tree(pb: &ProgressBar, paths: &[std::path::PathBuf]) -> TreeWalk {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if pb.is_hidden() {
        return TreeWalk(stop);
    }
    let (pb, paths, flag) = (pb.clone(), paths.to_vec(), stop.clone());
    std::thread::spawn(move || {
        fn walk(p: &std::path::Path, stop: &std::sync::atomic::AtomicBool) -> Option<u64> {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
            let m = std::fs::symlink_metadata(p).ok()?;
            if m.is_file() {
                return Some(m.len());
            }
            if !m.is_dir() {
                return Some(0);
            }
            let mut sum = 0;
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                sum += walk(&e.path(), stop).unwrap_or(0);
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return None;
                }
            }
            Some(sum)
        }
        let mut total = 0;
        for p in &paths {
            match walk(p, &flag) {
                Some(n) => total += n,
                None if flag.load(std::sync::atomic::Ordering::Relaxed) => return,
                None => {}
            }
        }
        set_total(&pb, total);
    });
    TreeWalk(stop)
}

/// Stops a [`total_of_tree`] walk when dropped.
pub struct TreeWalk(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for TreeWalk {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
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
