//! The data of `bench cas`: seed 001 §4's workloads, generated from a seed
//! so that every configuration backs up the same bytes.
//!
//! - `single`: one large incompressible file; version 2 rewrites 10 % of it
//!   in 1 MiB runs at random places (the 90 %-unchanged re-backup).
//! - `different`: 64 unrelated files; version 2 replaces every file with
//!   new contents (seed 001's *different*: nothing to deduplicate).
//! - `similar`: one file; version 2 has small inserts, deletes and edits at
//!   random offsets (one per 16 MiB) (seed 001's *similar*, made harder: shifted contents
//!   defeat fixed blocks, not content-defined chunks).
//! - `checkpoint`: a model checkpoint (bf16-like tensors of 1-64 MiB, a
//!   little compressible); version 2 changes a tenth of the tensors, as a
//!   training step that updates some layers (seed 001's *checkpoint*).
//! - `tree`: many small files (4-64 KiB); version 2 changes 5 % of them.

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use rayon::prelude::*;

pub const WORKLOADS: [&str; 5] = ["single", "different", "similar", "checkpoint", "tree"];

/// Fills `buf` with bytes from `seed`, in parallel (64 KiB pieces, each
/// from its own generator), so that 16 GiB take seconds.
fn fill(buf: &mut [u8], seed: u64) {
    buf.par_chunks_mut(64 << 10).enumerate().for_each(|(i, c)| {
        StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).fill_bytes(c)
    });
}

/// Writes `size` seeded bytes to `path`, 64 MiB at a time.
fn write_random(path: &Path, size: u64, seed: u64) -> std::io::Result<()> {
    let mut f = fs::File::create(path)?;
    let mut buf = vec![0u8; (64 << 20).min(size as usize)];
    let mut done = 0u64;
    let mut k = 0u64;
    while done < size {
        let n = (size - done).min(buf.len() as u64) as usize;
        fill(&mut buf[..n], seed.wrapping_add(k << 32));
        f.write_all(&buf[..n])?;
        done += n as u64;
        k += 1;
    }
    Ok(())
}

/// bf16-like values: random mantissas, exponents from a narrow range (as
/// trained weights have), so zstd saves a little.
fn fill_tensor(buf: &mut [u8], seed: u64) {
    fill(buf, seed);
    buf.par_chunks_mut(2).for_each(|v| {
        if v.len() == 2 {
            v[1] = (0x3c + (v[1] & 0x03)) | (v[1] & 0x80);
        }
    });
}

fn tensor_sizes(total: u64, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut left = total;
    while left > 0 {
        let t = (rng.gen_range(1u64..=64) << 20).min(left);
        out.push(t);
        left -= t;
    }
    out
}

/// Creates version 1 of `workload` under `dir` (emptied first), `size`
/// bytes in all.
pub fn create(workload: &str, dir: &Path, size: u64) -> std::io::Result<()> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    match workload {
        "single" | "similar" => write_random(&dir.join("file.bin"), size, 1),
        "different" => (0..64u64)
            .into_par_iter()
            .try_for_each(|i| write_random(&dir.join(format!("f{i:02}")), size / 64, 100 + i)),
        "checkpoint" => {
            let mut f = fs::File::create(dir.join("model.ckpt"))?;
            for (i, t) in tensor_sizes(size, 7).into_iter().enumerate() {
                let mut buf = vec![0u8; t as usize];
                fill_tensor(&mut buf, 1000 + i as u64);
                f.write_all(&buf)?;
            }
            Ok(())
        }
        "tree" => {
            let mut rng = StdRng::seed_from_u64(5);
            let mut left = size;
            let mut i = 0u64;
            let mut files = Vec::new();
            while left > 0 {
                let n = rng.gen_range(4u64 << 10..=64 << 10).min(left);
                files.push((i, n));
                left -= n;
                i += 1;
            }
            for d in 0..=(i / 1000) {
                fs::create_dir_all(dir.join(format!("d{d:04}")))?;
            }
            files.par_iter().try_for_each(|&(i, n)| {
                let mut buf = vec![0u8; n as usize];
                StdRng::seed_from_u64(10_000 + i).fill_bytes(&mut buf);
                fs::write(dir.join(format!("d{:04}/f{i:07}", i / 1000)), buf)
            })
        }
        w => Err(std::io::Error::other(format!("unknown workload {w}"))),
    }
}

