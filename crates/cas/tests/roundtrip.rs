//! Round trips of random trees through a repository, damage detection,
//! keys and format versions, and a backup killed at random moments.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::{Chunker, InitOptions, Repository};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{Rng, RngCore, SeedableRng};

const SMALL_CDC: Chunker = Chunker::Cdc {
    min: 4096,
    avg: 16384,
    max: 65536,
};

fn init(dir: &Path, chunker: Chunker, compression: bool) -> (Repository, Encryption) {
    let enc = Encryption::with_key(generate_key());
    let r = Repository::init(
        dir,
        &enc,
        InitOptions {
            chunker,
            compression,
        },
        cpu_backend(),
    )
    .unwrap();
    (r, enc)
}

fn reopen(dir: &Path, enc: &Encryption) -> Repository {
    Repository::open(dir, Some(enc), cpu_backend()).unwrap()
}

/// A random tree: binary (non-UTF-8) names, empty files, a sparse file,
/// symlinks, hard links, nested directories, compressible and random data.
fn random_tree(root: &Path, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("empty_dir")).unwrap();
    let binary = std::ffi::OsStr::from_bytes(b"bin\xff\xfename\x01");
    fs::write(root.join("a").join(binary), b"binary name").unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    for i in 0..20 {
        let len = [0, 1, 100, 4095, 4096, 70_000, 300_000][rng.gen_range(0..7)];
        let mut data = vec![0u8; len];
        if i % 2 == 0 {
            rng.fill_bytes(&mut data);
        } else {
            for (k, b) in data.iter_mut().enumerate() {
                *b = b"compressible text "[k % 18];
            }
        }
        fs::write(root.join(format!("a/b/f{i}")), &data).unwrap();
    }
    let mut big = vec![0u8; 3 << 20];
    rng.fill_bytes(&mut big);
    fs::write(root.join("a/b/c/big"), &big).unwrap();
    // Sparse: 64 MiB with a few written bytes.
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.set_len(64 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_at(b"middle", 20 << 20).unwrap();
    drop(f);
    std::os::unix::fs::symlink("a/b/f1", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
    fs::hard_link(root.join("a/b/f2"), root.join("hard")).unwrap();
    fs::set_permissions(root.join("a/b/f3"), fs::Permissions::from_mode(0o600)).unwrap();
}

#[derive(Debug, PartialEq)]
enum Node {
    Dir(u32),
    File(u32, Vec<u8>, i64),
    Link(Vec<u8>),
}

/// Everything restore must reproduce, keyed by path; hard links as groups.
///
/// Each path's node, and the groups of paths that are hard links of each other.
type Tree = (BTreeMap<Vec<u8>, Node>, Vec<Vec<Vec<u8>>>);

fn describe(root: &Path) -> Tree {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    fn walk(
        root: &Path,
        p: &Path,
        out: &mut BTreeMap<Vec<u8>, Node>,
        inodes: &mut BTreeMap<u64, Vec<Vec<u8>>>,
    ) {
        for e in fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let m = fs::symlink_metadata(&path).unwrap();
            if m.file_type().is_symlink() {
                out.insert(
                    rel,
                    Node::Link(
                        fs::read_link(&path)
                            .unwrap()
                            .as_os_str()
                            .as_bytes()
                            .to_vec(),
                    ),
                );
            } else if m.is_dir() {
                out.insert(rel, Node::Dir(m.mode()));
                walk(root, &path, out, inodes);
            } else {
                if m.nlink() > 1 {
                    inodes.entry(m.ino()).or_default().push(rel.clone());
                }
                out.insert(
                    rel,
                    Node::File(m.mode(), fs::read(&path).unwrap(), m.mtime()),
                );
            }
        }
    }
    walk(root, root, &mut out, &mut inodes);
    let mut groups: Vec<Vec<Vec<u8>>> = inodes
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    groups.sort();
    (out, groups)
}

fn restored_root(target: &Path, src: &Path) -> PathBuf {
    target.join(src.strip_prefix("/").unwrap())
}

