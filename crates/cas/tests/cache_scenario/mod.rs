//! The metadata cache's scenario, shared by tests/cache.rs (an in-memory
//! backend) and tests/s3.rs (the real S3 server): a backend wrapper counts
//! the requests that reach the repository, and shows that a second open
//! reads no index file or snapshot again, that new ones written by another
//! client are still learned, that a damaged cache file (or one that is
//! whole but does not authenticate) is never trusted, and that objects
//! pruned by another client are neither served nor lose a chunk.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::{Backend, CachedBackend, Chunker, InitOptions, Kind, Repository, Result};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{RngCore, SeedableRng};

/// Requests that reached the wrapped backend, by operation and kind.
pub struct Counting {
    pub inner: Arc<dyn Backend>,
    counts: Mutex<HashMap<(&'static str, Kind), u64>>,
}

impl Counting {
    pub fn new(inner: Arc<dyn Backend>) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            counts: Mutex::default(),
        })
    }
    fn bump(&self, op: &'static str, kind: Kind) {
        *self.counts.lock().unwrap().entry((op, kind)).or_default() += 1;
    }
    /// Reads (get, ranged get, size) of `kind` since the last reset.
    pub fn reads(&self, kind: Kind) -> u64 {
        let c = self.counts.lock().unwrap();
        ["get", "get_range", "size"]
            .iter()
            .map(|op| c.get(&(*op, kind)).copied().unwrap_or(0))
            .sum()
    }
    pub fn lists(&self, kind: Kind) -> u64 {
        let c = self.counts.lock().unwrap();
        c.get(&("list", kind)).copied().unwrap_or(0)
    }
    pub fn reset(&self) {
        self.counts.lock().unwrap().clear();
    }
}

impl Backend for Counting {
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()> {
        self.bump("put", kind);
        self.inner.put(kind, name, data)
    }
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        self.bump("get", kind);
        self.inner.get(kind, name)
    }
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.bump("get_range", kind);
        self.inner.get_range(kind, name, offset, len)
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64> {
        self.bump("size", kind);
        self.inner.size(kind, name)
    }
    fn list(&self, kind: Kind) -> Result<Vec<String>> {
        self.bump("list", kind);
        self.inner.list(kind)
    }
    fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        self.bump("delete", kind);
        self.inner.delete(kind, name)
    }
    fn exists(&self, kind: Kind, name: &str) -> Result<bool> {
        self.inner.exists(kind, name)
    }
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()> {
        self.inner.put_root(name, data)
    }
    fn get_root(&self, name: &str) -> Result<Vec<u8>> {
        self.inner.get_root(name)
    }
    fn parallelism(&self) -> usize {
        self.inner.parallelism()
    }
}

/// A few files: small ones and one of `big` random bytes.
pub fn small_tree(root: &Path, seed: u64, big: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    fs::create_dir_all(root.join("d")).unwrap();
    for i in 0..6 {
        let mut b = vec![0u8; 20_000 + i * 7_000];
        rng.fill_bytes(&mut b);
        fs::write(root.join(format!("d/f{i}")), &b).unwrap();
    }
    let mut b = vec![0u8; big];
    rng.fill_bytes(&mut b);
    fs::write(root.join("big"), &b).unwrap();
}

