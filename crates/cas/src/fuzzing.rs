//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`, which
//! no shipped build turns on). Every repository object is sealed, so each
//! target takes an object *in the clear* (the layout of the sealed object,
//! with plaintext where ciphertext goes and any bytes in the 16-byte tag
//! slots), seals it under a fixed data key ([`FUZZ_DATA_KEY`]) with the
//! nonces and associated data the writer uses (so the fuzzer gets past
//! AES-GCM to the decoder behind it), stores it in an in-memory backend and
//! runs the reader the repository runs. What they return is the decoder's
//! verdict; the bugs a fuzzer looks for are panics, hangs and runaway
//! allocations, and the round-trip checks here panic when a value changes.
//!
//! The `clear_*` functions make those inputs from real objects (seeds).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gvault_accel::{Aes256Key, CpuBackend};
use gvault_store::Encryption;

use crate::accel_jobs::{self, AccelBackend, CipherItem, TAG_LEN};
use crate::backend::{Backend, Kind};
use crate::error::{Error, Result};
use crate::index::{self, Index, Location};
use crate::pack::{self, BlobEntry, SealedBlob, FLAG_ZSTD, HEADER_NONCE};
use crate::repo::{
    Chunker, Config, InitOptions, Keys, ObjectKind, Repository, CONFIG_NAME, FORMAT_VERSION,
    KEYS_OBJECT,
};
use crate::snapshot::{self, Snapshot};

/// The data key K every object of the fuzz repository is sealed under.
pub const FUZZ_DATA_KEY: [u8; 32] = [0x5a; 32];
/// The master key of the `config` target's key registry.
pub const FUZZ_MASTER: [u8; 32] = [7; 32];
/// The name every target stores its object under (a valid object id).
const NAME: &str = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0";
/// Inputs longer than this are cut (every real small object fits).
pub const MAX_INPUT: usize = 1 << 20;

/// Objects by kind and name.
type Objects = HashMap<(Kind, String), Arc<Vec<u8>>>;

/// Whole objects in memory: what the targets read through `Backend`.
#[derive(Default)]
pub struct MemBackend {
    objects: Mutex<Objects>,
    roots: Mutex<BTreeMap<String, Vec<u8>>>,
}

fn missing(what: String) -> Error {
    Error::Io {
        context: what,
        source: io::Error::new(io::ErrorKind::NotFound, "no such object"),
    }
}

impl MemBackend {
    fn clear(&self) {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.roots.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
    fn object(&self, kind: Kind, name: &str) -> Result<Arc<Vec<u8>>> {
        let o = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        o.get(&(kind, name.to_string()))
            .cloned()
            .ok_or_else(|| missing(format!("{}/{name}", kind.dir())))
    }
}

impl Backend for MemBackend {
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()> {
        let mut o = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        o.insert((kind, name.to_string()), Arc::new(data.to_vec()));
        Ok(())
    }
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        Ok(self.object(kind, name)?.to_vec())
    }
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        let o = self.object(kind, name)?;
        let r = usize::try_from(offset)
            .ok()
            .and_then(|s| o.get(s..s.checked_add(len)?));
        r.map(<[u8]>::to_vec).ok_or_else(|| Error::Io {
            context: format!("reading {len} bytes at {offset} of {name}"),
            source: io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"),
        })
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64> {
        Ok(self.object(kind, name)?.len() as u64)
    }
    fn list(&self, kind: Kind) -> Result<Vec<String>> {
        let o = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = o
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n.clone())
            .collect();
        v.sort();
        Ok(v)
    }
    fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        let mut o = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        o.remove(&(kind, name.to_string()));
        Ok(())
    }
    fn exists(&self, kind: Kind, name: &str) -> Result<bool> {
        Ok(self.object(kind, name).is_ok())
    }
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()> {
        let mut r = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        r.insert(name.to_string(), data.to_vec());
        Ok(())
    }
    fn get_root(&self, name: &str) -> Result<Vec<u8>> {
        let r = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        r.get(name)
            .cloned()
            .ok_or_else(|| missing(name.to_string()))
    }
}

/// The repository the targets read through: in memory, data key
/// [`FUZZ_DATA_KEY`], one CPU thread (deterministic, no pool start-up).
struct Fuzz {
    mem: Arc<MemBackend>,
    repo: Repository,
    accel: AccelBackend,
    /// A key registry (`keys/KEYS`) under [`FUZZ_MASTER`], for `config`.
    keys_object: Vec<u8>,
    /// The MAC key of that registry's data key, as a repository.
    registry_keys: Keys,
}