fn round_trip(chunker: Chunker, compression: bool) {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 7);
    let (repo, enc) = init(&d.path().join("repo"), chunker, compression);
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert!(s.chunks_new > 0 && s.packs_written > 0);
    let repo = reopen(&d.path().join("repo"), &enc);
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(describe(&src), describe(&restored_root(&target, &src)));
    // The sparse file stays sparse.
    let m = fs::metadata(restored_root(&target, &src).join("sparse")).unwrap();
    assert_eq!(m.len(), 64 << 20);
    assert!(
        m.blocks() * 512 < 8 << 20,
        "restored sparse file uses {} blocks",
        m.blocks()
    );
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean(), "{:?}", c.errors);
    assert!(c.chunks_read > 0);
}

#[test]
fn cdc_round_trip_is_bit_for_bit() {
    round_trip(SMALL_CDC, true);
}

#[test]
fn fixed_block_round_trip_without_compression() {
    round_trip(Chunker::Fixed { size: 8192 }, false);
}

#[test]
fn default_chunker_round_trip() {
    round_trip(Chunker::DEFAULT, true);
}

#[test]
fn second_backup_reads_only_changed_files_and_dedups() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 9);
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let first = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert_eq!(first.files_unchanged, 0);
    let again = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert_eq!(again.parent.as_deref(), Some(first.snapshot.as_str()));
    assert_eq!(again.files_changed + again.files_new, 0);
    assert_eq!(again.bytes_read, 0);
    assert_eq!(again.chunks_new, 0);
    assert_eq!(again.packs_written, 0);
    // Insert bytes in the middle of the big file: CDC re-syncs, so most
    // chunks are shared.
    let big = src.join("a/b/c/big");
    let mut data = fs::read(&big).unwrap();
    data.splice(1_000_000..1_000_000, b"inserted bytes".iter().copied());
    fs::write(&big, &data).unwrap();
    let third = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert_eq!(third.files_changed, 1);
    assert!(
        third.bytes_new_raw < 200_000,
        "{} new bytes",
        third.bytes_new_raw
    );
    let a = gvault_cas::Snapshot::read(&repo, &first.snapshot).unwrap();
    let b = gvault_cas::Snapshot::read(&repo, &third.snapshot).unwrap();
    let diff = gvault_cas::diff(&a, &b);
    assert_eq!(diff.changed.len(), 1);
    assert!(
        diff.bytes_shared > 3_000_000 && diff.bytes_added > 0 && diff.bytes_added < 200_000,
        "{diff:?}"
    );
    // dump writes the one file.
    let mut out = Vec::new();
    let path = format!("{}/a/b/c/big", src.display());
    gvault_cas::dump(&repo, &b, &path, &mut out).unwrap();
    assert_eq!(out, data);
}

#[test]
fn stdin_backup_and_dump() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let mut data = vec![0u8; 5 << 20];
    rand::thread_rng().fill_bytes(&mut data);
    let s = gvault_cas::backup_reader(&repo, "db.sql", &mut &data[..], &mut |_| {}).unwrap();
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        gvault_cas::dump(&repo, &snap, "db.sql", &mut out).unwrap(),
        data.len() as u64
    );
    assert_eq!(out, data);
}

