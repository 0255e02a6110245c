//! Timing discipline for every benchmark (METHOD.md): warm up, repeat until
//! a minimum time has passed, report the median.

use std::time::{Duration, Instant};

pub struct Timing {
    pub median: Duration,
}

/// Runs `f` once to warm up, then repeatedly until `min_total` has passed
/// and at least `min_runs` runs were made; `f` returns the time of the
/// region it measured (so it may exclude its own setup).
pub fn repeat(min_runs: usize, min_total: Duration, mut f: impl FnMut() -> Duration) -> Timing {
    f();
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < min_runs || start.elapsed() < min_total {
        times.push(f());
        if times.len() >= 1000 {
            break;
        }
    }
    times.sort();
    Timing {
        median: times[times.len() / 2],
    }
}

pub fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// "512B", "64KiB", "1GiB".
pub fn size_label(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}

/// Parses "512", "4K", "64KiB", "16M", "1G" into bytes.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        _ => return Err(format!("bad size unit in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// [`parse_size`] for a size that must be at least one byte (a segment, a
/// job, a block): `what` names it in the error.
pub fn parse_nonzero_size(s: &str, what: &str) -> Result<usize, String> {
    match parse_size(s)? {
        0 => Err(format!("{what} {s:?}: must be at least 1 byte")),
        n => Ok(n),
    }
}

/// Where benchmarks keep repositories and data by default: /dev/shm
/// (memory, so the figures are the engine's, not a disk's), else the
/// temporary directory.
pub fn memory_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// The middle value (the upper one of an even count); `v` is not empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A `map_err` that says what failed: `err("reading x")`.
pub fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Write rate of `dir` with `threads` writers of 16 MiB files, fsynced as
/// packs are, `total` bytes in all.
pub fn files_write_rate(dir: &std::path::Path, threads: usize, total: u64) -> Result<f64, String> {
    use rayon::prelude::*;
    use std::io::Write;
    let piece = vec![0x5au8; 16 << 20];
    let count = (total / piece.len() as u64).max(1) as usize;
    let file = |i: usize| dir.join(format!("gvault-bench-write-{}-{i}", std::process::id()));
    let t = Instant::now();
    (0..threads)
        .into_par_iter()
        .try_for_each(|k| -> std::io::Result<()> {
            for i in (k..count).step_by(threads) {
                let mut f = std::fs::File::create(file(i))?;
                f.write_all(&piece)?;
                f.sync_all()?;
            }
            Ok(())
        })
        .map_err(err("measuring the write rate"))?;
    let el = t.elapsed();
    for i in 0..count {
        let _ = std::fs::remove_file(file(i));
    }
    Ok(gbps((count * piece.len()) as u64, el))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_bad_ones_are_errors() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("0"), Ok(0));
        // Would wrap to 0 (and divide by zero later) if multiplied unchecked.
        let huge = format!("{}G", (usize::MAX >> 30) + 1);
        assert!(parse_size(&huge).unwrap_err().contains("too large"));
        assert!(parse_size("4X").is_err());
        assert!(parse_nonzero_size("0K", "--sizes")
            .unwrap_err()
            .contains("at least 1 byte"));
        assert_eq!(parse_nonzero_size("1", "--sizes"), Ok(1));
    }
}
