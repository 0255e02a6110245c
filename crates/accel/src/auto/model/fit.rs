//! Fitting cost lines to timings: least squares for the CPU's lines, the
//! line through two large jobs for the GPU's ramp, and the stage envelope
//! for the GPU's lines.

use super::{gpu_stage_ns, LinearCost};

/// Least-squares fit of fixed + per-byte + per-segment costs to samples of
/// (bytes, segments, nanoseconds), minimising relative error (so small jobs
/// count as much as large ones) with every coefficient kept non-negative.
pub(crate) fn fit_linear(samples: &[(u64, usize, f64)]) -> Option<LinearCost> {
    let rows: Vec<([f64; 3], f64)> = samples
        .iter()
        .filter(|(_, _, ns)| ns.is_finite() && *ns > 0.0)
        .map(|&(b, s, ns)| ([1.0 / ns, b as f64 / ns, s as f64 / ns], 1.0))
        .collect();
    if rows.is_empty() {
        return None;
    }
    // Try every subset of the three terms; keep the best fit whose
    // coefficients are all non-negative (an active set by enumeration).
    let mut best: Option<(f64, [f64; 3])> = None;
    for mask in 1u8..8 {
        let cols: Vec<usize> = (0..3).filter(|i| mask & (1 << i) != 0).collect();
        let Some(coef) = solve_subset(&rows, &cols) else {
            continue;
        };
        if coef.iter().any(|c| *c < 0.0 || !c.is_finite()) {
            continue;
        }
        let mut full = [0.0; 3];
        for (c, &i) in coef.iter().zip(&cols) {
            full[i] = *c;
        }
        let residual: f64 = rows
            .iter()
            .map(|(x, y)| {
                let p: f64 = x.iter().zip(&full).map(|(a, b)| a * b).sum();
                (p - y).powi(2)
            })
            .sum();
        if best.is_none_or(|(r, _)| residual < r * (1.0 - 1e-9)) {
            best = Some((residual, full));
        }
    }
    best.map(|(_, c)| LinearCost {
        fixed_ns: c[0],
        ns_per_byte: c[1],
        ns_per_segment: c[2],
    })
}

/// The line through timings of large jobs of equally many segments,
/// (bytes, nanoseconds): fixed + bytes × rate, both non-negative (as
/// [`fit_linear`]; the segment term is left out, the jobs cannot tell it
/// from the fixed cost). Two timings give the line through both when it
/// has no negative coefficient.
pub(crate) fn fit_ramp(samples: &[(u64, f64)]) -> Option<LinearCost> {
    // Zero segments: the segment column is all zeros, and every subset of
    // terms holding it is singular and skipped.
    let samples: Vec<(u64, usize, f64)> = samples.iter().map(|&(b, ns)| (b, 0, ns)).collect();
    let fit = fit_linear(&samples)?;
    fit.is_valid().then_some(fit)
}

/// A GPU timing: total bytes, segments, longest segment, nanoseconds.
pub(crate) type StageSample = (u64, usize, u64, f64);

/// Fits a stage line (and, with `serial`, a per-thread rate) to GPU
/// timings, read as in [`gpu_stage_ns`]. Each stage's rate is the fastest
/// that no sample contradicts: a stage takes at most a sample's time less
/// the fixed cost, and calibration's shapes put every stage that matters in
/// charge of at least one sample (many tiny segments: the segment stage;
/// many mid-sized: bytes; a few long ones: the thread). Samples of under
/// four times the fixed cost (the smallest job) only set that cost.
pub(crate) fn fit_stages(
    samples: &[StageSample],
    serial: bool,
) -> Option<(LinearCost, Option<f64>)> {
    let samples: Vec<StageSample> = samples
        .iter()
        .copied()
        .filter(|s| s.3.is_finite() && s.3 > 0.0 && s.1 > 0)
        .collect();
    let smallest = samples.iter().min_by(|a, b| a.3.total_cmp(&b.3))?;
    let mut fixed = smallest.3 / 2.0;
    let mut fit = (LinearCost::default(), None);
    for _ in 0..3 {
        let rate = |x: &dyn Fn(&StageSample) -> f64| {
            samples
                .iter()
                .filter(|s| s.3 >= 4.0 * fixed && x(s) > 0.0)
                .map(|s| (s.3 - fixed) / x(s))
                .min_by(f64::total_cmp)
        };
        let line = LinearCost {
            fixed_ns: fixed,
            ns_per_byte: rate(&|s| s.0 as f64).unwrap_or(0.0),
            ns_per_segment: rate(&|s| s.1 as f64).unwrap_or(0.0),
        };
        let thread = if serial { rate(&|s| s.2 as f64) } else { None };
        fit = (line, thread);
        // The fixed cost the smallest job leaves once its stages are paid.
        let (b, n, l, ns) = *smallest;
        let stages = gpu_stage_ns(
            &LinearCost {
                fixed_ns: 0.0,
                ..line
            },
            thread,
            b,
            n,
            l,
            false,
        );
        fixed = (ns - stages).clamp(0.0, ns);
    }
    let (line, thread) = fit;
    let ok = line.is_valid() && thread.is_none_or(|t| t.is_finite());
    ok.then_some(fit)
}