/// Flips one byte of every kind of object in turn; check --read-data must
/// find each, and restore must name the files it could not restore.
#[test]
fn damage_is_found_and_named() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 11);
    let root = d.path().join("repo");
    let (repo, enc) = init(&root, SMALL_CDC, true);
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let packs = repo.backend.list(gvault_cas::Kind::Pack).unwrap();
    let pack = root.join("data").join(&packs[0]);
    let orig = fs::read(&pack).unwrap();
    // A flipped byte in a blob.
    let mut bad = orig.clone();
    bad[10] ^= 1;
    fs::write(&pack, &bad).unwrap();
    let repo = reopen(&root, &enc);
    let quick = gvault_cas::check(&repo, false, &mut |_, _| {}).unwrap();
    assert!(
        quick.is_clean(),
        "a flipped byte keeps the size: {:?}",
        quick.errors
    );
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(!c.is_clean());
    assert!(!c.affected.is_empty(), "{:?}", c.errors);
    let snaps = gvault_cas::snapshot::list(&repo).unwrap();
    let r =
        gvault_cas::restore(&repo, &snaps[0].1, &d.path().join("out"), None, &|_, _| {}).unwrap();
    assert!(!r.failed.is_empty());
    let failed: Vec<&String> = r.failed.iter().map(|f| &f.0).collect();
    for (_, p) in &c.affected {
        assert!(
            failed.iter().any(|f| f.ends_with(p.as_str())),
            "{p} not reported by restore: {failed:?}"
        );
    }
    // A truncated pack: found without reading data.
    fs::write(&pack, &orig[..orig.len() - 1]).unwrap();
    let c = gvault_cas::check(&reopen(&root, &enc), false, &mut |_, _| {}).unwrap();
    assert!(
        c.errors.iter().any(|e| e.contains("truncated")),
        "{:?}",
        c.errors
    );
    // Swapping two blobs' bytes inside a pack fails to authenticate.
    fs::write(&pack, &orig).unwrap();
    assert!(
        gvault_cas::check(&reopen(&root, &enc), true, &mut |_, _| {})
            .unwrap()
            .is_clean()
    );
    // A damaged index file or snapshot is refused with a clear error.
    let idx = repo.backend.list(gvault_cas::Kind::Index).unwrap();
    let ip = root.join("index").join(&idx[0]);
    let ib = fs::read(&ip).unwrap();
    let mut b2 = ib.clone();
    let n = b2.len();
    b2[n - 20] ^= 0x40;
    fs::write(&ip, &b2).unwrap();
    // The repository still opens; check names the index file and the
    // files whose chunks only it located; prune re-indexes from the pack
    // headers and replaces it.
    let damaged = reopen(&root, &enc);
    let c = gvault_cas::check(&damaged, false, &mut |_, _| {}).unwrap();
    assert!(
        c.errors.iter().any(|e| e.contains("index file")),
        "{:?}",
        c.errors
    );
    assert!(!c.affected.is_empty());
    let p = gvault_cas::prune(&damaged).unwrap();
    assert_eq!(p.chunks_removed, 0, "{p:?}");
    let c = gvault_cas::check(&reopen(&root, &enc), true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean(), "{:?}", c.errors);
    // A lost index file: prune keeps every pack a snapshot needs.
    for n in repo.backend.list(gvault_cas::Kind::Index).unwrap() {
        fs::remove_file(root.join("index").join(n)).unwrap();
    }
    gvault_cas::prune(&reopen(&root, &enc)).unwrap();
    let c = gvault_cas::check(&reopen(&root, &enc), true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.chunks_read > 0, "{:?}", c.errors);
    let sp = root.join("snapshots").join(&snaps[0].0);
    let mut sb = fs::read(&sp).unwrap();
    sb[3] ^= 1;
    fs::write(&sp, &sb).unwrap();
    let c = gvault_cas::check(&reopen(&root, &enc), false, &mut |_, _| {}).unwrap();
    assert!(
        c.errors.iter().any(|e| e.contains("snapshot")),
        "{:?}",
        c.errors
    );
}

#[test]
fn wrong_key_missing_key_and_newer_format_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    let (_, enc) = init(&root, SMALL_CDC, true);
    let wrong = Encryption::with_key(generate_key());
    let e = Repository::open(&root, Some(&wrong), cpu_backend())
        .err()
        .unwrap();
    assert!(e.to_string().contains("wrong master key"), "{e}");
    let e = Repository::open(&root, None, cpu_backend()).err().unwrap();
    assert!(matches!(e, gvault_cas::Error::KeyRequired { .. }), "{e}");
    let cfg = root.join("config");
    let mut b = fs::read(&cfg).unwrap();
    b[8] = 2; // version 2
    fs::write(&cfg, &b).unwrap();
    let e = Repository::open(&root, Some(&enc), cpu_backend())
        .err()
        .unwrap();
    assert!(
        matches!(e, gvault_cas::Error::NewerFormat { found: 2, .. }),
        "{e}"
    );
    b[8] = 1;
    b[50] ^= 1; // chunker parameters: the MAC catches it
    fs::write(&cfg, &b).unwrap();
    let e = Repository::open(&root, Some(&enc), cpu_backend())
        .err()
        .unwrap();
    assert!(e.to_string().contains("MAC"), "{e}");
    let e = Repository::open(&d.path().join("nothing"), Some(&enc), cpu_backend())
        .err()
        .unwrap();
    assert!(matches!(e, gvault_cas::Error::NotARepository { .. }), "{e}");
}

