//! check, forget, prune, diff and stats.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::backend::Kind;
use crate::error::{Error, Result};
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
    // Every index entry: its pack's state, and with read_data its bytes.
    let mut by_pack: BTreeMap<[u8; 32], Vec<Location>> = BTreeMap::new();
    let mut index_err = None;
    if let Err(e) = repo.index.for_each(repo, |_, l| {
        if let Some(why) = bad_packs.get(&l.pack) {
            bad_chunks.insert(l.blob.id, format!("pack {} is {why}", hex::encode(l.pack)));
        } else if read_data {
            by_pack.entry(l.pack).or_default().push(*l);
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
        let total: u64 = by_pack
            .keys()
            .map(|p| indexed_packs.get(p).copied().unwrap_or(0))
            .sum();
        let mut done = 0u64;
        for (p, locs) in &by_pack {
            let name = hex::encode(p);
            let bytes = match repo.backend.get(Kind::Pack, &name) {
                Ok(b) => b,
                Err(e) => {
                    r.errors.push(format!("pack {name}: {e}"));
                    for l in locs {
                        bad_chunks.insert(l.blob.id, format!("pack {name} unreadable"));
                    }
                    continue;
                }
            };
            done += bytes.len() as u64;
            match pack::read_header(repo, &name, Some(&bytes)) {
                Ok(h) => {
                    for l in locs {
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
    type Group = (Vec<u8>, Vec<Vec<u8>>);
    let mut groups: BTreeMap<Group, Vec<String>> = BTreeMap::new();
    for (n, s) in snapshot::list(repo)? {
        groups.entry((s.hostname, s.paths)).or_default().push(n);
    }
    let mut removed = Vec::new();
    for (_, names) in groups {
        let drop_n = names.len().saturating_sub(keep_last);
        for n in &names[..drop_n] {
            repo.backend.delete(Kind::Snapshot, n)?;
            removed.push(n.clone());
        }
    }
    Ok(removed)
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
/// packs, then one new index for everything kept, then the old index files,
/// then the old packs: a crash at any point leaves every snapshot whole.
pub fn prune(repo: &Repository) -> Result<PruneReport> {
    let _lock = Lock::exclusive(repo.backend.clone())?;
    let mut rep = PruneReport::default();
    let mut used: HashSet<[u8; 32]> = HashSet::new();
    for (_, s) in snapshot::list(repo)? {
        for e in &s.entries {
            used.extend(e.chunks.iter().map(|c| c.id));
        }
    }
    // The index as it is now that no backup runs (the one loaded at open
    // may predate a backup that finished since).
    let index = crate::index::Index::load(repo)?;
    let old_files = index.files();
    let mut by_pack: HashMap<[u8; 32], Vec<Location>> = HashMap::new();
    let mut seen = HashSet::new();
    index.for_each(repo, |_, l| {
        if seen.insert(l.blob.id) {
            by_pack.entry(l.pack).or_default().push(*l);
        }
        Ok(())
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
        let locs = by_pack.entry(id).or_default();
        for (i, e) in entries.into_iter().enumerate() {
            if seen.insert(e.id) {
                locs.push(Location {
                    pack: id,
                    ordinal: i as u32,
                    blob: e,
                });
            }
        }
    }
    let unindexed = pack_sizes.len() > indexed_packs;
    let mut keep: Vec<Location> = Vec::new();
    let mut delete: Vec<[u8; 32]> = Vec::new();
    let mut builder = PackBuilder::default();
    let mut written: Vec<Location> = Vec::new();
    // Every known pack: one whose chunks all live in other packs too (two
    // backups wrote the same chunk) has no entries here and goes.
    let mut packs: Vec<[u8; 32]> = pack_sizes.keys().copied().collect();
    packs.sort();
    let none = Vec::new();
    for p in &packs {
        let locs = by_pack.get(p).unwrap_or(&none);
        let n_used = locs.iter().filter(|l| used.contains(&l.blob.id)).count();
        if !locs.is_empty() && n_used == locs.len() {
            keep.extend(locs.iter().copied());
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
            .filter(|l| used.contains(&l.blob.id))
            .map(|l| (l.ordinal, l.blob))
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
            builder.add(b.id, b.raw_len, flags, stored);
            if builder.bytes() >= PACK_TARGET {
                flush(repo, &mut builder, &mut written, &mut pack_sizes, &mut rep)?;
            }
        }
    }
    flush(repo, &mut builder, &mut written, &mut pack_sizes, &mut rep)?;
    keep.extend(written);
    if !delete.is_empty() || old_files.len() > 1 || unindexed || !index.damaged.is_empty() {
        index::write_file(repo, keep, &pack_sizes)?;
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

fn flush(
    repo: &Repository,
    b: &mut PackBuilder,
    written: &mut Vec<Location>,
    sizes: &mut HashMap<[u8; 32], u64>,
    rep: &mut PruneReport,
) -> Result<()> {
    if b.is_empty() {
        return Ok(());
    }
    let (name, size, entries) = std::mem::take(b).write(repo)?;
    let pack = crate::repo::parse_id(&name).unwrap_or_default();
    sizes.insert(pack, size);
    rep.packs_written += 1;
    for (i, e) in entries.into_iter().enumerate() {
        written.push(Location {
            pack,
            ordinal: i as u32,
            blob: e,
        });
    }
    Ok(())
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
    for (_, snap) in snapshot::list(repo)? {
        s.snapshots += 1;
        for e in &snap.entries {
            if e.kind == EntryKind::File {
                s.files += 1;
                s.logical_bytes += e.size;
            }
        }
    }
    let mut seen = HashSet::new();
    repo.index.for_each(repo, |_, l| {
        if seen.insert(l.blob.id) {
            s.chunks += 1;
            s.unique_bytes += l.blob.raw_len as u64;
        }
        Ok(())
    })?;
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
