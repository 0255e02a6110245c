//! The index: chunk id → (pack, blob) in sorted, sealed index files
//! (docs/repository.md §5).
//!
//! Files rather than a gvault-store: the index must live behind the same
//! whole-object [`Backend`](crate::backend::Backend) as the packs (a store
//! is a directory updated in place, which object storage cannot hold), each
//! backup adds one immutable file that concurrent writers never contend on,
//! and a crash leaves either the whole file or none.
//!
//! Memory stays bounded: of each file only the footer is held — the pack
//! table, the first id of each 1024-entry block, and a bloom filter of 10
//! bits per entry — about 1.3 bytes per chunk (13 MB for 10 M chunks). A
//! lookup tests each file's bloom filter, and only on a hit reads and opens
//! the one block the fences name (recent blocks are cached).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::accel_jobs::{self, TAG_LEN};
use crate::backend::Kind;
use crate::coding::{put_u32, put_u64, put_u8, Decoder};
use crate::error::{Error, Result};
use crate::pack::BlobEntry;
use crate::repo::{ObjectKind, Repository};

pub const INDEX_MAGIC: [u8; 8] = *b"GVCASIX1";
pub(crate) const TRAILER_LEN: usize = 12;
pub(crate) const ENTRY_LEN: usize = 32 + 4 + 4 + 4 + 4 + 4 + 1;
pub const BLOCK_ENTRIES: usize = 1024;
pub(crate) const FOOTER_NONCE: [u8; 12] = [0xff; 12];
const BLOOM_BITS_PER_ENTRY: usize = 10;
const BLOOM_HASHES: u8 = 7;
const CACHE_BLOCKS: usize = 256;

/// Where a chunk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub pack: [u8; 32],
    /// The blob's position in its pack (its nonce).
    pub ordinal: u32,
    pub blob: BlobEntry,
}

impl Location {
    pub fn pack_name(&self) -> String {
        hex::encode(self.pack)
    }
}

#[derive(Clone, Debug)]
struct BlockRef {
    first: [u8; 32],
    offset: u64,
    sealed_len: u32,
    count: u32,
}

/// The footer of one index file: what is kept in memory.
#[derive(Debug)]
pub struct IndexFile {
    pub name: String,
    /// Pack ids and their lengths in bytes.
    pub packs: Vec<([u8; 32], u64)>,
    blocks: Vec<BlockRef>,
    bloom: Vec<u64>,
    hashes: u8,
    pub entries: u64,
}

fn bloom_positions(id: &[u8; 32], nbits: u64, k: u8) -> impl Iterator<Item = u64> + '_ {
    // Ids are keyed BLAKE3 outputs, uniformly random: two 64-bit words of
    // the id itself serve as the two hashes of double hashing.
    let h1 = u64::from_le_bytes(id[0..8].try_into().unwrap_or_default());
    let h2 = u64::from_le_bytes(id[8..16].try_into().unwrap_or_default()) | 1;
    (0..k as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % nbits)
}

impl IndexFile {
    fn may_contain(&self, id: &[u8; 32]) -> bool {
        let nbits = self.bloom.len() as u64 * 64;
        if nbits == 0 {
            return false;
        }
        bloom_positions(id, nbits, self.hashes)
            .all(|b| self.bloom[(b / 64) as usize] >> (b % 64) & 1 == 1)
    }
    fn block_for(&self, id: &[u8; 32]) -> Option<usize> {
        let i = self.blocks.partition_point(|b| b.first <= *id);
        i.checked_sub(1)
    }
}

pub(crate) fn block_nonce(i: u32) -> [u8; 12] {
    crate::pack::blob_nonce(i)
}
pub(crate) const BLOCK_AAD: &[u8] = b"gvault-cas index block";
pub(crate) const FOOTER_AAD: &[u8] = b"gvault-cas index footer";

/// A cached block: its file's name and its number.
type BlockKey = (String, usize);