#[test]
fn forget_and_prune_free_space_and_keep_the_rest_whole() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 13);
    let root = d.path().join("repo");
    let (repo, enc) = init(&root, SMALL_CDC, true);
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let mut junk = vec![0u8; 2 << 20];
    rand::thread_rng().fill_bytes(&mut junk);
    fs::write(src.join("junk"), &junk).unwrap();
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    fs::remove_file(src.join("junk")).unwrap();
    let last = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let before = gvault_cas::stats(&repo).unwrap();
    // While a backup (or restore, or check) holds a shared lock, prune
    // refuses to run.
    let held = gvault_cas::lock::Lock::shared(repo.backend.clone()).unwrap();
    let e = gvault_cas::prune(&reopen(&root, &enc)).expect_err("locked");
    assert!(matches!(e, gvault_cas::Error::Locked(_)), "{e}");
    drop(held);
    let removed = gvault_cas::forget(&repo, 1).unwrap();
    assert_eq!(removed.len(), 2);
    let p = gvault_cas::prune(&reopen(&root, &enc)).unwrap();
    assert!(p.chunks_removed > 0 && p.bytes_freed > 0, "{p:?}");
    let repo = reopen(&root, &enc);
    let after = gvault_cas::stats(&repo).unwrap();
    assert!(
        after.unique_bytes + (2 << 20) <= before.unique_bytes + 65536,
        "{before:?} {after:?}"
    );
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.unindexed_packs.is_empty(), "{:?}", c);
    let snap = gvault_cas::Snapshot::read(&repo, &last.snapshot).unwrap();
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(describe(&src), describe(&restored_root(&target, &src)));
}

#[test]
fn include_restores_only_matching_entries() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 17);
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let target = d.path().join("out");
    let pat = gvault_cas::Pattern::new(&format!("{}/a/b/c", src.display()));
    let r = gvault_cas::restore(&repo, &snap, &target, Some(&pat), &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    let out = restored_root(&target, &src);
    assert_eq!(
        fs::read(out.join("a/b/c/big")).unwrap(),
        fs::read(src.join("a/b/c/big")).unwrap()
    );
    assert!(!out.join("a/b/f1").exists());
    assert!(!out.join("sparse").exists());
}

/// The child side of the kill test: backs up the tree named by the
/// environment over and over until it is killed; with
/// `GVAULT_TEST_CAS_KILL_PRUNE`, forgets all but the newest snapshot and prunes
/// after each backup.
#[test]
fn kill_child_entry() {
    let Ok(repo_dir) = std::env::var("GVAULT_TEST_CAS_KILL_REPO") else {
        return;
    };
    let src = PathBuf::from(std::env::var("GVAULT_TEST_CAS_KILL_SRC").unwrap());
    let key =
        gvault_store::keys::parse_hex_key(&std::env::var("GVAULT_TEST_CAS_KILL_KEY").unwrap())
            .unwrap();
    let enc = Encryption::with_key(key);
    let prune = std::env::var_os("GVAULT_TEST_CAS_KILL_PRUNE").is_some();
    for n in 0u64.. {
        // A new file each round, so each backup writes new packs.
        let mut data = vec![0u8; 3 << 20];
        rand::thread_rng().fill_bytes(&mut data);
        fs::write(src.join(format!("round{n}")), &data).unwrap();
        let repo = reopen(Path::new(&repo_dir), &enc);
        gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
        if prune {
            fs::remove_file(src.join(format!("round{n}"))).unwrap();
            gvault_cas::forget(&repo, 1).unwrap();
            gvault_cas::prune(&reopen(Path::new(&repo_dir), &enc)).unwrap();
        }
    }
}

