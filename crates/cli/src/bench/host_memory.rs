//! Host memory throughput on all cores, the bound under every job whose
//! bytes live in host memory: a copy (read + write, as a cipher does) and
//! a read (as a hash does), over buffers far larger than the caches.

use std::time::Instant;

use rayon::prelude::*;

use super::measure::median;

const BYTES: usize = 1 << 30;
const PIECE: usize = 4 << 20;

/// (copy GB/s, read GB/s), each the median of `reps` passes after one to
/// fault the pages in; GB/s of bytes copied or read, not of bus traffic.
pub fn measure(reps: usize) -> (f64, f64) {
    let src: Vec<u64> = (0..BYTES / 8).into_par_iter().map(|i| i as u64).collect();
    let mut dst = vec![0u64; BYTES / 8];
    let words = PIECE / 8;
    let mut copy = Vec::new();
    let mut read = Vec::new();
    for rep in 0..=reps {
        let t = Instant::now();
        dst.par_chunks_mut(words)
            .zip(src.par_chunks(words))
            .for_each(|(d, s)| d.copy_from_slice(s));
        let c = BYTES as f64 / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        let sum: u64 = dst
            .par_chunks(words)
            .map(|c| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)))
            .reduce(|| 0, u64::wrapping_add);
        let r = BYTES as f64 / t.elapsed().as_secs_f64() / 1e9;
        std::hint::black_box(sum);
        if rep > 0 {
            copy.push(c);
            read.push(r);
        }
    }
    (median(copy), median(read))
}