/// All index files' footers, and a bounded cache of opened blocks.
#[derive(Default)]
pub struct Index {
    files: RwLock<Vec<Arc<IndexFile>>>,
    cache: Mutex<HashMap<BlockKey, Arc<Vec<Location>>>>,
    /// Index files whose footer could not be read (name, why): their chunks
    /// are missing to lookups. `check` reports them; the next backup
    /// re-indexes their packs from the pack headers, and `prune` replaces
    /// them.
    pub damaged: Vec<(String, String)>,
}

impl Index {
    pub fn empty() -> Index {
        Index::default()
    }

    /// Reads the footer of every index file.
    pub fn load(repo: &Repository) -> Result<Index> {
        let mut idx = Index::empty();
        for name in repo.backend.list(Kind::Index)? {
            let mut r = read_footer(repo, &name);
            // A damaged cached copy is dropped and the file read again.
            if matches!(r, Err(Error::Corrupt { .. }))
                && repo.backend.drop_cached(Kind::Index, &name)
            {
                r = read_footer(repo, &name);
            }
            match r {
                Ok(f) => idx.add(f),
                Err(e @ Error::Corrupt { .. }) => idx.damaged.push((name, e.to_string())),
                Err(e) => return Err(e),
            }
        }
        Ok(idx)
    }

    pub fn add(&self, f: IndexFile) {
        if let Ok(mut files) = self.files.write() {
            files.push(Arc::new(f));
        }
    }

    pub fn files(&self) -> Vec<Arc<IndexFile>> {
        self.files.read().map(|f| f.clone()).unwrap_or_default()
    }

    /// Where chunk `id` is, if any index file has it.
    pub fn lookup(&self, repo: &Repository, id: &[u8; 32]) -> Result<Option<Location>> {
        for f in self.files() {
            if !f.may_contain(id) {
                continue;
            }
            let Some(b) = f.block_for(id) else { continue };
            let block = self.block(repo, &f, b)?;
            if let Ok(i) = block.binary_search_by(|l| l.blob.id.cmp(id)) {
                return Ok(Some(block[i]));
            }
        }
        Ok(None)
    }

    fn block(&self, repo: &Repository, f: &IndexFile, b: usize) -> Result<Arc<Vec<Location>>> {
        let key = (f.name.clone(), b);
        if let Some(hit) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(hit);
        }
        let block = Arc::new(read_block(repo, f, b)?);
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_BLOCKS {
                c.clear();
            }
            c.insert(key, block.clone());
        }
        Ok(block)
    }

    /// Every entry of every index file, one block at a time.
    pub fn for_each(
        &self,
        repo: &Repository,
        mut f: impl FnMut(&IndexFile, &Location) -> Result<()>,
    ) -> Result<()> {
        for file in self.files() {
            for b in 0..file.blocks.len() {
                for l in read_block(repo, &file, b)?.iter() {
                    f(&file, l)?;
                }
            }
        }
        Ok(())
    }
}

fn read_block(repo: &Repository, f: &IndexFile, b: usize) -> Result<Vec<Location>> {
    match read_block_once(repo, f, b) {
        // A damaged cached copy is dropped and the block read again.
        Err(Error::Corrupt { .. }) if repo.backend.drop_cached(Kind::Index, &f.name) => {
            read_block_once(repo, f, b)
        }
        r => r,
    }
}