/// kill -9 a backup (and, every other round, a forget + prune) at random
/// moments: every snapshot left restores whole,
/// `check --read-data` is clean, the next backup adopts the orphan packs,
/// and prune removes what nothing uses.
#[test]
fn killed_backups_leave_a_consistent_repository() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 19);
    let root = d.path().join("repo");
    let key = generate_key();
    let hex_key = hex::encode(key.expose());
    let enc = Encryption::with_key(key);
    Repository::init(
        &root,
        &enc,
        InitOptions {
            chunker: SMALL_CDC,
            compression: true,
        },
        cpu_backend(),
    )
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    for round in 0..8 {
        let mut cmd = std::process::Command::new(&exe);
        if round % 2 == 1 {
            cmd.env("GVAULT_TEST_CAS_KILL_PRUNE", "1");
        }
        let mut child = cmd
            .args([
                "--exact",
                "kill_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GVAULT_TEST_CAS_KILL_REPO", &root)
            .env("GVAULT_TEST_CAS_KILL_SRC", &src)
            .env("GVAULT_TEST_CAS_KILL_KEY", &hex_key)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(rng.gen_range(100..2500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The dead child's lock is stale (its pid no longer runs).
        let repo = reopen(&root, &enc);
        let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
        assert!(c.is_clean(), "round {round}: {:?}", c.errors);
        for (name, snap) in gvault_cas::snapshot::list(&repo).unwrap() {
            let out = d.path().join(format!("out-{round}-{}", &name[..8]));
            let r = gvault_cas::restore(&repo, &snap, &out, None, &|_, _| {}).unwrap();
            assert!(r.failed.is_empty(), "round {round}: {:?}", r.failed);
            fs::remove_dir_all(&out).unwrap();
        }
    }
    let repo = reopen(&root, &enc);
    let before = gvault_cas::check(&repo, false, &mut |_, _| {}).unwrap();
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    if !before.unindexed_packs.is_empty() {
        assert!(s.packs_adopted > 0);
    }
    gvault_cas::prune(&reopen(&root, &enc)).unwrap();
    let repo = reopen(&root, &enc);
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.unindexed_packs.is_empty(), "{c:?}");
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let out = d.path().join("final");
    let r = gvault_cas::restore(&repo, &snap, &out, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty());
    assert_eq!(describe(&src), describe(&restored_root(&out, &src)));
}

#[test]
fn include_of_a_hard_link_alone_restores_its_contents() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 23);
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    // "a/b/f2" is found first (the walk sorts names), "hard" links to it.
    let link = snap
        .entries
        .iter()
        .find(|e| e.kind == gvault_cas::EntryKind::HardLink)
        .unwrap();
    let pat = gvault_cas::Pattern::new(&String::from_utf8_lossy(&link.path));
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, Some(&pat), &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    let out = restored_root(&target, &src);
    assert_eq!(
        fs::read(out.join("hard")).unwrap(),
        fs::read(src.join("hard")).unwrap()
    );
    assert!(!out.join("a").exists());
}

/// Two backups at once into one repository, then a check of both.
#[test]
fn concurrent_backups_are_safe() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    let (repo, enc) = init(&root, SMALL_CDC, true);
    drop(repo);
    let srcs: Vec<PathBuf> = (0..2).map(|i| d.path().join(format!("src{i}"))).collect();
    for (i, s) in srcs.iter().enumerate() {
        random_tree(s, 100 + i as u64);
    }
    let names: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = srcs
            .iter()
            .map(|s| {
                let (root, enc) = (&root, &enc);
                sc.spawn(move || {
                    let repo = reopen(root, enc);
                    gvault_cas::backup(&repo, std::slice::from_ref(s), &mut |_| {})
                        .unwrap()
                        .snapshot
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let repo = reopen(&root, &enc);
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean(), "{:?}", c.errors);
    for (name, src) in names.iter().zip(&srcs) {
        let snap = gvault_cas::Snapshot::read(&repo, name).unwrap();
        let out = d.path().join(format!("out-{}", &name[..8]));
        let r = gvault_cas::restore(&repo, &snap, &out, None, &|_, _| {}).unwrap();
        assert!(r.failed.is_empty(), "{:?}", r.failed);
        assert_eq!(describe(src), describe(&restored_root(&out, src)));
    }
}

/// A source file that cannot be read is reported and skipped; the rest of
/// the backup goes on. (Root reads any file whatever its mode, so the
/// unreadable file is one the kernel refuses: /proc/self/mem at offset 0.)
#[test]
fn unreadable_files_are_reported_and_skipped() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 29);
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let mem = PathBuf::from("/proc/self/mem");
    let s = gvault_cas::backup(&repo, &[src.clone(), mem], &mut |_| {}).unwrap();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("/proc/self/mem") && w.ends_with("skipped")),
        "{:?}",
        s.warnings
    );
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    assert!(!snap.entries.iter().any(|e| e.path == b"proc/self/mem"));
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(describe(&src), describe(&restored_root(&target, &src)));
}

