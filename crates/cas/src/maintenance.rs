//! check, forget, prune, diff and stats.

use std::collections::{BTreeMap, HashMap};

use crate::backend::Kind;
use crate::error::{Error, Result};
use crate::extsort::{self, Merged, Sorter};
use crate::index::{self, Location};
use crate::lock::Lock;
use crate::pack::{self, PackBuilder, PACK_TARGET};
use crate::repo::Repository;
use crate::snapshot::{self, EntryKind, Snapshot};

/// What `check` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub snapshots: u64,
    pub index_files: u64,
    pub packs: u64,
    pub chunks_read: u64,
    /// Problems, one message each.
    pub errors: Vec<String>,
    /// Snapshot files that cannot be restored whole: (snapshot, path).
    pub affected: Vec<(String, String)>,
    /// Packs no index names (left by an interrupted backup; harmless).
    pub unindexed_packs: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Checks the structure (every snapshot opens and every chunk it names is
/// indexed in a pack that exists with its recorded length); with
/// `read_data`, also reads every pack and opens and re-hashes every chunk.
pub fn check(
    repo: &Repository,
    read_data: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CheckReport> {
    let _lock = Lock::shared(repo.backend.clone())?;
    let mut r = CheckReport::default();
    let mut bad_chunks: HashMap<[u8; 32], String> = HashMap::new();
    // Index files and packs.
    let files = repo.index.files();
    r.index_files = (files.len() + repo.index.damaged.len()) as u64;
    r.errors
        .extend(repo.index.damaged.iter().map(|(_, why)| why.clone()));
    let present: HashMap<String, u64> = repo
        .backend
        .list(Kind::Pack)?
        .into_iter()
        .map(|n| {
            let s = repo.backend.size(Kind::Pack, &n).unwrap_or(0);
            (n, s)
        })
        .collect();
    r.packs = present.len() as u64;
    let mut indexed_packs: HashMap<[u8; 32], u64> = HashMap::new();
    for f in &files {
        for (p, len) in &f.packs {
            indexed_packs.insert(*p, *len);
        }
    }
    let mut bad_packs: HashMap<[u8; 32], String> = HashMap::new();
    for (p, len) in &indexed_packs {
        let name = hex::encode(p);
        match present.get(&name) {
            None => {
                bad_packs.insert(*p, "missing".into());
            }
            Some(s) if s != len => {
                bad_packs.insert(
                    *p,
                    format!("{s} bytes, the index says {len} (truncated or extended)"),
                );
            }
            _ => {}
        }
    }
    for n in present.keys() {
        if crate::repo::parse_id(n).is_none_or(|id| !indexed_packs.contains_key(&id)) {
            r.unindexed_packs.push(n.clone());
        }
    }
    r.unindexed_packs.sort();
    // Every index entry: its pack's state, and with read_data its bytes,
    // one pack at a time (the entries are sorted by pack on disk).
    let mut by_pack = Sorter::new(LOC_LEN);
    let mut index_err = None;
    if let Err(e) = repo.index.for_each(repo, |_, l| {
        if let Some(why) = bad_packs.get(&l.pack) {
            bad_chunks.insert(l.blob.id, format!("pack {} is {why}", hex::encode(l.pack)));
        } else if read_data {
            by_pack.push(&enc_loc(l))?;
        }
        Ok(())
    }) {
        index_err = Some(e.to_string());
    }
    if let Some(e) = index_err {
        r.errors.push(format!("index: {e}"));
    }
    for (p, why) in &bad_packs {
        r.errors.push(format!("pack {}: {why}", hex::encode(p)));
    }
    if read_data {
        let total: u64 = indexed_packs
            .iter()
            .filter(|(p, _)| !bad_packs.contains_key(*p))
            .map(|(_, len)| *len)
            .sum();
        let mut done = 0u64;
        let mut stream = by_pack.finish()?;
        while let Some(locs) = next_pack(&mut stream)? {
            let name = hex::encode(locs[0].pack);
            let bytes = match repo.backend.get(Kind::Pack, &name) {
                Ok(b) => b,
                Err(e) => {
                    r.errors.push(format!("pack {name}: {e}"));
                    for l in &locs {
                        bad_chunks.insert(l.blob.id, format!("pack {name} unreadable"));
                    }
                    continue;
                }
            };
            done += bytes.len() as u64;
            match pack::read_header(repo, &name, Some(&bytes)) {
                Ok(h) => {
                    for l in &locs {
                        if h.get(l.ordinal as usize) != Some(&l.blob) {
                            r.errors.push(format!(
                                "pack {name}: its header and the index disagree on chunk {}",
                                hex::encode(l.blob.id)
                            ));
                        }
                    }
                }
                Err(e) => r.errors.push(e.to_string()),
            }
            let blobs: Vec<(u32, pack::BlobEntry)> =
                locs.iter().map(|l| (l.ordinal, l.blob)).collect();
            let sealed: Vec<Vec<u8>> = blobs
                .iter()
                .map(|(_, b)| {
                    let s = b.offset as usize;
                    bytes
                        .get(s..s + b.sealed_len as usize)
                        .map(|x| x.to_vec())
                        .unwrap_or_default()
                })
                .collect();
            let opened = pack::open_blobs(repo, &name, &blobs, sealed)?;
            for ((_, b), o) in blobs.iter().zip(opened) {
                r.chunks_read += 1;
                if let Err(why) = o {
                    r.errors
                        .push(format!("pack {name}: chunk {} {why}", hex::encode(b.id)));
                    bad_chunks.insert(b.id, why);
                }
            }
            progress(done, total);
        }
    }
    // Snapshots: every chunk indexed and undamaged.
    for name in repo.backend.list(Kind::Snapshot)? {
        r.snapshots += 1;
        let snap = match Snapshot::read(repo, &name) {
            Ok(s) => s,
            Err(e) => {
                r.errors.push(e.to_string());
                continue;
            }
        };
        for e in &snap.entries {
            if e.kind != EntryKind::File {
                continue;
            }
            let mut why = None;
            for c in &e.chunks {
                if let Some(w) = bad_chunks.get(&c.id) {
                    why = Some(w.clone());
                    break;
                }
                match repo.index.lookup(repo, &c.id) {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        why = Some(format!("chunk {} is in no index file", hex::encode(c.id)));
                        break;
                    }
                    Err(err) => {
                        why = Some(err.to_string());
                        break;
                    }
                }
            }
            if let Some(w) = why {
                let path = String::from_utf8_lossy(&e.path).into_owned();
                r.errors
                    .push(format!("snapshot {}: /{path}: {w}", &name[..8]));
                r.affected.push((name.clone(), path));
            }
        }
    }
    Ok(r)
}

/// Removes all but the newest `keep_last` snapshots of each (host, paths)
/// group; returns the names removed. Their data stays until `prune`.
pub fn forget(repo: &Repository, keep_last: usize) -> Result<Vec<String>> {
    if keep_last == 0 {
        // Keep nothing: the one policy `forget_with` refuses by default.
        let mut removed = Vec::new();
        for (n, _) in snapshot::headers(repo)? {
            repo.backend.delete(Kind::Snapshot, &n)?;
            removed.push(n);
        }
        return Ok(removed);
    }
    Ok(
        crate::forget::forget_with(repo, &crate::forget::Policy::keep_last(keep_last), false)?
            .removed,
    )
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub packs_deleted: u64,
    pub packs_rewritten: u64,
    pub packs_written: u64,
    pub chunks_removed: u64,
    pub bytes_freed: u64,
    pub index_files_replaced: u64,
}

/// Removes chunks no snapshot uses, under an exclusive lock (so no backup
/// runs meanwhile). Order: new packs for the used chunks of partly used
/// packs, then new index files for everything kept, then the old index
/// files, then the old packs: a crash at any point leaves every snapshot
/// whole.
///
/// Memory stays bounded (docs/repository.md §9): the used chunk ids, the
/// index entries and the entries kept go through external sorts, one
/// snapshot is decoded at a time, and packs are handled one at a time.
pub fn prune(repo: &Repository) -> Result<PruneReport> {
    let _lock = Lock::exclusive(repo.backend.clone())?;
    let mut rep = PruneReport::default();
    // The used ids, sorted (duplicates skipped when read).
    let mut used_sort = Sorter::new(32);
    for name in repo.backend.list(Kind::Snapshot)? {
        let s = Snapshot::read(repo, &name)?;
        for e in &s.entries {
            for c in &e.chunks {
                used_sort.push(&c.id)?;
            }
        }
    }
    // The index as it is now that no backup runs (the one loaded at open
    // may predate a backup that finished since). Entries by (id, source):
    // of an id in several places, the first source's is the one kept.
    let index = crate::index::Index::load(repo)?;
    let old_files = index.files();
    let mut by_id = Sorter::new(32 + 4 + LOC_LEN);
    let mut file_no: HashMap<String, u32> = HashMap::new();
    for (i, f) in old_files.iter().enumerate() {
        file_no.insert(f.name.clone(), i as u32);
    }
    index.for_each(repo, |f, l| {
        by_id.push(&id_rec(file_no.get(&f.name).copied().unwrap_or(0), l))
    })?;
    let mut pack_sizes: HashMap<[u8; 32], u64> = old_files
        .iter()
        .flat_map(|f| f.packs.iter().copied())
        .collect();
    let indexed_packs = pack_sizes.len();
    // Packs no readable index names (an interrupted backup, a damaged or
    // lost index file) are judged by their own headers, so that a chunk a
    // snapshot uses is never deleted for want of an index entry. A pack
    // whose header cannot be read is left alone for `check` to report.
    let mut source = old_files.len() as u32;
    for n in repo.backend.list(Kind::Pack)? {
        let Some(id) = crate::repo::parse_id(&n) else {
            continue;
        };
        if pack_sizes.contains_key(&id) {
            continue;
        }
        let Ok(entries) = pack::read_header(repo, &n, None) else {
            continue;
        };
        pack_sizes.insert(id, repo.backend.size(Kind::Pack, &n)?);
        for (i, e) in entries.into_iter().enumerate() {
            let l = Location {
                pack: id,
                ordinal: i as u32,
                blob: e,
            };
            by_id.push(&id_rec(source, &l))?;
        }
        source += 1;
    }
    let unindexed = pack_sizes.len() > indexed_packs;
    // Join: each distinct id once, marked used or not, re-sorted by pack.
    let mut by_pack = Sorter::new(LOC_LEN + 1);
    {
        let mut ids = by_id.finish()?;
        let mut used = used_sort.finish()?;
        let mut last: Option<[u8; 32]> = None;
        while let Some(rec) = ids.next_rec()? {
            let id: [u8; 32] = rec[..32].try_into().unwrap_or_default();
            if last == Some(id) {
                continue;
            }
            last = Some(id);
            while used.peek().is_some_and(|u| u < &id[..]) {
                used.next_rec()?;
            }
            let is_used = used.peek() == Some(&id[..]);
            let mut out = rec[36..].to_vec();
            out.push(is_used as u8);
            by_pack.push(&out)?;
        }
    }
    let mut keep = Sorter::new(32 + LOC_LEN);
    let mut kept = 0u64;
    let mut delete: Vec<[u8; 32]> = Vec::new();
    let mut builder = PackBuilder::default();
    // Every known pack: one whose chunks all live in other packs too (two
    // backups wrote the same chunk) has no entries here and goes.
    let mut packs: Vec<[u8; 32]> = pack_sizes.keys().copied().collect();
    packs.sort();
    let mut stream = by_pack.finish()?;
    for p in &packs {
        let mut locs: Vec<(Location, bool)> = Vec::new();
        while stream.peek().is_some_and(|r| r[..32] == p[..]) {
            if let Some(r) = stream.next_rec()? {
                locs.push((dec_loc(&r[..LOC_LEN]), r[LOC_LEN] == 1));
            }
        }
        let n_used = locs.iter().filter(|(_, u)| *u).count();
        if !locs.is_empty() && n_used == locs.len() {
            for (l, _) in &locs {
                keep.push(&keep_rec(l))?;
                kept += 1;
            }
            continue;
        }
        delete.push(*p);
        rep.chunks_removed += (locs.len() - n_used) as u64;
        if n_used == 0 {
            continue;
        }
        rep.packs_rewritten += 1;
        let name = hex::encode(p);
        let live: Vec<(u32, pack::BlobEntry)> = locs
            .iter()
            .filter(|(_, u)| *u)
            .map(|(l, _)| (l.ordinal, l.blob))
            .collect();
        let sealed = live
            .iter()
            .map(|(_, b)| {
                repo.backend
                    .get_range(Kind::Pack, &name, b.offset as u64, b.sealed_len as usize)
            })
            .collect::<Result<Vec<_>>>()?;
        let opened = pack::open_blobs(repo, &name, &live, sealed)?;
        for ((_, b), o) in live.iter().zip(opened) {
            let data = o.map_err(|why| {
                Error::corrupt(
                    format!("chunk {} in pack {name}", hex::encode(b.id)),
                    format!("{why}; prune stops (run check --read-data)"),
                )
            })?;
            let (stored, flags) = match (b.flags & pack::FLAG_ZSTD != 0)
                .then(|| pack::maybe_compress(&data))
                .flatten()
            {
                Some(c) => (c, pack::FLAG_ZSTD),
                None => (data, 0),
            };
            builder.add(b.id, b.raw_len, flags, &stored);
            if builder.bytes() >= PACK_TARGET {
                kept += flush(repo, &mut builder, &mut keep, &mut pack_sizes, &mut rep)?;
            }
        }
    }
    kept += flush(repo, &mut builder, &mut keep, &mut pack_sizes, &mut rep)?;
    let per_file = index_file_entries();
    let tidy = old_files.len() as u64 <= kept.div_ceil(per_file).max(1);
    if !delete.is_empty() || !tidy || unindexed || !index.damaged.is_empty() {
        // New index files of at most `per_file` entries each, written from
        // the sorted stream of what is kept.
        let mut stream = keep.finish()?;
        let mut batch: Vec<Location> = Vec::new();
        loop {
            let rec = stream.next_rec()?;
            if let Some(r) = &rec {
                batch.push(dec_loc(&r[32..]));
            }
            if batch.len() as u64 >= per_file || (rec.is_none() && !batch.is_empty()) {
                index::write_file(repo, std::mem::take(&mut batch), &pack_sizes)?;
            }
            if rec.is_none() {
                break;
            }
        }
        let old = old_files
            .iter()
            .map(|f| f.name.clone())
            .chain(index.damaged.iter().map(|d| d.0.clone()));
        for name in old {
            repo.backend.delete(Kind::Index, &name)?;
            rep.index_files_replaced += 1;
        }
    }
    for p in delete {
        let name = hex::encode(p);
        rep.bytes_freed += repo.backend.size(Kind::Pack, &name).unwrap_or(0);
        repo.backend.delete(Kind::Pack, &name)?;
        rep.packs_deleted += 1;
    }
    Ok(rep)
}

/// Entries per index file `prune` writes: what fits the sort budget (an
/// entry costs about 160 bytes while its file is built), at least one block.
fn index_file_entries() -> u64 {
    (extsort::memory_budget() / 160).max(index::BLOCK_ENTRIES) as u64
}

/// A location as a sort record: pack, ordinal (big-endian, so that records
/// sort by pack, then position), id, offset, sealed and raw lengths, flags.
const LOC_LEN: usize = 32 + 4 + 32 + 4 + 4 + 4 + 1;

fn enc_loc(l: &Location) -> Vec<u8> {
    let mut b = Vec::with_capacity(LOC_LEN);
    b.extend_from_slice(&l.pack);
    b.extend_from_slice(&l.ordinal.to_be_bytes());
    b.extend_from_slice(&l.blob.id);
    b.extend_from_slice(&l.blob.offset.to_le_bytes());
    b.extend_from_slice(&l.blob.sealed_len.to_le_bytes());
    b.extend_from_slice(&l.blob.raw_len.to_le_bytes());
    b.push(l.blob.flags);
    b
}

fn dec_loc(b: &[u8]) -> Location {
    let arr = |r: std::ops::Range<usize>| -> [u8; 32] { b[r].try_into().unwrap_or_default() };
    let u = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    Location {
        pack: arr(0..32),
        ordinal: u32::from_be_bytes([b[32], b[33], b[34], b[35]]),
        blob: pack::BlobEntry {
            id: arr(36..68),
            offset: u(68),
            sealed_len: u(72),
            raw_len: u(76),
            flags: b[80],
        },
    }
}

/// Sorted by id, then by source (index file or pack, in load order).
fn id_rec(source: u32, l: &Location) -> Vec<u8> {
    let mut b = Vec::with_capacity(36 + LOC_LEN);
    b.extend_from_slice(&l.blob.id);
    b.extend_from_slice(&source.to_be_bytes());
    b.extend_from_slice(&enc_loc(l));
    b
}

fn keep_rec(l: &Location) -> Vec<u8> {
    let mut b = Vec::with_capacity(32 + LOC_LEN);
    b.extend_from_slice(&l.blob.id);
    b.extend_from_slice(&enc_loc(l));
    b
}

/// The entries of the next pack of a stream sorted by pack.
fn next_pack(s: &mut Merged) -> Result<Option<Vec<Location>>> {
    let Some(first) = s.next_rec()? else {
        return Ok(None);
    };
    let mut out = vec![dec_loc(&first)];
    while s.peek().is_some_and(|r| r[..32] == first[..32]) {
        if let Some(r) = s.next_rec()? {
            out.push(dec_loc(&r));
        }
    }
    Ok(Some(out))
}

/// Writes the pack being built; its entries go to `keep`. Returns how many.
fn flush(
    repo: &Repository,
    b: &mut PackBuilder,
    keep: &mut Sorter,
    sizes: &mut HashMap<[u8; 32], u64>,
    rep: &mut PruneReport,
) -> Result<u64> {
    if b.is_empty() {
        return Ok(0);
    }
    let (name, size, entries) = std::mem::take(b).write(repo)?;
    let pack = crate::repo::parse_id(&name).unwrap_or_default();
    sizes.insert(pack, size);
    rep.packs_written += 1;
    let n = entries.len() as u64;
    for (i, e) in entries.into_iter().enumerate() {
        keep.push(&keep_rec(&Location {
            pack,
            ordinal: i as u32,
            blob: e,
        }))?;
    }
    Ok(n)
}

/// Seed 001's similarity detection between two snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffReport {
    pub bytes_a: u64,
    pub bytes_b: u64,
    /// Bytes of distinct chunks both snapshots use.
    pub bytes_shared: u64,
    /// Bytes of distinct chunks only the second uses.
    pub bytes_added: u64,
    /// Bytes of distinct chunks only the first uses.
    pub bytes_removed: u64,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

pub fn diff(a: &Snapshot, b: &Snapshot) -> DiffReport {
    let chunks = |s: &Snapshot| -> HashMap<[u8; 32], u32> {
        s.entries
            .iter()
            .flat_map(|e| e.chunks.iter().map(|c| (c.id, c.len)))
            .collect()
    };
    let (ca, cb) = (chunks(a), chunks(b));
    let mut r = DiffReport {
        bytes_a: a.entries.iter().map(|e| e.size).sum(),
        bytes_b: b.entries.iter().map(|e| e.size).sum(),
        ..Default::default()
    };
    for (id, len) in &cb {
        if ca.contains_key(id) {
            r.bytes_shared += *len as u64;
        } else {
            r.bytes_added += *len as u64;
        }
    }
    r.bytes_removed = ca
        .iter()
        .filter(|(id, _)| !cb.contains_key(*id))
        .map(|(_, l)| *l as u64)
        .sum();
    type Shape = (EntryKind, Vec<[u8; 32]>, Vec<u8>, u32);
    let map = |s: &Snapshot| -> BTreeMap<Vec<u8>, Shape> {
        s.entries
            .iter()
            .map(|e| {
                (
                    e.path.clone(),
                    (
                        e.kind,
                        e.chunks.iter().map(|c| c.id).collect(),
                        e.target.clone(),
                        e.mode,
                    ),
                )
            })
            .collect()
    };
    let (ma, mb) = (map(a), map(b));
    for (p, v) in &mb {
        match ma.get(p) {
            None => r.added.push(String::from_utf8_lossy(p).into_owned()),
            Some(o) if o != v => r.changed.push(String::from_utf8_lossy(p).into_owned()),
            _ => {}
        }
    }
    for p in ma.keys() {
        if !mb.contains_key(p) {
            r.removed.push(String::from_utf8_lossy(p).into_owned());
        }
    }
    r
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub snapshots: u64,
    pub files: u64,
    /// Bytes of all files of all snapshots (what restoring them all writes).
    pub logical_bytes: u64,
    pub chunks: u64,
    /// Plaintext bytes of the distinct chunks.
    pub unique_bytes: u64,
    pub packs: u64,
    /// Bytes of packs, index files and snapshots.
    pub stored_bytes: u64,
    pub index_files: u64,
}

pub fn stats(repo: &Repository) -> Result<Stats> {
    let mut s = Stats::default();
    for name in repo.backend.list(Kind::Snapshot)? {
        let snap = Snapshot::read(repo, &name)?;
        s.snapshots += 1;
        for e in &snap.entries {
            if e.kind == EntryKind::File {
                s.files += 1;
                s.logical_bytes += e.size;
            }
        }
    }
    // Distinct chunks across index files: through an external sort.
    let mut ids = Sorter::new(36);
    repo.index.for_each(repo, |_, l| {
        let mut r = l.blob.id.to_vec();
        r.extend_from_slice(&l.blob.raw_len.to_le_bytes());
        ids.push(&r)
    })?;
    let mut ids = ids.finish()?;
    let mut last: Option<Box<[u8]>> = None;
    while let Some(r) = ids.next_rec()? {
        if last.as_ref().is_some_and(|l| l[..32] == r[..32]) {
            continue;
        }
        s.chunks += 1;
        s.unique_bytes += u32::from_le_bytes([r[32], r[33], r[34], r[35]]) as u64;
        last = Some(r);
    }
    for k in [Kind::Pack, Kind::Index, Kind::Snapshot] {
        for n in repo.backend.list(k)? {
            if k == Kind::Pack {
                s.packs += 1;
            }
            if k == Kind::Index {
                s.index_files += 1;
            }
            s.stored_bytes += repo.backend.size(k, &n)?;
        }
    }
    Ok(s)
}