fn read_block_once(repo: &Repository, f: &IndexFile, b: usize) -> Result<Vec<Location>> {
    let what = || format!("index file {}", f.name);
    let r = &f.blocks[b];
    let sealed = repo
        .backend
        .get_range(Kind::Index, &f.name, r.offset, r.sealed_len as usize)?;
    let id = crate::repo::parse_id(&f.name).ok_or_else(|| Error::corrupt(what(), "bad name"))?;
    let key = repo.keys.object_key(ObjectKind::Index, &id);
    let body = accel_jobs::open_one(
        repo.accel(),
        &key,
        block_nonce(b as u32),
        BLOCK_AAD,
        &sealed,
    )?
    .ok_or_else(|| Error::corrupt(what(), format!("block {b} does not authenticate")))?;
    let bad = || Error::corrupt(what(), format!("block {b} is malformed"));
    if body.len() != r.count as usize * ENTRY_LEN {
        return Err(bad());
    }
    let mut d = Decoder::new(&body);
    let mut out = Vec::with_capacity(r.count as usize);
    for _ in 0..r.count {
        let id = d.array().ok_or_else(bad)?;
        let pack = d.u32().ok_or_else(bad)? as usize;
        let ordinal = d.u32().ok_or_else(bad)?;
        let offset = d.u32().ok_or_else(bad)?;
        let sealed_len = d.u32().ok_or_else(bad)?;
        let raw_len = d.u32().ok_or_else(bad)?;
        let flags = d.u8().ok_or_else(bad)?;
        let pack = f.packs.get(pack).ok_or_else(bad)?.0;
        out.push(Location {
            pack,
            ordinal,
            blob: BlobEntry {
                id,
                offset,
                sealed_len,
                raw_len,
                flags,
            },
        });
    }
    Ok(out)
}

fn read_footer(repo: &Repository, name: &str) -> Result<IndexFile> {
    let what = || format!("index file {name}");
    let id =
        crate::repo::parse_id(name).ok_or_else(|| Error::corrupt(what(), "name is not an id"))?;
    let size = repo.backend.size(Kind::Index, name)?;
    if size < TRAILER_LEN as u64 {
        return Err(Error::corrupt(what(), "truncated"));
    }
    let t = repo
        .backend
        .get_range(Kind::Index, name, size - TRAILER_LEN as u64, TRAILER_LEN)?;
    if t[4..] != INDEX_MAGIC {
        return Err(Error::corrupt(what(), "bad trailer magic (truncated?)"));
    }
    let flen = u32::from_le_bytes([t[0], t[1], t[2], t[3]]) as u64;
    if flen + TRAILER_LEN as u64 > size {
        return Err(Error::corrupt(what(), "footer length past the start"));
    }
    let foff = size - TRAILER_LEN as u64 - flen;
    let sealed = repo
        .backend
        .get_range(Kind::Index, name, foff, flen as usize)?;
    let key = repo.keys.object_key(ObjectKind::Index, &id);
    let body = accel_jobs::open_one(repo.accel(), &key, FOOTER_NONCE, FOOTER_AAD, &sealed)?
        .ok_or_else(|| Error::corrupt(what(), "footer does not authenticate"))?;
    let bad = || Error::corrupt(what(), "malformed footer");
    let mut d = Decoder::new(&body);
    let np = d.u32().ok_or_else(bad)?;
    let mut packs = Vec::new();
    for _ in 0..np {
        packs.push((d.array().ok_or_else(bad)?, d.u64().ok_or_else(bad)?));
    }
    let nb = d.u32().ok_or_else(bad)?;
    let mut blocks = Vec::new();
    let mut end = 0u64;
    for _ in 0..nb {
        let b = BlockRef {
            first: d.array().ok_or_else(bad)?,
            offset: d.u64().ok_or_else(bad)?,
            sealed_len: d.u32().ok_or_else(bad)?,
            count: d.u32().ok_or_else(bad)?,
        };
        if b.offset != end || b.count as usize > BLOCK_ENTRIES {
            return Err(bad());
        }
        end = b.offset + b.sealed_len as u64;
        blocks.push(b);
    }
    if end != foff {
        return Err(bad());
    }
    let words = d.u32().ok_or_else(bad)?;
    let hashes = d.u8().ok_or_else(bad)?;
    // Sized by what the footer holds, not by its word count: a damaged
    // count must not allocate 32 GiB before the footer runs out.
    if d.remaining() < words as usize * 8 {
        return Err(bad());
    }
    let mut bloom = Vec::with_capacity(words as usize);
    for _ in 0..words {
        bloom.push(d.u64().ok_or_else(bad)?);
    }
    let entries = d.u64().ok_or_else(bad)?;
    if !d.is_empty() {
        return Err(bad());
    }
    Ok(IndexFile {
        name: name.to_string(),
        packs,
        blocks,
        bloom,
        hashes,
        entries,
    })
}