/// Two packs holding the same chunk (two backups wrote it at once): prune
/// leaves neither an orphan behind.
#[test]
fn prune_removes_packs_whose_chunks_all_live_elsewhere() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    let (repo, enc) = init(&root, SMALL_CDC, true);
    let data = b"the same chunk, written twice".to_vec();
    let id = gvault_cas::accel_jobs::keyed_digests(repo.accel(), &repo.keys.chunk_id, &[&data])
        .unwrap()[0];
    let mut sizes = std::collections::HashMap::new();
    let mut locs = Vec::new();
    for _ in 0..2 {
        let mut b = gvault_cas::pack::PackBuilder::default();
        b.add(id, data.len() as u32, 0, &data);
        let (name, size, entries) = b.write(&repo).unwrap();
        let pack: [u8; 32] = hex::decode(&name).unwrap().try_into().unwrap();
        sizes.insert(pack, size);
        locs.push(gvault_cas::index::Location {
            pack,
            ordinal: 0,
            blob: entries[0],
        });
    }
    // Both entries given; the file keeps one per id, so one pack is unindexed.
    gvault_cas::index::write_file(&repo, locs, &sizes).unwrap();
    assert_eq!(repo.backend.list(gvault_cas::Kind::Pack).unwrap().len(), 2);
    let p = gvault_cas::prune(&reopen(&root, &enc)).unwrap();
    assert_eq!(p.packs_deleted, 2, "{p:?}");
    assert!(repo
        .backend
        .list(gvault_cas::Kind::Pack)
        .unwrap()
        .is_empty());
    let c = gvault_cas::check(&reopen(&root, &enc), true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.unindexed_packs.is_empty(), "{c:?}");
}

/// A pack gathered on a buffer of an earlier pack (its old bytes left in
/// place, chunks copied in parallel) opens to exactly its chunks.
#[test]
fn a_pack_built_on_a_reused_buffer_opens_to_its_chunks() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, false);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // 40 chunks, more than the 1 MiB from which copies run in parallel.
    let sizes = (0..40).map(|i| [65_536usize, 1, 0, 40_000][i % 4]);
    let chunks: Vec<Vec<u8>> = sizes
        .map(|n| {
            let mut v = vec![0u8; n];
            rng.fill_bytes(&mut v);
            v
        })
        .collect();
    let ids = gvault_cas::accel_jobs::keyed_digests(
        repo.accel(),
        &repo.keys.chunk_id,
        &chunks.iter().map(|c| c.as_slice()).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut b = gvault_cas::pack::PackBuilder::with_buffer(vec![0xab; 3 << 20]);
    let blobs: Vec<gvault_cas::pack::NewBlob<'_>> = ids[..39]
        .iter()
        .zip(&chunks)
        .map(|(id, c)| (*id, c.len() as u32, 0, c.as_slice()))
        .collect();
    b.add_many(&blobs);
    b.add(ids[39], chunks[39].len() as u32, 0, &chunks[39]);
    let (name, _, entries) = b.write(&repo).unwrap();
    let header = gvault_cas::pack::read_header(&repo, &name, None).unwrap();
    assert_eq!(header, entries);
    let sealed = entries
        .iter()
        .map(|e| {
            repo.backend
                .get_range(
                    gvault_cas::Kind::Pack,
                    &name,
                    e.offset as u64,
                    e.sealed_len as usize,
                )
                .unwrap()
        })
        .collect();
    let numbered: Vec<(u32, gvault_cas::pack::BlobEntry)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i as u32, *e))
        .collect();
    let opened = gvault_cas::pack::open_blobs(&repo, &name, &numbered, sealed).unwrap();
    for (got, want) in opened.into_iter().zip(&chunks) {
        assert!(got.unwrap() == *want);
    }
}

