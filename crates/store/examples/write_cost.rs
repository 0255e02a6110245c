//! Per-put CPU cost of single puts (db_bench fillseq, one writer), plain
//! (CRC32C) against encrypted (AES-256-GCM on the CPU backend), in one
//! process: rounds alternate between fresh stores, and the writing thread's
//! own CPU time is reported (a shared machine disturbs it far less than
//! wall time), with the whole process's (flushes and compactions
//! included), medians over rounds. Last, what the writer's seal of one
//! group commit (a value frame and its commit record) costs alone, against
//! its CRC32C: the encryption-specific part of a put.
//!
//! `cargo run --release -p gvault-store --example write_cost -- VALUE_BYTES NUM [ROUNDS]`

use std::time::{Duration, Instant};

#[path = "cpu_clock/mod.rs"]
mod cpu_clock;

use cpu_clock::{process_cpu, thread_cpu};
use gvault_accel::{Backend, CpuBackend};
use gvault_store::codec::{BlockCodec, BlockContext, BlockKind, Crc32cCodec};
use gvault_store::crypto::GcmCodec;
use gvault_store::{Encryption, Options, Store};

fn value(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Nanoseconds per put of `num` sequential puts into a fresh store:
/// (writing thread CPU, process CPU, wall), the store closed in the timing
/// (its flushes are part of the cost).
fn fill_seq(dir: &std::path::Path, opts: Options, values: &[Vec<u8>]) -> (f64, f64, f64) {
    let store = Store::open(dir, opts).unwrap();
    let (t, p, w) = (thread_cpu(), process_cpu().0, Instant::now());
    for (i, v) in values.iter().enumerate() {
        store.put(format!("{i:016}"), v).unwrap();
    }
    let thread = thread_cpu() - t;
    store.close().unwrap();
    let per = |d: Duration| d.as_nanos() as f64 / values.len() as f64;
    let out = (per(thread), per(process_cpu().0 - p), per(w.elapsed()));
    std::fs::remove_dir_all(dir).unwrap();
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Group commits timed per variant.
const GROUPS: u32 = 5_000;

/// This thread's CPU nanoseconds per call of `seal(i)`, i = 0..GROUPS.
fn per_group(mut seal: impl FnMut(u32)) -> f64 {
    let t = thread_cpu();
    for i in 0..GROUPS {
        seal(i);
    }
    (thread_cpu() - t).as_nanos() as f64 / f64::from(GROUPS)
}

/// Nanoseconds per seal of one group commit's blocks by `codec`.
fn seal_group(codec: &dyn BlockCodec, len: usize) -> f64 {
    // A log writer reads the key id once per file, not per block.
    let key_id = codec.key_id();
    let ctx = |block: u32, kind| BlockContext {
        key_id,
        file_number: 9,
        block_number: block,
        offset: u64::from(block) * 70_000,
        kind,
    };
    let overhead = codec.overhead();
    let mut frame = vec![7u8; len + 30 + overhead];
    let mut commit = vec![3u8; 48 + overhead];
    per_group(|i| {
        let mut slots = [
            gvault_store::codec::SealSlot {
                ctx: ctx(2 * i, BlockKind::LogValue),
                block: &mut frame,
            },
            gvault_store::codec::SealSlot {
                ctx: ctx(2 * i + 1, BlockKind::LogCommit),
                block: &mut commit,
            },
        ];
        codec.seal_slots(&mut slots).unwrap();
    })
}

/// The same two seals straight through aws-lc with a prepared key: the
/// floor for what the codec and the accelerator API add.
fn seal_group_raw(len: usize) -> f64 {
    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[5; 32]).unwrap());
    let mut frame = vec![7u8; len + 30];
    let mut commit = vec![3u8; 48];
    let aad = [9u8; 48];
    per_group(|i| {
        for (j, block) in [&mut frame, &mut commit].into_iter().enumerate() {
            let mut nonce = [0u8; 12];
            nonce[8..].copy_from_slice(&(2 * i + j as u32).to_be_bytes());
            let tag = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(&aad),
                    block,
                )
                .unwrap();
            let _ = std::hint::black_box(tag);
        }
    })
}