/// Turns version 1 under `dir` into version 2.
pub fn mutate(workload: &str, dir: &Path, size: u64) -> std::io::Result<()> {
    match workload {
        "single" => {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(dir.join("file.bin"))?;
            let runs = (size / 10) >> 20;
            let mut rng = StdRng::seed_from_u64(2);
            let mut buf = vec![0u8; 1 << 20];
            let slots = size >> 20;
            for k in 0..runs {
                let at = rng.gen_range(0..slots.max(1)) << 20;
                fill(&mut buf, 0xabc0_0000 + k);
                let n = (size - at).min(buf.len() as u64) as usize;
                f.write_all_at(&buf[..n], at)?;
            }
            Ok(())
        }
        "different" => (0..64u64)
            .into_par_iter()
            .try_for_each(|i| write_random(&dir.join(format!("f{i:02}")), size / 64, 200 + i)),
        "similar" => {
            let path = dir.join("file.bin");
            let old = fs::read(&path)?;
            let mut rng = StdRng::seed_from_u64(3);
            // One small edit per 16 MiB on average.
            let mut cuts: Vec<usize> = (0..(old.len() >> 24).max(1))
                .map(|_| rng.gen_range(0..old.len().max(1)))
                .collect();
            cuts.sort_unstable();
            let mut new = Vec::with_capacity(old.len() + cuts.len() * 64);
            let mut at = 0usize;
            for c in cuts {
                if c < at {
                    continue;
                }
                new.extend_from_slice(&old[at..c]);
                let n = rng.gen_range(1usize..=64);
                match rng.gen_range(0..3) {
                    0 => {
                        // insert
                        new.extend((0..n).map(|_| rng.gen::<u8>()));
                        at = c;
                    }
                    1 => at = (c + n).min(old.len()), // delete
                    _ => {
                        // overwrite
                        new.extend((0..n.min(old.len() - c)).map(|_| rng.gen::<u8>()));
                        at = (c + n).min(old.len());
                    }
                }
            }
            new.extend_from_slice(&old[at..]);
            fs::write(&path, new)
        }
        "checkpoint" => {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(dir.join("model.ckpt"))?;
            let mut rng = StdRng::seed_from_u64(8);
            let sizes = tensor_sizes(size, 7);
            // A tenth of the tensors (at least one) get new values.
            let mut changed = vec![false; sizes.len()];
            for _ in 0..sizes.len().div_ceil(10) {
                changed[rng.gen_range(0..sizes.len())] = true;
            }
            let mut at = 0u64;
            for (i, t) in sizes.into_iter().enumerate() {
                if changed[i] {
                    let mut buf = vec![0u8; t as usize];
                    fill_tensor(&mut buf, 5000 + i as u64);
                    f.write_all_at(&buf, at)?;
                }
                at += t;
            }
            Ok(())
        }
        "tree" => {
            let mut rng = StdRng::seed_from_u64(6);
            let mut paths = Vec::new();
            for d in fs::read_dir(dir)? {
                for e in fs::read_dir(d?.path())? {
                    paths.push(e?.path());
                }
            }
            paths.sort();
            for p in paths {
                {
                    if rng.gen_range(0..20) == 0 {
                        let n = fs::metadata(&p)?.len() as usize;
                        let mut buf = vec![0u8; n];
                        rng.fill_bytes(&mut buf);
                        fs::write(&p, buf)?;
                    }
                }
            }
            Ok(())
        }
        w => Err(std::io::Error::other(format!("unknown workload {w}"))),
    }
}
