//! Bounded memory: with a tiny in-memory budget, `prune`, `check
//! --read-data` and `stats` spill their sorts to temporary files and give
//! the same results as with room to spare.

use std::fs;
use std::path::Path;

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::backend::Kind;
use gvault_cas::{Chunker, InitOptions, Repository};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{RngCore, SeedableRng};

fn write_random(path: &Path, len: usize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut b = vec![0u8; len];
    rng.fill_bytes(&mut b);
    fs::write(path, b).unwrap();
}

fn tree_bytes(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(root)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn prune_check_and_stats_spill_under_a_tiny_budget() {
    // Room for about 40 records of a sort: every sort here spills, and
    // prune writes index files of one block (1024 entries) each.
    gvault_cas::extsort::set_memory_budget(40 * 128);
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    // 4096-byte chunks: ~3000 chunks to keep, ~1000 to drop.
    write_random(&src.join("keep1"), 6 << 20, 1);
    write_random(&src.join("keep2"), 6 << 20, 2);
    write_random(&src.join("drop"), 4 << 20, 3);
    let enc = Encryption::with_key(generate_key());
    let root = d.path().join("repo");
    let repo = Repository::init(
        &root,
        &enc,
        InitOptions {
            chunker: Chunker::Fixed { size: 4096 },
            compression: false,
        },
        cpu_backend(),
    )
    .unwrap();
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    fs::remove_file(src.join("drop")).unwrap();
    // A second file of partly shared data: the packs of `drop` go, and
    // the packs the first backup shares with it are rewritten.
    let last = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let before = gvault_cas::stats(&repo).unwrap();
    assert_eq!(before.chunks, 4096, "{before:?}");
    let spilled = gvault_cas::extsort::runs_spilled();
    assert!(spilled > 0, "stats must have spilled");
    let removed = gvault_cas::forget(&repo, 1).unwrap();
    assert_eq!(removed.len(), 1);
    let repo = Repository::open(&root, Some(&enc), cpu_backend()).unwrap();
    let p = gvault_cas::prune(&repo).unwrap();
    assert_eq!(p.chunks_removed, 1024, "{p:?}");
    assert!(gvault_cas::extsort::runs_spilled() > spilled + 10);
    // The kept entries went into several index files, none over its share.
    let repo = Repository::open(&root, Some(&enc), cpu_backend()).unwrap();
    let files = repo.index.files();
    assert!(files.len() >= 3, "{} index files", files.len());
    assert!(files.iter().all(|f| f.entries <= 1024));
    assert_eq!(files.iter().map(|f| f.entries).sum::<u64>(), 3072);
    let after = gvault_cas::stats(&repo).unwrap();
    assert_eq!(after.chunks, 3072, "{after:?}");
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.unindexed_packs.is_empty(), "{c:?}");
    assert_eq!(c.chunks_read, 3072);
    // A second prune finds nothing to do and leaves the index files alone.
    let p = gvault_cas::prune(&repo).unwrap();
    assert_eq!(p, gvault_cas::PruneReport::default());
    assert_eq!(repo.backend.list(Kind::Index).unwrap().len(), files.len());
    let snap = gvault_cas::Snapshot::read(&repo, &last.snapshot).unwrap();
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    let restored = walk_find(&target, "keep1").unwrap();
    assert_eq!(tree_bytes(&src), tree_bytes(restored.parent().unwrap()));
    // Damage one chunk of a pack: check --read-data, walking packs one at a
    // time from the spilled sort, names the file that uses it.
    let pack = repo.backend.list(Kind::Pack).unwrap().remove(0);
    let path = walk_find(&root, &pack).expect("pack file");
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 1;
    fs::write(&path, bytes).unwrap();
    let repo = Repository::open(&root, Some(&enc), cpu_backend()).unwrap();
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(!c.is_clean());
    assert!(!c.affected.is_empty(), "{c:?}");
    assert!(c
        .affected
        .iter()
        .all(|(s, p)| *s == last.snapshot && (p.ends_with("keep1") || p.ends_with("keep2"))));
}

fn walk_find(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for e in fs::read_dir(dir).ok()? {
        let p = e.ok()?.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if p.is_dir() {
            if let Some(f) = walk_find(&p, name) {
                return Some(f);
            }
        }
    }
    None
}