/// The same two seals as one job of the CPU backend (no codec).
fn seal_group_backend(len: usize) -> f64 {
    use gvault_accel::Nonce96;
    use gvault_accel::{DataMut, Job, SealSegment};
    let backend = CpuBackend::shared();
    let key = gvault_accel::Aes256Key::from_bytes([5; 32]);
    let mut frame = vec![7u8; len + 30];
    let mut commit = vec![3u8; 48];
    let aad = [9u8; 48];
    per_group(|i| {
        let mut job = Job::Seal {
            key: &key,
            segments: vec![
                SealSegment {
                    nonce: Nonce96::from_parts(9, 2 * i),
                    aad: &aad,
                    data: DataMut::Host(&mut frame),
                },
                SealSegment {
                    nonce: Nonce96::from_parts(9, 2 * i + 1),
                    aad: &aad,
                    data: DataMut::Host(&mut commit),
                },
            ],
        };
        std::hint::black_box(backend.run(&mut job).unwrap());
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let len: usize = args.get(1).map_or(4096, |a| a.parse().unwrap());
    let num: u64 = args.get(2).map_or(20_000, |a| a.parse().unwrap());
    let rounds: usize = args.get(3).map_or(5, |a| a.parse().unwrap());
    let base = tempfile::tempdir_in(std::env::var("WRITE_COST_DIR").unwrap_or(".".into())).unwrap();
    let values: Vec<Vec<u8>> = (0..num).map(|i| value(i, len)).collect();
    let enc_opts = || Options {
        encryption: Some(Encryption::with_key(gvault_store::keys::generate_key())),
        crypto_backend: Some(std::sync::Arc::new(gvault_accel::CpuBackend::new())),
        ..Options::default()
    };
    let (mut plain, mut enc) = (Vec::new(), Vec::new());
    // WRITE_COST_ONLY=plain|enc runs one side only (for profiling it),
    // =seal only the seal figures.
    let only = std::env::var("WRITE_COST_ONLY").unwrap_or_default();
    for r in 0..rounds {
        if only == "seal" {
            break;
        }
        if only != "enc" {
            plain.push(fill_seq(
                &base.path().join(format!("p{r}")),
                Options::default(),
                &values,
            ));
        }
        if only != "plain" {
            enc.push(fill_seq(
                &base.path().join(format!("e{r}")),
                enc_opts(),
                &values,
            ));
        }
    }
    if only == "plain" || only == "enc" {
        return;
    }
    let m = |v: &[(f64, f64, f64)]| {
        [
            median(v.iter().map(|x| x.0).collect()),
            median(v.iter().map(|x| x.1).collect()),
            median(v.iter().map(|x| x.2).collect()),
        ]
    };
    let both = if only.is_empty() {
        let (p, e) = (m(&plain), m(&enc));
        vec![("plain", p, p), ("enc", e, p)]
    } else {
        Vec::new()
    };
    for (name, x, p) in both {
        println!(
            "fillseq {len:>6} B  {name:5}  writing thread {:7.0} ns/put  process {:7.0}  wall {:7.0}  enc/plain by thread {:.2}, by process {:.2}",
            x[0],
            x[1],
            x[2],
            p[0] / x[0],
            p[1] / x[1]
        );
    }
    let gcm = GcmCodec::new(
        [1; 16],
        1,
        vec![(1, gvault_accel::Aes256Key::from_bytes([5; 32]))],
        CpuBackend::shared(),
        None,
    );
    // Seven rounds, the four variants in a rotating order (a variant
    // timed right after another ran at a different clock on the
    // development VM); medians.
    let mut times = [const { Vec::new() }; 4];
    for round in 0..7 {
        for k in 0..4 {
            let v = (round + k) % 4;
            times[v].push(match v {
                0 => seal_group(&Crc32cCodec, len),
                1 => seal_group(&gcm, len),
                2 => seal_group_backend(len),
                _ => seal_group_raw(len),
            });
        }
    }
    let [crc, codec, backend, raw] = times.map(median);
    println!(
        "seal of one group commit ({len} B value): CRC32C {crc:.0} ns, AES-256-GCM {codec:.0} ns, CPU backend job {backend:.0} ns, aws-lc alone {raw:.0} ns"
    );
}