fn read_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(root).unwrap().to_owned(),
                    fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn restores_whole(repo: &Repository, snapshot: &str, src: &Path, out: &Path) {
    let snap = gvault_cas::Snapshot::read(repo, snapshot).unwrap();
    let r = gvault_cas::restore(repo, &snap, out, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(
        read_tree(src),
        read_tree(&out.join(src.strip_prefix("/").unwrap()))
    );
}

/// Runs the scenario on `remote` (an empty repository location) with
/// scratch space under `tmp`.
pub fn run(remote: Arc<dyn Backend>, location: &str, tmp: &Path) {
    let enc = Encryption::with_key(generate_key());
    let count = Counting::new(remote.clone());
    let counted: Arc<dyn Backend> = count.clone();
    let repo = Repository::init_on(
        counted.clone(),
        location,
        &enc,
        InitOptions {
            chunker: Chunker::Cdc {
                min: 4096,
                avg: 16384,
                max: 65536,
            },
            compression: true,
        },
        cpu_backend(),
    )
    .unwrap();
    let id = hex::encode(repo.config.repo_id);
    drop(repo);
    let cache_root = tmp.join("cache");
    let cache_dir = cache_root.join(&id);
    // One "process" of the cached client: a fresh cache handle each time,
    // on the same directory, so that nothing is remembered but the files.
    let cached_open = || {
        let c = Arc::new(CachedBackend::new(counted.clone(), &cache_dir).unwrap());
        let r = Repository::open_on(c.clone(), location, Some(&enc), cpu_backend()).unwrap();
        (r, c)
    };
    let plain_open = || Repository::open_on(remote.clone(), location, Some(&enc), cpu_backend());

    // Three backups through the cache (each writes an index file and a
    // snapshot, which the cache keeps as written).
    let srcs: Vec<PathBuf> = (0..3).map(|i| tmp.join(format!("src{i}"))).collect();
    let mut snaps = Vec::new();
    for (i, s) in srcs.iter().enumerate() {
        small_tree(s, i as u64, 200_000);
        let (r, _) = cached_open();
        snaps.push(
            gvault_cas::backup(&r, std::slice::from_ref(s), &mut |_| {})
                .unwrap()
                .snapshot,
        );
    }
    // Without the cache, `snapshots` reads every index footer and snapshot.
    count.reset();
    {
        let r = Repository::open_on(counted.clone(), location, Some(&enc), cpu_backend()).unwrap();
        assert_eq!(gvault_cas::snapshot::list(&r).unwrap().len(), 3);
    }
    let uncached_index_reads = count.reads(Kind::Index);
    assert!(uncached_index_reads >= 3 * 3, "{uncached_index_reads}");
    assert_eq!(count.reads(Kind::Snapshot), 3);
    // With it, the second `snapshots` reads none, only the listings.
    count.reset();
    let (r, c) = cached_open();
    assert_eq!(gvault_cas::snapshot::list(&r).unwrap().len(), 3);
    assert_eq!(count.reads(Kind::Index), 0);
    assert_eq!(count.reads(Kind::Snapshot), 0);
    assert!(count.lists(Kind::Index) >= 1 && count.lists(Kind::Snapshot) >= 1);
    assert!(
        c.stats().hits > 0 && c.stats().downloads == 0,
        "{:?}",
        c.stats()
    );
    drop(r);
    // A backup of unchanged data reads no old index file or snapshot either.
    count.reset();
    let (r, _) = cached_open();
    let again = gvault_cas::backup(&r, std::slice::from_ref(&srcs[0]), &mut |_| {}).unwrap();
    assert_eq!(again.files_unchanged, 7);
    assert_eq!(count.reads(Kind::Snapshot), 0);
    assert_eq!(count.reads(Kind::Index), 0);
    drop(r);
    snaps.push(again.snapshot);

    // Another client (no cache) backs up new data: the cached client
    // downloads only that index file and snapshot, and dedups against it.
    let other = tmp.join("other");
    small_tree(&other, 7, 300_000);
    let s_other = {
        let r = plain_open().unwrap();
        gvault_cas::backup(&r, std::slice::from_ref(&other), &mut |_| {})
            .unwrap()
            .snapshot
    };
    count.reset();
    let (r, c) = cached_open();
    assert_eq!(gvault_cas::snapshot::list(&r).unwrap().len(), 5);
    assert_eq!(c.stats().downloads, 2, "{:?}", c.stats());
    assert!(
        count.reads(Kind::Index) <= 2,
        "{}",
        count.reads(Kind::Index)
    );
    assert_eq!(count.reads(Kind::Snapshot), 1);
    let copy = tmp.join("copy");
    fs::create_dir_all(&copy).unwrap();
    fs::copy(other.join("big"), copy.join("big")).unwrap();
    let s = gvault_cas::backup(&r, std::slice::from_ref(&copy), &mut |_| {}).unwrap();
    assert!(s.chunks_known > 0 && s.bytes_new_raw == 0, "{s:?}");
    drop(r);

    // A damaged cache file fails its hash: it is downloaded again.
    let snap_file = |n: &str| cache_dir.join("snapshots").join(n);
    let mut b = fs::read(snap_file(&snaps[0])).unwrap();
    b[10] ^= 0x40;
    fs::write(snap_file(&snaps[0]), &b).unwrap();
    count.reset();
    let (r, c) = cached_open();
    let listed = gvault_cas::snapshot::list(&r).unwrap();
    assert_eq!(listed.len(), 6);
    assert_eq!((c.stats().corrupt, c.stats().downloads), (1, 1));
    assert_eq!(count.reads(Kind::Snapshot), 1);
    drop(r);
    // A whole cache file (its hash matches) holding another snapshot's
    // bytes does not authenticate: dropped and read again, never used.
    fs::copy(snap_file(&snaps[1]), snap_file(&snaps[0])).unwrap();
    let (r, c) = cached_open();
    r.backend.list(Kind::Snapshot).unwrap();
    count.reset();
    let s0 = gvault_cas::Snapshot::read(&r, &snaps[0]).unwrap();
    assert_eq!(c.stats().dropped, 1, "{:?}", c.stats());
    assert_eq!(count.reads(Kind::Snapshot), 1);
    assert_eq!(s0, gvault_cas::Snapshot::read(&r, &snaps[0]).unwrap());
    assert_eq!(count.reads(Kind::Snapshot), 1);
    drop(r);

    // Another client forgets every snapshot of src0 and src1 and prunes:
    // the cached client evicts what was deleted, serves none of it, and a
    // backup through it loses no chunk.
    {
        let r = plain_open().unwrap();
        for n in [&snaps[0], &snaps[1], &snaps[3]] {
            r.backend.delete(Kind::Snapshot, n).unwrap();
        }
        let p = gvault_cas::prune(&r).unwrap();
        assert!(p.index_files_replaced > 0 && p.packs_deleted > 0, "{p:?}");
    }
    let (r, c) = cached_open();
    let live_index = remote.list(Kind::Index).unwrap();
    let mut loaded: Vec<String> = r.index.files().iter().map(|f| f.name.clone()).collect();
    loaded.sort();
    assert_eq!(loaded, live_index);
    assert!(c.stats().evicted > 0, "{:?}", c.stats());
    let mut cached_names: Vec<String> = fs::read_dir(cache_dir.join("index"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    cached_names.sort();
    assert!(cached_names.iter().all(|n| live_index.contains(n)));
    assert!(gvault_cas::Snapshot::read(&r, &snaps[0]).is_err());
    // src0's chunks were pruned (its snapshots are gone): backing it up
    // again through the cache must upload them, not dedup against the
    // deleted index files.
    let s = gvault_cas::backup(&r, std::slice::from_ref(&srcs[0]), &mut |_| {}).unwrap();
    assert!(s.bytes_new_raw > 0, "{s:?}");
    drop(r);
    let r = plain_open().unwrap();
    let ch = gvault_cas::check(&r, true, &mut |_, _| {}).unwrap();
    assert!(ch.is_clean(), "{:?}", ch.errors);
    restores_whole(&r, &s.snapshot, &srcs[0], &tmp.join("out0"));
    restores_whole(&r, &s_other, &other, &tmp.join("out1"));

    // The repository's own open puts the cache under <root>/<id>/.
    let r = Repository::open_on_cached(
        counted.clone(),
        location,
        Some(&enc),
        cpu_backend(),
        Some(&cache_root),
    )
    .unwrap();
    assert_eq!(gvault_cas::snapshot::list(&r).unwrap().len(), 4);
    assert!(cache_root.join("CACHEDIR.TAG").exists());
    assert_eq!(
        fs::read_dir(cache_dir.join("snapshots"))
            .unwrap()
            .filter(|e| !e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.'))
            .count(),
        4
    );
}
