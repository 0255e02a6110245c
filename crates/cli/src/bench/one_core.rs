//! One core of ours against `openssl speed` on that same core. The two take
//! turns on one pinned CPU for several rounds, and the median of the
//! rounds' ratios is reported with its spread: measured a minute apart and
//! on whichever core the scheduler picked, one core's AES-GCM moved 15%
//! between runs on the H200 host, more than the gap being judged.

use std::process::Command;

use super::measure::median;

/// One size's rounds: medians of each side and of the per-round ratios.
#[derive(Clone, Debug)]
pub(super) struct Paired {
    pub ours: f64,
    pub theirs: f64,
    pub ratio: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub rounds: usize,
    /// The CPU both ran on, where pinning worked.
    pub cpu: Option<usize>,
}

/// Runs `rounds` rounds of `openssl speed -evp ALG -bytes SIZE -seconds 1`
/// then `ours()` (GB/s), both on one CPU: the thread is pinned and openssl
/// inherits the pin. `ours` is built on that thread by `make`, so that any
/// pool it starts is pinned too. `None` when openssl is not there.
pub(super) fn paired<F: FnMut() -> f64>(
    alg: &str,
    size: usize,
    rounds: usize,
    make: impl FnOnce() -> F + Send,
) -> Option<Paired> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let cpu = pin_to_last_allowed_cpu();
            let mut ours = make();
            let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds.max(1) {
                let theirs = openssl_speed(alg, size, 1)?;
                let mine = ours();
                a.push(mine);
                b.push(theirs);
                r.push(mine / theirs);
            }
            let (lo, hi) = r.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
            Some(Paired {
                ours: median(a),
                theirs: median(b),
                ratio: median(r),
                ratio_min: lo,
                ratio_max: hi,
                rounds: rounds.max(1),
                cpu,
            })
        })
        .join()
        .ok()
        .flatten()
    })
}

/// Pins the calling thread to the highest CPU it may run on (CPU 0 takes
/// more of the machine's interrupts); the CPU, or `None` where the kernel
/// refused.
fn pin_to_last_allowed_cpu() -> Option<usize> {
    // SAFETY: `set` is a plain bit mask owned by this frame; the calls read
    // or write exactly `size_of::<cpu_set_t>()` bytes of it, and pid 0 names
    // the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return None;
        }
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .rev()
            .find(|&c| libc::CPU_ISSET(c, &set))?;
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        (libc::sched_setaffinity(0, size, &set) == 0).then_some(cpu)
    }
}

/// `openssl speed -evp ALG -bytes N -seconds S`, in GB/s, or None.
pub(super) fn openssl_speed(alg: &str, bytes: usize, seconds: u32) -> Option<f64> {
    let out = Command::new("openssl")
        .args([
            "speed",
            "-evp",
            alg,
            "-bytes",
            &bytes.to_string(),
            "-seconds",
            &seconds.to_string(),
        ])
        .output()
        .ok()?;
    parse_speed(&String::from_utf8_lossy(&out.stdout))
}

/// The last line of `openssl speed`: "<ALG NAME>   12345678.90k"
/// (thousands of bytes per second), in GB/s.
fn parse_speed(text: &str) -> Option<f64> {
    let last = text.lines().rev().find(|l| l.trim_end().ends_with('k'))?;
    let k: f64 = last
        .split_whitespace()
        .last()?
        .trim_end_matches('k')
        .parse()
        .ok()?;
    Some(k * 1000.0 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_output_parses() {
        let text =
            "Doing AES-256-GCM ops for 1s on 16384 size blocks: 600000 AES-256-GCM ops in 1.00s\n\
                    type             16384 bytes\n\
                    AES-256-GCM      9830400.00k\n";
        let gbps = parse_speed(text).unwrap();
        assert!((gbps - 9.8304).abs() < 1e-9, "{gbps}");
        assert_eq!(parse_speed("no figures here\n"), None);
    }

    #[test]
    fn pinned_rounds_report_the_median_ratio() {
        // Without openssl there is nothing to pair with.
        if Command::new("openssl").arg("version").output().is_err() {
            return;
        }
        let mut k = 0.0;
        let p = paired("sha256", 1 << 10, 3, || {
            move || {
                k += 1.0;
                k
            }
        })
        .expect("openssl speed ran");
        assert_eq!(p.rounds, 3);
        assert!(p.ratio_min <= p.ratio && p.ratio <= p.ratio_max);
        assert_eq!(p.ours, 2.0);
    }
}