fn fuzz() -> MutexGuard<'static, Fuzz> {
    static FUZZ: OnceLock<Mutex<Fuzz>> = OnceLock::new();
    FUZZ.get_or_init(|| {
        let accel: AccelBackend = Arc::new(CpuBackend::with_threads(1));
        let mem = Arc::new(MemBackend::default());
        let enc = Encryption::with_key(Aes256Key::from_bytes(FUZZ_MASTER));
        let opts = InitOptions {
            chunker: Chunker::DEFAULT,
            compression: true,
        };
        let made = Repository::init_on(mem.clone(), "fuzz", &enc, opts, accel.clone())
            .expect("a repository in memory");
        let keys_object = mem.get_root(KEYS_OBJECT).expect("init wrote the registry");
        let repo = Repository {
            root: PathBuf::from("fuzz"),
            backend: mem.clone(),
            accel: accel.clone(),
            config: made.config,
            keys: Keys::new(&Aes256Key::from_bytes(FUZZ_DATA_KEY)),
            index: Index::empty(),
        };
        Mutex::new(Fuzz {
            mem,
            repo,
            accel,
            keys_object,
            registry_keys: made.keys,
        })
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

fn id_of(name: &str) -> [u8; 32] {
    crate::repo::parse_id(name).expect("a valid id")
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Seals `region` (plaintext ‖ 16-byte tag slot) in place.
fn seal_region(repo: &Repository, key: &Aes256Key, nonce: [u8; 12], aad: &[u8], region: &mut [u8]) {
    let Some(split) = region.len().checked_sub(TAG_LEN) else {
        return;
    };
    let (data, slot) = region.split_at_mut(split);
    let tags = accel_jobs::seal(repo.accel(), key, vec![CipherItem { nonce, aad, data }])
        .expect("sealing in memory");
    slot.copy_from_slice(&tags[0]);
}

/// Opens `region` (ciphertext ‖ tag) in place, leaving plaintext and a
/// zeroed tag slot; false where it does not authenticate.
fn open_region(
    repo: &Repository,
    key: &Aes256Key,
    nonce: [u8; 12],
    aad: &[u8],
    region: &mut [u8],
) -> bool {
    match accel_jobs::open_one(repo.accel(), key, nonce, aad, region) {
        Ok(Some(plain)) => {
            region[..plain.len()].copy_from_slice(&plain);
            region[plain.len()..].fill(0);
            true
        }
        _ => false,
    }
}

/// The trailer of a pack or index file: (start of the sealed header or
/// footer, its sealed length), if the trailer's length fits the file.
fn trailer(file: &[u8], trailer_len: usize) -> Option<(usize, usize)> {
    let at = file.len().checked_sub(trailer_len)?;
    let len = u32_at(file, at)? as usize;
    Some((at.checked_sub(len)?, len))
}

/// The plaintext the chunk id of a blob is taken over, where the blob's
/// stored bytes give it (decompressed within `raw_len` for a zstd blob).
fn blob_plain(stored: &[u8], raw_len: u32, flags: u8) -> Option<Vec<u8>> {
    if flags & FLAG_ZSTD == 0 {
        return (stored.len() == raw_len as usize).then(|| stored.to_vec());
    }
    if raw_len as usize > MAX_INPUT {
        return None;
    }
    zstd::bulk::decompress(stored, raw_len as usize)
        .ok()
        .filter(|p| p.len() == raw_len as usize)
}

/// Seals a pack given in the clear under pack `pack_id`'s key: each blob
/// the header names (its chunk id first set to the keyed hash of its
/// contents, where they decode), then the header.
pub fn seal_pack(repo: &Repository, pack_id: &[u8; 32], file: &mut [u8]) {
    let Some((hoff, hlen)) = trailer(file, pack::TRAILER_LEN) else {
        return;
    };
    if hlen < TAG_LEN {
        return;
    }
    let key = repo.keys.object_key(ObjectKind::Pack, pack_id);
    let (blobs, rest) = file.split_at_mut(hoff);
    let header = &mut rest[..hlen];
    let n = u32_at(header, 0).unwrap_or(0) as usize;
    for i in 0..n {
        let e = 4 + i * pack::ENTRY_LEN;
        if e + pack::ENTRY_LEN > hlen - TAG_LEN {
            break;
        }
        let entry = &mut header[e..e + pack::ENTRY_LEN];
        let offset = u32_at(entry, 32).expect("in entry") as usize;
        let sealed_len = u32_at(entry, 36).expect("in entry") as usize;
        let raw_len = u32_at(entry, 40).expect("in entry");
        let flags = entry[44];
        let Some(region) = blobs.get_mut(offset..offset + sealed_len) else {
            continue;
        };
        if sealed_len < TAG_LEN {
            continue;
        }
        if let Some(plain) = blob_plain(&region[..sealed_len - TAG_LEN], raw_len, flags) {
            let id = accel_jobs::keyed_digests(repo.accel(), &repo.keys.chunk_id, &[&plain])
                .expect("hashing in memory");
            entry[..32].copy_from_slice(&id[0]);
        }
        let id: [u8; 32] = entry[..32].try_into().expect("32 bytes");
        let aad = pack::blob_aad(&id, raw_len, flags);
        seal_region(repo, &key, pack::blob_nonce(i as u32), &aad, region);
    }
    seal_region(repo, &key, HEADER_NONCE, &pack::header_aad(pack_id), header);
}

/// A pack in the clear, read as `check --read-data` reads one: its header
/// from the whole pack's bytes and again by ranged reads (as backup and
/// prune read it), which must agree; then every blob the header names
/// opened, decompressed and checked against its chunk id. A blob that
/// opens must have its recorded length. Then the entries are laid out
/// again by the pack writer (`pack::assemble`), and that pack's header
/// must read back to the same entries.
pub fn pack(input: &[u8]) -> Result<Vec<BlobEntry>> {
    let f = fuzz();
    let repo = &f.repo;
    let pack_id = id_of(NAME);
    let mut file = input[..input.len().min(MAX_INPUT)].to_vec();
    seal_pack(repo, &pack_id, &mut file);
    f.mem.clear();
    f.mem.put(Kind::Pack, NAME, &file)?;
    let whole = pack::read_header(repo, NAME, Some(&file));
    let ranged = pack::read_header(repo, NAME, None);
    assert_eq!(
        whole.as_ref().ok(),
        ranged.as_ref().ok(),
        "whole and ranged reads of a pack header differ"
    );
    let entries = whole?;
    let blobs: Vec<(u32, BlobEntry)> = (0u32..).zip(entries.iter().copied()).collect();
    let sealed: Vec<Vec<u8>> = entries
        .iter()
        .map(|b| {
            let s = b.offset as usize;
            file.get(s..s + b.sealed_len as usize)
                .map(<[u8]>::to_vec)
                .unwrap_or_default()
        })
        .collect();
    let opened = pack::open_blobs(repo, NAME, &blobs, sealed.clone())?;
    for (e, o) in entries.iter().zip(&opened) {
        if let Ok(plain) = o {
            assert_eq!(
                plain.len(),
                e.raw_len as usize,
                "a blob opened to another length"
            );
        }
    }
    // The header writer and reader agree: re-laid-out, the same entries.
    let again_id = id_of(&NAME.replace('f', "e"));
    let sealed_blobs: Vec<SealedBlob<'_>> = entries
        .iter()
        .zip(&sealed)
        .map(|(e, s)| SealedBlob {
            id: e.id,
            raw_len: e.raw_len,
            flags: e.flags,
            ciphertext: &s[..s.len() - TAG_LEN],
            tag: s[s.len() - TAG_LEN..].try_into().expect("16 bytes"),
        })
        .collect();
    let again = pack::assemble(repo, again_id, &sealed_blobs)?;
    let name = hex::encode(again_id);
    let back = pack::read_header(repo, &name, Some(&again.bytes)).expect("an assembled pack reads");
    assert_eq!(back, again.entries, "pack header round trip");
    for (a, b) in back.iter().zip(&entries) {
        assert_eq!(
            (a.id, a.sealed_len, a.raw_len, a.flags),
            (b.id, b.sealed_len, b.raw_len, b.flags),
            "pack entry changed when laid out again"
        );
    }
    Ok(entries)
}

/// The (offset, sealed length) of each block an index footer's plaintext
/// names, as far as the footer reads.
fn block_refs(footer: &[u8]) -> Vec<(u64, usize)> {
    // The block table follows the pack table (40 bytes a pack).
    let np = u32_at(footer, 0).unwrap_or(0) as usize;
    let Some(at) = np.checked_mul(40).and_then(|n| n.checked_add(4)) else {
        return Vec::new();
    };
    let nb = u32_at(footer, at).unwrap_or(0) as usize;
    let mut refs = Vec::new();
    let mut at = at + 4;
    for _ in 0..nb {
        let (Some(offset), Some(sealed_len)) = (u64_at(footer, at + 32), u32_at(footer, at + 40))
        else {
            break;
        };
        refs.push((offset, sealed_len as usize));
        at += 48;
    }
    refs
}

/// Seals an index file given in the clear under index `file_id`'s key:
/// the footer, then each block the footer names.
pub fn seal_index(repo: &Repository, file_id: &[u8; 32], file: &mut [u8]) {
    let Some((foff, flen)) = trailer(file, index::TRAILER_LEN) else {
        return;
    };
    if flen < TAG_LEN {
        return;
    }
    let key = repo.keys.object_key(ObjectKind::Index, file_id);
    let (blocks, rest) = file.split_at_mut(foff);
    let footer = &mut rest[..flen];
    let refs = block_refs(&footer[..flen - TAG_LEN]);
    for (b, (offset, len)) in refs.into_iter().enumerate() {
        let region = usize::try_from(offset)
            .ok()
            .and_then(|s| blocks.get_mut(s..s.checked_add(len)?));
        if let Some(region) = region {
            seal_region(
                repo,
                &key,
                index::block_nonce(b as u32),
                index::BLOCK_AAD,
                region,
            );
        }
    }
    seal_region(repo, &key, index::FOOTER_NONCE, index::FOOTER_AAD, footer);
}

/// Every location of every index file of `idx`, in file and block order.
fn locations(repo: &Repository, idx: &Index) -> Result<Vec<Location>> {
    let mut out = Vec::new();
    idx.for_each(repo, |_, l| {
        out.push(*l);
        Ok(())
    })?;
    Ok(out)
}

/// An index file in the clear, read as an open reads the index (every
/// footer: `Index::load`), then every block (`Index::for_each`, as check
/// and prune walk it) and a lookup of each chunk id (as restore and
/// backup's dedup look them up). What decodes is written again by the
/// index writer: the new file must read back to the same locations, one per
/// chunk id, and each id must be found by a lookup.
pub fn index_file(input: &[u8]) -> Result<usize> {
    let f = fuzz();
    let repo = &f.repo;
    let mut file = input[..input.len().min(MAX_INPUT)].to_vec();
    seal_index(repo, &id_of(NAME), &mut file);
    f.mem.clear();
    f.mem.put(Kind::Index, NAME, &file)?;
    let idx = Index::load(repo)?;
    if let Some((_, why)) = idx.damaged.first() {
        return Err(Error::corrupt("index file", why.clone()));
    }
    let locs = locations(repo, &idx)?;
    for l in &locs {
        let _ = idx.lookup(repo, &l.blob.id)?;
    }
    let files = idx.files();
    let sizes: HashMap<[u8; 32], u64> =
        files.iter().flat_map(|f| f.packs.iter().copied()).collect();
    let mut want = locs.clone();
    want.sort_by_key(|l| l.blob.id);
    want.dedup_by(|a, b| a.blob.id == b.blob.id);
    f.mem.clear();
    index::write_file(repo, locs.clone(), &sizes)?;
    let again = Index::load(repo)?;
    assert!(again.damaged.is_empty(), "a written index file is damaged");
    assert_eq!(locations(repo, &again)?, want, "index round trip");
    for l in &want {
        assert_eq!(
            again.lookup(repo, &l.blob.id)?,
            Some(*l),
            "a written index misses a chunk"
        );
    }
    Ok(locs.len())
}

/// A snapshot body in the clear, sealed as `Snapshot::write` seals one and
/// read by `Snapshot::read` (open, then decode); what decodes must encode
/// to the same bytes (the encoding is canonical) and decode again to the
/// same snapshot.
pub fn snapshot(input: &[u8]) -> Result<Snapshot> {
    let f = fuzz();
    let repo = &f.repo;
    let body = input[..input.len().min(MAX_INPUT)].to_vec();
    let key = repo.keys.object_key(ObjectKind::Snapshot, &id_of(NAME));
    let sealed = accel_jobs::seal_one(repo.accel(), &key, snapshot::NONCE, snapshot::AAD, body)?;
    f.mem.clear();
    f.mem.put(Kind::Snapshot, NAME, &sealed)?;
    let s = Snapshot::read(repo, NAME)?;
    let encoded = s.encode();
    assert_eq!(encoded, input, "a snapshot's encoding is not canonical");
    assert_eq!(Snapshot::decode(&encoded, NAME).ok().as_ref(), Some(&s));
    Ok(s)
}

/// The repository's `config`, its MAC made valid (the last 32 bytes, over
/// the rest, under the registry's data key), opened as `Repository::open_on`
/// opens a repository: the config's version, the key registry, the MAC,
/// the index. A config that opens must name a chunker `init` accepts (a
/// backup cuts files with it) and encode back to the same settings.
pub fn config(input: &[u8]) -> Result<Config> {
    let f = fuzz();
    let mut file = input[..input.len().min(MAX_INPUT)].to_vec();
    if let Some(body) = file.len().checked_sub(32) {
        let mac = f.registry_keys.config_mac(&file[..body]);
        file[body..].copy_from_slice(&mac);
    }
    f.mem.clear();
    f.mem.put_root(KEYS_OBJECT, &f.keys_object)?;
    f.mem.put_root(CONFIG_NAME, &file)?;
    let enc = Encryption::with_key(Aes256Key::from_bytes(FUZZ_MASTER));
    let repo = Repository::open_on(f.mem.clone(), "fuzz", Some(&enc), f.accel.clone())?;
    let c = repo.config;
    assert!(
        (1..=FORMAT_VERSION).contains(&c.version),
        "opened a config of version {}",
        c.version
    );
    assert!(
        c.chunker.validate().is_ok(),
        "opened a config whose chunker init refuses: {:?}",
        c.chunker
    );
    // Written by init with the same settings, it opens to the same ones.
    f.mem.clear();
    let opts = InitOptions {
        chunker: c.chunker,
        compression: c.compression,
    };
    let made = Repository::init_on(f.mem.clone(), "fuzz", &enc, opts, f.accel.clone())?;
    let reopened = Repository::open_on(f.mem.clone(), "fuzz", Some(&enc), f.accel.clone())?;
    assert_eq!(reopened.config, made.config, "config round trip");
    assert_eq!(
        (reopened.config.chunker, reopened.config.compression),
        (c.chunker, c.compression)
    );
    Ok(c)
}

/// A pack of `repo` in the clear (the `pack` target's input): blobs and
/// header opened in place, tags zeroed. `None` where it does not open.
pub fn clear_pack(repo: &Repository, name: &str, sealed: &[u8]) -> Option<Vec<u8>> {
    let pack_id = crate::repo::parse_id(name)?;
    let entries = pack::read_header(repo, name, Some(sealed)).ok()?;
    let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
    let mut file = sealed.to_vec();
    let (hoff, hlen) = trailer(&file, pack::TRAILER_LEN)?;
    for (i, e) in entries.iter().enumerate() {
        let region = &mut file[e.offset as usize..(e.offset + e.sealed_len) as usize];
        let aad = pack::blob_aad(&e.id, e.raw_len, e.flags);
        open_region(repo, &key, pack::blob_nonce(i as u32), &aad, region).then_some(())?;
    }
    let header = &mut file[hoff..hoff + hlen];
    open_region(
        repo,
        &key,
        HEADER_NONCE,
        &pack::header_aad(&pack_id),
        header,
    )
    .then_some(())?;
    Some(file)
}

/// An index file of `repo` in the clear (the `index_file` target's
/// input). `None` where it does not open.
pub fn clear_index(repo: &Repository, name: &str, sealed: &[u8]) -> Option<Vec<u8>> {
    let file_id = crate::repo::parse_id(name)?;
    let key = repo.keys.object_key(ObjectKind::Index, &file_id);
    let mut file = sealed.to_vec();
    let (foff, flen) = trailer(&file, index::TRAILER_LEN)?;
    let footer = &mut file[foff..foff + flen];
    open_region(repo, &key, index::FOOTER_NONCE, index::FOOTER_AAD, footer).then_some(())?;
    let refs = block_refs(&file[foff..foff + flen - TAG_LEN]);
    for (b, (offset, len)) in refs.into_iter().enumerate() {
        let region = file.get_mut(offset as usize..offset as usize + len)?;
        open_region(
            repo,
            &key,
            index::block_nonce(b as u32),
            index::BLOCK_AAD,
            region,
        )
        .then_some(())?;
    }
    Some(file)
}

/// A snapshot of `repo` in the clear (the `snapshot` target's input).
pub fn clear_snapshot(repo: &Repository, name: &str) -> Option<Vec<u8>> {
    let id = crate::repo::parse_id(name)?;
    let sealed = repo.backend.get(Kind::Snapshot, name).ok()?;
    let key = repo.keys.object_key(ObjectKind::Snapshot, &id);
    accel_jobs::open_one(repo.accel(), &key, snapshot::NONCE, snapshot::AAD, &sealed).ok()?
}

/// A lock object (`locks/<id>`), decoded as a taker reads the others'
/// locks, judged stale or live and described; what decodes must re-encode
/// to the same lock.
pub fn lock(data: &[u8]) -> bool {
    let Some(info) = crate::lock::LockInfo::decode(data) else {
        return false;
    };
    assert_eq!(
        crate::lock::LockInfo::decode(&info.encode()).as_ref(),
        Some(&info),
        "a lock changed in a round trip"
    );
    let _ = info.is_stale(u64::MAX);
    let _ = info.describe();
    true
}