/// Writes one index file of `entries` (any order; duplicates kept once)
/// for packs of the given lengths, and returns its footer.
pub fn write_file(
    repo: &Repository,
    mut entries: Vec<Location>,
    pack_sizes: &HashMap<[u8; 32], u64>,
) -> Result<IndexFile> {
    entries.sort_by_key(|a| a.blob.id);
    entries.dedup_by(|a, b| a.blob.id == b.blob.id);
    let file_id = crate::repo::new_id();
    let name = hex::encode(file_id);
    let key = repo.keys.object_key(ObjectKind::Index, &file_id);
    let mut packs: Vec<([u8; 32], u64)> = Vec::new();
    let mut pack_no: HashMap<[u8; 32], u32> = HashMap::new();
    for e in &entries {
        pack_no.entry(e.pack).or_insert_with(|| {
            packs.push((e.pack, pack_sizes.get(&e.pack).copied().unwrap_or(0)));
            packs.len() as u32 - 1
        });
    }
    let mut out = Vec::new();
    let mut blocks = Vec::new();
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for chunk in entries.chunks(BLOCK_ENTRIES) {
        let mut body = Vec::with_capacity(chunk.len() * ENTRY_LEN);
        for e in chunk {
            body.extend_from_slice(&e.blob.id);
            put_u32(&mut body, pack_no[&e.pack]);
            put_u32(&mut body, e.ordinal);
            put_u32(&mut body, e.blob.offset);
            put_u32(&mut body, e.blob.sealed_len);
            put_u32(&mut body, e.blob.raw_len);
            put_u8(&mut body, e.blob.flags);
        }
        bodies.push(body);
    }
    let items = bodies
        .iter_mut()
        .enumerate()
        .map(|(i, b)| accel_jobs::CipherItem {
            nonce: block_nonce(i as u32),
            aad: BLOCK_AAD,
            data: b.as_mut_slice(),
        })
        .collect();
    let tags = accel_jobs::seal(repo.accel(), &key, items)?;
    for ((body, tag), chunk) in bodies.iter().zip(&tags).zip(entries.chunks(BLOCK_ENTRIES)) {
        blocks.push(BlockRef {
            first: chunk[0].blob.id,
            offset: out.len() as u64,
            sealed_len: (body.len() + TAG_LEN) as u32,
            count: chunk.len() as u32,
        });
        out.extend_from_slice(body);
        out.extend_from_slice(tag);
    }
    let nbits = (entries.len() * BLOOM_BITS_PER_ENTRY).div_ceil(64).max(1) * 64;
    let mut bloom = vec![0u64; nbits / 64];
    for e in &entries {
        for b in bloom_positions(&e.blob.id, nbits as u64, BLOOM_HASHES) {
            bloom[(b / 64) as usize] |= 1 << (b % 64);
        }
    }
    let mut footer = Vec::new();
    put_u32(&mut footer, packs.len() as u32);
    for (p, len) in &packs {
        footer.extend_from_slice(p);
        put_u64(&mut footer, *len);
    }
    put_u32(&mut footer, blocks.len() as u32);
    for b in &blocks {
        footer.extend_from_slice(&b.first);
        put_u64(&mut footer, b.offset);
        put_u32(&mut footer, b.sealed_len);
        put_u32(&mut footer, b.count);
    }
    put_u32(&mut footer, bloom.len() as u32);
    put_u8(&mut footer, BLOOM_HASHES);
    for w in &bloom {
        put_u64(&mut footer, *w);
    }
    put_u64(&mut footer, entries.len() as u64);
    let sealed = accel_jobs::seal_one(repo.accel(), &key, FOOTER_NONCE, FOOTER_AAD, footer)?;
    out.extend_from_slice(&sealed);
    put_u32(&mut out, sealed.len() as u32);
    out.extend_from_slice(&INDEX_MAGIC);
    repo.backend.put(Kind::Index, &name, &out)?;
    Ok(IndexFile {
        name,
        packs,
        blocks,
        bloom,
        hashes: BLOOM_HASHES,
        entries: entries.len() as u64,
    })
}
