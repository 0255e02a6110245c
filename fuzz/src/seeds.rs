//! Seed corpora from real files: a store is written the way users write
//! one (small blocks and files, so a few kilobytes hold every structure),
//! and its files, blocks and frames become each target's first inputs.

use std::fs;
use std::path::{Path, PathBuf};

use gvault_accel::{Aes256Key, Backend, Nonce96, Tag};
use gvault_store::codec::BlockKind;
use gvault_store::format::{parse_file_name, FileType};
use gvault_store::fuzzing;
use gvault_store::{Encryption, KdfParams, Options, Store};

/// Writes seeds into `corpus/<target>/`, each named by its content's hash.
pub struct SeedWriter {
    pub corpus: PathBuf,
    pub written: usize,
}

impl SeedWriter {
    pub fn new(corpus: &Path) -> SeedWriter {
        SeedWriter {
            corpus: corpus.to_owned(),
            written: 0,
        }
    }

    pub fn add(&mut self, target: &str, data: &[u8]) {
        assert!(
            crate::find(target).is_some(),
            "seed for unknown target {target}"
        );
        if data.len() > crate::MAX_INPUT {
            return;
        }
        let dir = self.corpus.join(target);
        fs::create_dir_all(&dir).expect("creating corpus directory");
        let name = blake3::hash(data).to_hex()[..16].to_string();
        let path = dir.join(name);
        if !path.exists() {
            fs::write(&path, data).expect("writing seed");
            self.written += 1;
        }
    }
}

fn small_store_options() -> Options {
    Options {
        create_if_missing: true,
        write_buffer_size: 8 << 10,
        block_size: 256,
        block_restart_interval: 4,
        value_threshold: 48,
        table_file_size: 16 << 10,
        ..Options::default()
    }
}

fn files_of(dir: &Path) -> Vec<(FileType, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).expect("listing store") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some((ty, n)) = parse_file_name(&name) {
            out.push((ty, n, fs::read(e.path()).expect("reading store file")));
        }
    }
    out.sort_by_key(|(_, n, _)| *n);
    out
}

fn add_log(w: &mut SeedWriter, target: &str, file: &[u8]) {
    w.add(target, file);
    for (kind, payload) in fuzzing::log_frames(file).into_iter().take(40) {
        match kind {
            BlockKind::LogCommit | BlockKind::LogValue => w.add("commit_payload", &payload),
            BlockKind::ManifestEdit => w.add("version_edit", &payload),
            _ => {}
        }
    }
}

/// The store's seeds: tables and their blocks, value-log files and their
/// frames, the manifest and its edits, `CURRENT`, and key registries.
pub fn store(w: &mut SeedWriter) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("plain");
    let db = Store::open(&dir, small_store_options()).expect("opening a new store");
    for i in 0..600u32 {
        let key = format!("key{:05}", i * 7 % 600);
        let value = if i % 5 == 0 {
            vec![b'v'; 100 + i as usize]
        } else {
            format!("value{i}").into_bytes()
        };
        db.put(key, value).expect("put");
        if i % 9 == 0 {
            db.delete(format!("key{:05}", i / 2)).expect("delete");
        }
    }
    // Value-log files as a crash would leave them: before flush and close.
    for (ty, _, bytes) in files_of(&dir) {
        if ty == FileType::ValueLog {
            add_log(w, "value_log", &bytes);
        }
    }
    db.flush().expect("flush");
    db.compact_all().expect("compaction");
    db.close().expect("close");
    for (ty, n, bytes) in files_of(&dir) {
        match ty {
            FileType::Table => {
                w.add("table", &bytes);
                let blocks = fuzzing::table_blocks(&bytes, n).expect("a table just written");
                for (_, payload) in blocks.into_iter().take(12) {
                    w.add("block", &payload);
                }
            }
            FileType::ValueLog => add_log(w, "value_log", &bytes),
            FileType::Manifest => add_log(w, "manifest", &bytes),
            FileType::Pointer => w.add("pointer", &bytes),
            _ => {}
        }
    }
    key_registries(w, tmp.path());
}

/// Key registries as the `key_registry` target takes them: cleartext
/// header and body. One under a raw key (opened with the fuzz master key),
/// and the header of one under a passphrase.
fn key_registries(w: &mut SeedWriter, tmp: &Path) {
    const HEADER: usize = 48;
    let master = Aes256Key::from_bytes(fuzzing::FUZZ_MASTER);
    let raw = tmp.join("raw-key");
    let opts = Options {
        encryption: Some(Encryption::with_key(master.clone())),
        ..small_store_options()
    };
    Store::open(&raw, opts)
        .and_then(|db| db.close())
        .expect("an encrypted store");
    let sealed = fs::read(raw.join("KEYS")).expect("KEYS");
    let (head, rest) = sealed.split_at(HEADER);
    let (body, tag) = rest.split_at(rest.len() - 16);
    let mut body = body.to_vec();
    let backend = gvault_accel::CpuBackend::with_threads(1);
    backend
        .open_block(
            &master,
            Nonce96::try_from_slice(&head[36..]).expect("nonce"),
            head,
            Tag::try_from_slice(tag).expect("tag"),
            &mut body,
        )
        .expect("the fuzz master key opens the registry it sealed");
    let mut plain = head.to_vec();
    plain.extend_from_slice(&body);
    w.add("key_registry", &plain);

    let pass = tmp.join("passphrase");
    let mut enc = Encryption::with_passphrase("fuzz");
    enc.kdf = KdfParams {
        m_cost_kib: 8,
        t_cost: 1,
        p_cost: 1,
    };
    let opts = Options {
        encryption: Some(enc),
        ..small_store_options()
    };
    Store::open(&pass, opts)
        .and_then(|db| db.close())
        .expect("a passphrase store");
    let sealed = fs::read(pass.join("KEYS")).expect("KEYS");
    let mut forged = sealed[..HEADER].to_vec();
    forged.extend_from_slice(&body);
    w.add("key_registry", &forged);
}
