//! Seeds for the repository's objects: a real repository (small chunks,
//! so that a few kilobytes hold every structure) backs up a small tree
//! twice, and its packs, index files and snapshots, opened into the clear
//! form the targets take, become the first inputs; its config, and those
//! of repositories with other chunkers, seed `cas_config`.

use std::fs;
use std::path::Path;

use gvault_accel::Aes256Key;
use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::{fuzzing, Chunker, InitOptions, Kind, Repository};
use gvault_store::Encryption;

use crate::seeds::SeedWriter;

fn init(dir: &Path, chunker: Chunker, compression: bool) -> Repository {
    let enc = Encryption::with_key(Aes256Key::from_bytes([3; 32]));
    let opts = InitOptions {
        chunker,
        compression,
    };
    Repository::init(dir, &enc, opts, cpu_backend()).expect("a new repository")
}

/// A tree with every entry kind: text (compresses), noise (does not), an
/// empty file, a subdirectory, a symlink and a hard link.
fn tree(src: &Path) {
    fs::create_dir_all(src.join("sub")).expect("mkdir");
    let text: String = (0..300).map(|i| format!("line {i} of a text\n")).collect();
    fs::write(src.join("notes.txt"), &text).expect("write");
    let mut x = 0x9e37_79b9_u32;
    let noise: Vec<u8> = (0..5000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    fs::write(src.join("sub/noise.bin"), &noise).expect("write");
    fs::write(src.join("sub/empty"), b"").expect("write");
    std::os::unix::fs::symlink("notes.txt", src.join("link")).expect("symlink");
    fs::hard_link(src.join("notes.txt"), src.join("sub/hard")).expect("hard link");
}

pub fn cas(w: &mut SeedWriter) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let src = tmp.path().join("src");
    tree(&src);
    let small = Chunker::Cdc {
        min: 256,
        avg: 1024,
        max: 4096,
    };
    let dir = tmp.path().join("repo");
    let repo = init(&dir, small, true);
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).expect("first backup");
    fs::write(src.join("sub/new.txt"), b"added between the backups\n").expect("write");
    let repo = {
        drop(repo);
        let enc = Encryption::with_key(Aes256Key::from_bytes([3; 32]));
        Repository::open(&dir, Some(&enc), cpu_backend()).expect("reopening")
    };
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).expect("second backup");
    let b = &repo.backend;
    for take in [
        gvault_cas::lock::Lock::shared,
        gvault_cas::lock::Lock::exclusive,
    ] {
        let held = take(b.clone()).expect("a lock on an idle repository");
        for name in b.list(Kind::Lock).expect("locks") {
            w.add("cas_lock", &b.get(Kind::Lock, &name).expect("a lock"));
        }
        drop(held);
    }
    for name in b.list(Kind::Pack).expect("packs") {
        let sealed = b.get(Kind::Pack, &name).expect("a pack");
        let clear = fuzzing::clear_pack(&repo, &name, &sealed).expect("a pack just written");
        w.add("cas_pack", &clear);
    }
    for name in b.list(Kind::Index).expect("index files") {
        let sealed = b.get(Kind::Index, &name).expect("an index file");
        let clear = fuzzing::clear_index(&repo, &name, &sealed).expect("an index just written");
        w.add("cas_index", &clear);
    }
    for name in b.list(Kind::Snapshot).expect("snapshots") {
        let clear = fuzzing::clear_snapshot(&repo, &name).expect("a snapshot just written");
        w.add("cas_snapshot", &clear);
    }
    w.add("cas_config", &fs::read(dir.join("config")).expect("config"));
    for (i, (chunker, compression)) in [
        (Chunker::Fixed { size: 4096 }, false),
        (Chunker::DEFAULT, true),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tmp.path().join(format!("config-{i}"));
        drop(init(&dir, chunker, compression));
        w.add("cas_config", &fs::read(dir.join("config")).expect("config"));
    }
}
