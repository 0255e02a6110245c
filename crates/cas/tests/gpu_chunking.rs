//! GPU and CPU chunking make the same repository: a tree backed up through
//! the CPU backend, then a copy of it through the GPU backend, adds no
//! chunk the second time (same boundaries, same keyed ids), and both
//! snapshots restore bit for bit. Needs a GPU: `#[ignore]`d here,
//! `scripts/gpu.sh tests` runs it.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use gvault_accel::{Backend, GpuBackend};
use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::{Chunker, InitOptions, Repository};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{RngCore, SeedableRng};

/// Files of awkward sizes, random and repetitive, some far above the
/// largest chunk.
fn tree(root: &Path) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    fs::create_dir_all(root.join("d")).unwrap();
    for (i, len) in [0usize, 1, 4095, 65537, (1 << 20) + 17, 9 << 20, 40 << 20]
        .into_iter()
        .enumerate()
    {
        let mut data = vec![0u8; len];
        rng.fill_bytes(&mut data);
        fs::write(root.join("d").join(format!("random{i}")), &data).unwrap();
        let repetitive: Vec<u8> = (0..len).map(|j| (j % 251) as u8).collect();
        fs::write(root.join(format!("repetitive{i}")), &repetitive).unwrap();
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for e in walk(from) {
        let rel = e.strip_prefix(from).unwrap();
        let dst = to.join(rel);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(&e, &dst).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn check(chunker: Chunker, gpu: &Arc<dyn Backend>) {
    let tmp = tempfile::tempdir().unwrap();
    let (src, copy, dir) = (
        tmp.path().join("src"),
        tmp.path().join("copy"),
        tmp.path().join("repo"),
    );
    tree(&src);
    copy_tree(&src, &copy);
    let enc = Encryption::with_key(generate_key());
    let opts = InitOptions {
        chunker,
        compression: false,
    };
    let cpu_repo = Repository::init(&dir, &enc, opts, cpu_backend()).unwrap();
    let first = gvault_cas::backup(&cpu_repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    drop(cpu_repo);

    let gpu_repo = Repository::open(&dir, Some(&enc), gpu.clone()).unwrap();
    let second = gvault_cas::backup(&gpu_repo, std::slice::from_ref(&copy), &mut |_| {}).unwrap();
    assert_eq!(
        second.bytes_read, first.bytes_read,
        "the copy is read whole"
    );
    assert_eq!(
        second.chunks_new, 0,
        "{chunker:?}: the GPU cut or named a chunk differently ({second:?})"
    );
    assert_eq!(
        second.chunks_known,
        first.chunks_new + first.chunks_known,
        "{chunker:?}"
    );
    // The GPU-written snapshot restores, through the GPU backend, to the source.
    let out = tmp.path().join("out");
    let snap = gvault_cas::Snapshot::read(&gpu_repo, &second.snapshot).unwrap();
    let r = gvault_cas::restore(&gpu_repo, &snap, &out, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    for f in walk(&src) {
        let rel = f.strip_prefix(&src).unwrap();
        let restored = walk(&out)
            .into_iter()
            .find(|p| p.ends_with(rel))
            .unwrap_or_else(|| panic!("{} not restored", rel.display()));
        assert!(
            fs::read(&f).unwrap() == fs::read(&restored).unwrap(),
            "{}",
            rel.display()
        );
    }
}

#[test]
#[ignore = "needs a GPU: scripts/gpu.sh tests runs it"]
fn gpu_and_cpu_chunking_make_the_same_repository() {
    let gpu: Arc<dyn Backend> = match GpuBackend::probe() {
        Ok(g) => Arc::new(g),
        Err(e) if std::env::var("GVAULT_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("GVAULT_REQUIRE_GPU=1 but no usable GPU: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: no usable GPU ({e})");
            return;
        }
    };
    check(
        Chunker::Cdc {
            min: 512 << 10,
            avg: 1 << 20,
            max: 8 << 20,
        },
        &gpu,
    );
    check(
        Chunker::Cdc {
            min: 4096,
            avg: 16384,
            max: 65536,
        },
        &gpu,
    );
    check(Chunker::Fixed { size: 1 << 20 }, &gpu);
}