/// Normal equations on the chosen columns, scaled for conditioning.
fn solve_subset(rows: &[([f64; 3], f64)], cols: &[usize]) -> Option<Vec<f64>> {
    let n = cols.len();
    let scale: Vec<f64> = cols
        .iter()
        .map(|&c| {
            let s = rows.iter().map(|(x, _)| x[c] * x[c]).sum::<f64>().sqrt();
            if s > 0.0 {
                s
            } else {
                1.0
            }
        })
        .collect();
    let mut a = vec![vec![0.0; n + 1]; n];
    for (x, y) in rows {
        for i in 0..n {
            let xi = x[cols[i]] / scale[i];
            for j in 0..n {
                a[i][j] += xi * x[cols[j]] / scale[j];
            }
            a[i][n] += xi * y;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..n {
        let pivot = (col..n).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i] / scale[i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_exact_costs() {
        let truth = LinearCost {
            fixed_ns: 5_000.0,
            ns_per_byte: 0.25,
            ns_per_segment: 300.0,
        };
        let samples: Vec<_> = [
            (512u64, 256usize),
            (4096, 64),
            (65536, 16),
            (1 << 20, 4),
            (16 << 20, 1),
            (512, 1),
        ]
        .iter()
        .map(|&(size, n)| (size * n as u64, n, truth.predict_ns(size * n as u64, n)))
        .collect();
        let fit = fit_linear(&samples).expect("fits");
        assert!((fit.fixed_ns - 5_000.0).abs() < 1.0, "{fit:?}");
        assert!((fit.ns_per_byte - 0.25).abs() < 1e-6, "{fit:?}");
        assert!((fit.ns_per_segment - 300.0).abs() < 0.1, "{fit:?}");
    }

    #[test]
    fn fit_keeps_coefficients_non_negative() {
        // Timings that a free fit would explain with a negative fixed cost.
        let samples = [(1000u64, 1usize, 100.0), (2000, 1, 300.0), (4000, 1, 700.0)];
        let fit = fit_linear(&samples).expect("fits");
        assert!(fit.fixed_ns >= 0.0 && fit.ns_per_byte > 0.0 && fit.ns_per_segment >= 0.0);
    }

    #[test]
    fn fit_of_nothing_is_none() {
        assert_eq!(fit_linear(&[]), None);
        assert_eq!(fit_linear(&[(10, 1, f64::NAN)]), None);
    }

    #[test]
    fn ramp_fit_goes_through_two_jobs() {
        // 2 ms + bytes / 49 GB/s, at 64 MiB and 1 GiB.
        let line = |b: u64| 2e6 + b as f64 / 49.0;
        let fit = fit_ramp(&[(64 << 20, line(64 << 20)), (1 << 30, line(1 << 30))]).expect("fits");
        assert!((fit.fixed_ns - 2e6).abs() < 1.0, "{fit:?}");
        assert!((fit.ns_per_byte * 49.0 - 1.0).abs() < 1e-9, "{fit:?}");
        assert_eq!(fit.ns_per_segment, 0.0);
        // A larger job that ran faster in all: no negative rate.
        let fit = fit_ramp(&[(64 << 20, 5e6), (1 << 30, 4e6)]).expect("fits");
        assert!(fit.is_valid(), "{fit:?}");
        assert_eq!(fit_ramp(&[]), None);
    }

    #[test]
    fn stage_fit_recovers_each_stage() {
        let line = LinearCost {
            fixed_ns: 100_000.0,
            ns_per_byte: 0.07,
            ns_per_segment: 210.0,
        };
        let thread = Some(33.0);
        let shapes = [
            (4096u64, 1usize),
            (256 << 10, 4),
            (1 << 20, 8),
            (512, 131072),
            (4096, 16384),
            (64 << 10, 1024),
        ];
        let samples: Vec<StageSample> = shapes
            .iter()
            .map(|&(size, n)| {
                let bytes = size * n as u64;
                (
                    bytes,
                    n,
                    size,
                    gpu_stage_ns(&line, thread, bytes, n, size, false),
                )
            })
            .collect();
        let (fit, t) = fit_stages(&samples, true).expect("fits");
        let close = |a: f64, b: f64| (a - b).abs() <= 0.02 * b;
        assert!(close(fit.ns_per_segment, 210.0), "{fit:?}");
        assert!(close(fit.ns_per_byte, 0.07), "{fit:?}");
        assert!(close(t.expect("a thread rate"), 33.0), "{t:?}");
        assert!(close(fit.fixed_ns, 100_000.0), "{fit:?}");
        // Without the serial flag no thread rate is fitted.
        assert_eq!(fit_stages(&samples, false).expect("fits").1, None);
        assert_eq!(fit_stages(&[], true), None);
    }
}
