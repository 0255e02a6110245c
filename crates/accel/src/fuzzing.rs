//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`, which
//! no shipped build turns on). Each takes the bytes of one file, runs the
//! decoder accel itself runs on it, and panics only on a bug: a panic in the
//! decoder or in what consumes its output, or a round trip that changes a
//! value.

use crate::auto::decide::{crossover, decide, JobShape, Sides, CUT_ALIGN};
use crate::auto::file;
use crate::auto::model::HostMemory;
use crate::auto::{shipped, CostModel, Identity, Plan};
use crate::gpu::kernels::{decode_cache_entry, encode_cache_entry};
use crate::job::OpKind;

/// A kernel-cache entry (BLAKE3(ptx) ‖ ptx), as `compile` reads one from
/// the cache directory. The digest is made valid first, so that the
/// fuzzer reaches the UTF-8 check behind it; then the entry must decode to
/// its PTX, and the PTX must encode back to the same bytes.
pub fn kernel_cache_entry(input: &[u8]) -> Option<String> {
    let mut entry = input.to_vec();
    if entry.len() > 32 {
        let digest = *blake3::hash(&entry[32..]).as_bytes();
        entry[..32].copy_from_slice(&digest);
    }
    // The input as it came: a damaged entry must be refused, not trusted.
    if let Some(ptx) = decode_cache_entry(input) {
        assert_eq!(blake3::hash(ptx.as_bytes()).as_bytes()[..], input[..32]);
    }
    let ptx = decode_cache_entry(&entry)?;
    assert_eq!(encode_cache_entry(&ptx), entry, "cache entry round trip");
    Some(ptx)
}

/// The machine the `cost_model` target's files are checked against (and
/// the seed files are written for): fixed, so that a corpus made on one
/// machine is not stale on another.
pub fn fuzz_identity() -> Identity {
    Identity {
        gvault_version: "fuzz".into(),
        cpu_cores: 8,
        gpu_name: Some("fuzz GPU".into()),
        driver_version: Some(13000),
    }
}

/// Job shapes every decoded model decides: few and many segments, small
/// and large, one past the direct-DMA threshold.
const SHAPES: &[(u64, usize)] = &[
    (64, 1),
    (4 << 10, 1024),
    (1 << 20, 8),
    (300 << 10, 3),
    (64 << 20, 1),
];

/// A cost-model file (`cost-model.json`), read as `auto::load` reads it:
/// decoded, version-checked, validated and checked against the machine
/// (and again as `load_before_gpu` does, the GPU taken on trust). What
/// decodes must write and read back unchanged; then, filled from the
/// shipped defaults as `load` fills it, it decides a set of jobs and the
/// CPU/GPU crossovers `bench calibrate` prints: a model that validates
/// must never make the decision panic or return a split outside the job.
pub fn cost_model(input: &[u8]) -> Result<CostModel, String> {
    let current = fuzz_identity();
    // `read_to_string` refuses a file that is not UTF-8.
    let text = std::str::from_utf8(input).map_err(|e| format!("cannot read it: {e}"))?;
    let _ = file::decode(text, &current, false);
    let model = file::decode(text, &current, true)?;
    let again = file::decode(&file::encode(&model)?, &current, true)
        .expect("a model written by `write` reads back");
    assert_eq!(
        again, model,
        "cost model changed in a write/read round trip"
    );
    let mut model = model;
    model.fill_from(&shipped(current.clone()));
    exercise(&model, current.cpu_cores);
    Ok(model)
}

/// Decides every op on every shape and memory kind, and checks each
/// split lies inside its job.
fn exercise(model: &CostModel, cores: usize) {
    for op in OpKind::ALL {
        for &(len, n) in SHAPES {
            let lengths = vec![len; n];
            for mem in [HostMemory::Device, HostMemory::Pinned, HostMemory::Pageable] {
                let sides = Sides {
                    cpu_threads: cores,
                    cores,
                    gpu: true,
                    cpu_queued_ns: 0.0,
                    gpu_queued_ns: 0.0,
                };
                let shape = JobShape {
                    op,
                    lengths: &lengths,
                    mem,
                };
                if let Plan::Split(p) = decide(model, &shape, &sides).plan {
                    assert!(p.segment < n, "split past the job's end: {p:?}");
                    assert!(
                        p.segment > 0 || p.offset > 0,
                        "split that gives the GPU nothing: {p:?}"
                    );
                    assert!(
                        p.offset < len && p.offset % CUT_ALIGN == 0,
                        "cut outside its segment or off the cipher block: {p:?}"
                    );
                }
            }
        }
        for mem in HostMemory::HOST {
            let _ = crossover(model, op, 64, cores, mem);
        }
    }
}
