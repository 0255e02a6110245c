//! The checkpoint engine's host-side logic, which needs no GPU: pack plans
//! hold the chunks of one place (host memory or one GPU, here fake device
//! slices that are never touched), `fetch` lays out ciphertext and reads
//! each tag in place, and `run::save`/`run::load` round-trip host
//! checkpoints and refuse bad requests with errors.

use std::sync::Arc;

use gvault_accel::DeviceSlice;
use gvault_cas::accel_jobs::{cpu_backend, IdChunk, TAG_LEN};
use gvault_cas::checkpoint::{self, run, Plan, Saver, Source};
use gvault_cas::pack::PACK_TARGET;
use gvault_cas::{Chunker, Error, InitOptions, Kind, Repository};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{RngCore, SeedableRng};

fn repo(dir: &std::path::Path) -> Arc<Repository> {
    let enc = Encryption::with_key(generate_key());
    let opts = InitOptions {
        chunker: Chunker::Cdc {
            min: 64 << 10,
            avg: 256 << 10,
            max: 1 << 20,
        },
        compression: false,
    };
    Arc::new(Repository::init(dir, &enc, opts, cpu_backend()).unwrap())
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn host(buf: &[u8]) -> Source {
    Source::Host {
        ptr: buf.as_ptr() as usize,
        len: buf.len(),
    }
}

/// A fake device source: plans only record it; nothing dereferences it.
fn device(ordinal: u32, len: usize) -> Source {
    // SAFETY: never read; the test only plans with it.
    Source::Device(unsafe { DeviceSlice::new(ordinal, 0x1000_0000 * (ordinal as u64 + 1), len) })
}

/// Chunks of 1 MiB with ids made from (segment, index).
fn fake_chunks(seg: usize, len: usize) -> Vec<IdChunk> {
    (0..len / (1 << 20))
        .map(|i| {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&(seg as u64).to_le_bytes());
            id[8..16].copy_from_slice(&(i as u64).to_le_bytes());
            IdChunk {
                offset: (i << 20) as u64,
                len: 1 << 20,
                id,
            }
        })
        .collect()
}