/// A stream longer than several read windows is cut exactly where one
/// pass of the chunker over the whole input cuts (the windows overlap
/// through the carried last chunk), and restores and dumps bit for bit
/// through the parallel positional writer.
#[test]
fn streamed_windows_chunk_as_one_pass_and_restore_in_parallel() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, false);
    let mut data = vec![0u8; 80 << 20];
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    rng.fill_bytes(&mut data);
    // Repeats inside the input: dedup within one stream.
    let (head, tail) = data.split_at_mut(40 << 20);
    tail[..8 << 20].copy_from_slice(&head[..8 << 20]);
    let s = gvault_cas::backup_reader(&repo, "big", &mut &data[..], &mut |_| {}).unwrap();
    assert!(s.chunks_known > 0, "{s:?}");
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let got: Vec<u32> = snap.entries[0].chunks.iter().map(|c| c.len).collect();
    let params = repo.config.chunker.params().unwrap();
    let want: Vec<u32> = gvault_cas::accel_jobs::chunk_digest(
        &*cpu_backend(),
        params,
        &repo.keys.chunk_id,
        &[&data[..]],
    )
    .unwrap()
    .remove(0)
    .iter()
    .map(|c| c.len)
    .collect();
    assert_eq!(got, want);
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert!(fs::read(target.join("big")).unwrap() == data);
    // A flipped byte in one pack: the file (written through a mapping,
    // many chunks at once) is reported, and neither it nor a temporary
    // file is left behind.
    let packs = repo.backend.list(gvault_cas::Kind::Pack).unwrap();
    let pack = d
        .path()
        .join("repo")
        .join("data")
        .join(&packs[packs.len() / 2]);
    let mut bad = fs::read(&pack).unwrap();
    bad[100] ^= 1;
    fs::write(&pack, &bad).unwrap();
    let target = d.path().join("damaged");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
    assert!(r.failed[0].1.contains("authenticate"), "{:?}", r.failed);
    let left: Vec<_> = fs::read_dir(&target).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A file restored through a mapping whose chunks take every path there:
/// random chunks read and opened in place, compressed chunks opened apart
/// and copied, and chunks repeated inside one group copied from their first
/// piece; bit for bit.
#[test]
fn a_mapped_restore_of_mixed_chunks_is_exact() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let mut data = vec![0u8; 40 << 20];
    rng.fill_bytes(&mut data);
    // 4 MiB of one 64 KiB block over and over: the same chunks many times
    // in one group.
    let block: Vec<u8> = data[..64 << 10].to_vec();
    for piece in data[4 << 20..8 << 20].chunks_mut(64 << 10) {
        piece.copy_from_slice(&block);
    }
    // 8 MiB of a four-letter alphabet: chunks that differ and compress.
    for b in &mut data[12 << 20..20 << 20] {
        *b = b'a' + (*b & 3);
    }
    let s = gvault_cas::backup_reader(&repo, "mixed", &mut &data[..], &mut |_| {}).unwrap();
    assert!(s.chunks_known > 0, "{s:?}");
    assert!(s.bytes_added < data.len() as u64 - (8 << 20), "{s:?}");
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert!(fs::read(target.join("mixed")).unwrap() == data);
    // A file of compressed chunks alone, one of its packs damaged: the
    // file is reported and nothing is left under the target.
    let mut text = vec![0u8; 40 << 20];
    rng.fill_bytes(&mut text);
    for b in &mut text {
        *b = b'a' + (*b & 3);
    }
    let before: std::collections::HashSet<String> = repo
        .backend
        .list(gvault_cas::Kind::Pack)
        .unwrap()
        .into_iter()
        .collect();
    let s = gvault_cas::backup_reader(&repo, "text", &mut &text[..], &mut |_| {}).unwrap();
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let new_pack = repo
        .backend
        .list(gvault_cas::Kind::Pack)
        .unwrap()
        .into_iter()
        .find(|p| !before.contains(p))
        .expect("the text's pack");
    let path = d.path().join("repo").join("data").join(&new_pack);
    let mut bad = fs::read(&path).unwrap();
    bad[1000] ^= 1;
    fs::write(&path, &bad).unwrap();
    let target = d.path().join("damaged");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
    let left: Vec<_> = fs::read_dir(&target).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A file written to while it is read: the backup says so (the snapshot
/// holds the bytes read), the repository stays whole, and the next backup
/// reads the file again and keeps its final contents exactly.
#[test]
fn a_file_changing_while_read_is_reported_and_read_again_next_time() {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let mut calm = vec![0u8; 300_000];
    rng.fill_bytes(&mut calm);
    fs::write(src.join("calm"), &calm).unwrap();
    // Larger than the small-file batch, so it streams through the windows.
    let mut hot = vec![0u8; 48 << 20];
    rng.fill_bytes(&mut hot);
    fs::write(src.join("hot"), &hot).unwrap();
    let (repo, enc) = init(&d.path().join("repo"), SMALL_CDC, true);

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, writes) = (stop.clone(), writes.clone());
        let f = fs::OpenOptions::new()
            .write(true)
            .open(src.join("hot"))
            .unwrap();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // Bytes across the file, and a new mtime with each.
                let at = (n.wrapping_mul(2_654_435_761) % (48 << 20)) & !7;
                f.write_all_at(&n.to_le_bytes(), at).unwrap();
                n += 1;
                writes.store(n, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    while writes.load(Ordering::SeqCst) < 3 {
        std::thread::yield_now();
    }
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("hot") && w.contains("changed while it was read")),
        "{:?}",
        s.warnings
    );
    assert!(
        !s.warnings.iter().any(|w| w.contains("calm")),
        "{:?}",
        s.warnings
    );
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let hot_entry = snap
        .entries
        .iter()
        .find(|e| e.path.ends_with(b"/hot"))
        .unwrap();
    assert_eq!(hot_entry.size, 48 << 20);

    // Quiet now: read again (its mtime moved on), stored exactly.
    drop(repo);
    let repo = reopen(&d.path().join("repo"), &enc);
    let s2 = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert!(s2.warnings.is_empty(), "{:?}", s2.warnings);
    assert_eq!((s2.files_changed, s2.files_unchanged), (1, 1), "{s2:?}");
    let snap2 = gvault_cas::Snapshot::read(&repo, &s2.snapshot).unwrap();
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap2, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    let back = restored_root(&target, &src);
    assert_eq!(fs::read(back.join("calm")).unwrap(), calm);
    assert_eq!(
        fs::read(back.join("hot")).unwrap(),
        fs::read(src.join("hot")).unwrap()
    );
}

/// Progress covers the whole tree: bytes read plus the bytes of files
/// passed over as unchanged reach the snapshot's total (what a bar with a
/// time left needs), on a first backup and on a second one that reads
/// only the changed file.
#[test]
fn progress_reaches_the_tree_total_with_unchanged_files_counted() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    random_tree(&src, 53);
    let (repo, _) = init(&d.path().join("repo"), SMALL_CDC, true);
    let mut last = gvault_cas::Progress::default();
    let s1 = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |p| last = p).unwrap();
    assert_eq!(last.bytes + last.bytes_unchanged, s1.bytes_total);
    assert_eq!(last.bytes_unchanged, 0);
    let victim = fs::read_dir(src.join("a"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| fs::symlink_metadata(p).unwrap().is_file())
        .unwrap();
    fs::write(&victim, b"changed contents").unwrap();
    let mut last = gvault_cas::Progress::default();
    let mut calls = 0u64;
    let s2 = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |p| {
        assert!(p.bytes + p.bytes_unchanged >= last.bytes + last.bytes_unchanged);
        last = p;
        calls += 1;
    })
    .unwrap();
    assert!(s2.files_unchanged > 0, "{s2:?}");
    assert_eq!(last.bytes, s2.bytes_read);
    assert_eq!(last.bytes + last.bytes_unchanged, s2.bytes_total);
    assert!(calls >= s2.files_unchanged);
}