#[test]
fn pack_plans_hold_the_chunks_of_one_place() {
    let d = tempfile::tempdir().unwrap();
    let repo = repo(&d.path().join("r"));
    let mut saver = Saver::new(repo).unwrap();
    let a = random(20 << 20, 1);
    let b = random(20 << 20, 2);
    // Host, GPU 0, GPU 1, host, GPU 1: segments interleaved as a model
    // split across GPUs would be.
    let srcs = vec![
        host(&a),
        device(0, 20 << 20),
        device(1, 20 << 20),
        host(&b),
        device(1, 20 << 20),
    ];
    let chunks = (0..srcs.len()).map(|i| fake_chunks(i, 20 << 20)).collect();
    let mut plans = saver.add(srcs.clone(), chunks).unwrap();
    let full = plans.len();
    assert!(full >= 5, "{full} full plans");
    for p in &plans {
        assert!(
            p.bytes >= PACK_TARGET as u64,
            "a full plan of {} bytes",
            p.bytes
        );
    }
    let rest = saver.take_rest();
    let mut places: Vec<Option<u32>> = rest.iter().map(|p| p.device).collect();
    places.sort();
    places.dedup();
    assert_eq!(places.len(), rest.len(), "at most one partial plan a place");
    plans.extend(rest);
    let place_of = |seg: usize| srcs[seg].device();
    let mut chunks_by_place = std::collections::BTreeMap::new();
    for p in &plans {
        for blob in &p.blobs {
            assert_eq!(place_of(blob.seg), p.device, "a plan mixes places");
        }
        *chunks_by_place.entry(p.device).or_insert(0) += p.blobs.len();
    }
    // 20 chunks a segment: host 2 segments, GPU 0 one, GPU 1 two.
    assert_eq!(chunks_by_place[&None], 40);
    assert_eq!(chunks_by_place[&Some(0)], 20);
    assert_eq!(chunks_by_place[&Some(1)], 40);
    // Scratch offsets are 16-byte aligned and inside the plan's layout.
    for p in &plans {
        for blob in &p.blobs {
            assert_eq!(blob.scratch % 16, 0);
            assert!(blob.scratch + blob.len as u64 <= p.scratch_len);
        }
    }
    // Host plans seal on the host; a device plan refuses scratch on
    // another GPU before touching any memory.
    let host_plan = plans.iter().find(|p| p.device.is_none()).unwrap();
    let sealed = saver.seal_host(host_plan).unwrap();
    assert!(sealed.bytes.len() as u64 >= host_plan.bytes);
    let gpu1: &Plan = plans.iter().find(|p| p.device == Some(1)).unwrap();
    // SAFETY: rejected before use.
    let wrong = unsafe { DeviceSlice::new(0, 0x1000, gpu1.scratch_len as usize) };
    let err = checkpoint::seal_device(&saver.repo, gpu1, &*cpu_backend(), wrong).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// Saves `segments` (segment 0 is the manifest) through the host path.
fn save_on_host(repo: &Arc<Repository>, name: &str, segments: &[&[u8]]) -> String {
    let srcs: Vec<Source> = segments.iter().map(|s| host(s)).collect();
    // SAFETY: the segments are live host buffers, unchanged during the save.
    unsafe { run::save(repo, &*cpu_backend(), name, &srcs, &run::Options::default()) }
        .unwrap()
        .snapshot
}

fn host_target(buf: &mut [u8]) -> run::Target {
    run::Target::Host {
        ptr: buf.as_mut_ptr() as usize,
        len: buf.len(),
    }
}

#[test]
fn a_host_checkpoint_saves_dedups_and_loads_bit_for_bit() {
    let d = tempfile::tempdir().unwrap();
    let repo = repo(&d.path().join("r"));
    let mut tensors: Vec<Vec<u8>> = (0..12)
        .map(|i| random((i % 4) << 20 | 4099, i as u64))
        .collect();
    tensors.push(Vec::new());
    let mut segs: Vec<&[u8]> = vec![b"{\"m\":1}"];
    segs.extend(tensors.iter().map(|t| &t[..]));
    let srcs: Vec<Source> = segs.iter().map(|s| host(s)).collect();
    let opts = run::Options::default();
    // SAFETY: live host buffers, unchanged during the save.
    let first = unsafe { run::save(&repo, &*cpu_backend(), "a", &srcs, &opts) }.unwrap();
    let total: u64 = segs.iter().map(|s| s.len() as u64).sum();
    assert_eq!(first.stats.bytes_total, total);
    assert_eq!(first.stats.chunks_known, 0);
    assert_eq!(
        first.moved,
        run::Moved::default(),
        "host data never crosses a link"
    );
    assert!(first.trace.contains_key("chunk") && first.trace.contains_key("commit"));

    // Change one tensor: only its chunks are new.
    let mut changed = tensors.clone();
    changed[5] = random(tensors[5].len(), 99);
    let mut segs2: Vec<&[u8]> = vec![b"{\"m\":1}"];
    segs2.extend(changed.iter().map(|t| &t[..]));
    let srcs2: Vec<Source> = segs2.iter().map(|s| host(s)).collect();
    // SAFETY: as above.
    let second = unsafe { run::save(&repo, &*cpu_backend(), "a", &srcs2, &opts) }.unwrap();
    assert!(
        second.stats.bytes_new <= tensors[5].len() as u64,
        "{:?}",
        second.stats
    );
    assert!(second.stats.bytes_new > 0 && second.stats.chunks_known > 0);

    for (snap, want) in [(&first.snapshot, &segs), (&second.snapshot, &segs2)] {
        let opened = checkpoint::open(&repo, snap).unwrap();
        assert_eq!(opened.manifest, want[0]);
        let mut bufs: Vec<Vec<u8>> = want[1..].iter().map(|s| vec![0u8; s.len()]).collect();
        let targets: Vec<run::Target> = bufs.iter_mut().map(|b| host_target(b)).collect();
        // SAFETY: distinct live buffers of each segment's length.
        let (_, moved) =
            unsafe { run::load(&repo, &*cpu_backend(), &opened, &targets, &opts) }.unwrap();
        assert_eq!(moved, run::Moved::default());
        for (b, w) in bufs.iter().zip(&want[1..]) {
            assert!(b[..] == w[..]);
        }
    }
    assert_eq!(checkpoint::find(&repo, "a").unwrap(), second.snapshot);
}

#[test]
fn bad_saves_and_loads_are_errors_not_panics() {
    let d = tempfile::tempdir().unwrap();
    let repo = repo(&d.path().join("r"));
    let data = random(3 << 20, 1);
    let opts = run::Options::default();
    let cpu = cpu_backend();
    // SAFETY (every call below): live host buffers; fake device slices
    // are refused before anything reads them.
    let no_manifest = unsafe { run::save(&repo, &*cpu, "x", &[], &opts) }.unwrap_err();
    assert!(
        matches!(no_manifest, Error::InvalidArgument(_)),
        "{no_manifest}"
    );
    let bad_name = unsafe { run::save(&repo, &*cpu, "a/b", &[host(b"{}")], &opts) }.unwrap_err();
    assert!(matches!(bad_name, Error::InvalidArgument(_)), "{bad_name}");
    let on_device = unsafe { run::save(&repo, &*cpu, "x", &[device(0, 16)], &opts) }.unwrap_err();
    assert!(
        matches!(on_device, Error::InvalidArgument(_)),
        "{on_device}"
    );
    // Device segments with no GPU: an error, and no checkpoint.
    let srcs = [host(b"{}"), host(&data), device(0, 1 << 20)];
    let no_gpu = unsafe { run::save(&repo, &*cpu, "x", &srcs, &opts) }.unwrap_err();
    assert!(!matches!(no_gpu, Error::InvalidArgument(_)), "{no_gpu}");
    assert!(checkpoint::find(&repo, "x").is_err());

    let snap = save_on_host(&repo, "ok", &[b"{}", &data]);
    let opened = checkpoint::open(&repo, &snap).unwrap();
    let mut short = vec![0u8; data.len() - 1];
    let wrong_len =
        unsafe { run::load(&repo, &*cpu, &opened, &[host_target(&mut short)], &opts) }.unwrap_err();
    assert!(
        matches!(wrong_len, Error::InvalidArgument(_)),
        "{wrong_len}"
    );
    let wrong_count = unsafe { run::load(&repo, &*cpu, &opened, &[], &opts) }.unwrap_err();
    assert!(
        matches!(wrong_count, Error::InvalidArgument(_)),
        "{wrong_count}"
    );
    // A device target with no GPU: an error, not a panic.
    // SAFETY: never dereferenced: the worker finds no GPU first.
    let fake = run::Target::Device(unsafe { DeviceSlice::new(0, 0x1000_0000, data.len()) });
    let no_gpu = unsafe { run::load(&repo, &*cpu, &opened, &[fake], &opts) }.unwrap_err();
    assert!(!matches!(no_gpu, Error::InvalidArgument(_)), "{no_gpu}");
}

#[test]
fn fetch_reads_each_chunk_and_tag_in_place() {
    let d = tempfile::tempdir().unwrap();
    let repo = repo(&d.path().join("r"));
    let data = random(9 << 20, 3);
    let snap = save_on_host(&repo, "t", &[b"{}", &data]);
    let opened = checkpoint::open(&repo, &snap).unwrap();
    assert_eq!(opened.manifest, b"{}");
    let chunks = &opened.segments[0];
    assert!(chunks.len() > 8, "{} chunks", chunks.len());
    let cap = 3u64 << 20;
    let groups = checkpoint::groups(chunks, cap);
    assert!(groups.len() >= 3);
    let mut whole = Vec::new();
    let mut seg_off = 0u64;
    for (start, end) in groups {
        let mut buf = vec![0u8; cap as usize];
        let f = checkpoint::fetch(&repo, &chunks[start..end], seg_off, &mut buf).unwrap();
        assert!(f.layout_len + TAG_LEN as u64 <= cap || end - start == 1);
        for c in &f.items {
            assert_eq!(c.scratch % 16, 0);
            assert_eq!(c.seg_offset, seg_off);
            let (loc, tag) = c.sealed.as_ref().expect("stored uncompressed");
            let pack = repo.backend.get(Kind::Pack, &loc.pack_name()).unwrap();
            let at = loc.blob.offset as usize;
            let n = c.len as usize;
            assert_eq!(
                &buf[c.scratch as usize..c.scratch as usize + n],
                &pack[at..at + n]
            );
            assert_eq!(&tag[..], &pack[at + n..at + n + TAG_LEN]);
            seg_off += c.len as u64;
        }
        // One byte short of the layout and its last tag: an error, no panic.
        let mut short = vec![0u8; (f.layout_len + TAG_LEN as u64 - 1) as usize];
        let first = f.items[0].seg_offset;
        let err = checkpoint::fetch(&repo, &chunks[start..end], first, &mut short).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        whole.push(f.items.len());
    }
    assert_eq!(whole.iter().sum::<usize>(), chunks.len());
    assert_eq!(seg_off, data.len() as u64);
    // The host read of the same segment gives the plaintext back.
    let mut back = vec![0u8; data.len()];
    checkpoint::read_segment(&repo, chunks, &mut back).unwrap();
    assert!(back == data);
}
