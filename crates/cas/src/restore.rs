//! Restore and dump: every chunk is read from its pack, opened, and its id
//! checked against its plaintext before a byte is written. A file whose
//! chunks cannot all be had is reported by name and not left half written
//! under its name.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::sync::atomic::Ordering;

use rayon::prelude::*;

use crate::backend::Kind;
use crate::error::{Error, IoContext, Result};
use crate::lock::Lock;
use crate::mapped_file::MappedFile;
use crate::pack;
use crate::repo::Repository;
use crate::snapshot::{ChunkRef, Entry, EntryKind, Snapshot, FLAG_SPARSE};

/// A file restored in parallel: its entry index, its bytes or why it
/// failed, and a metadata failure to report.
type FileResult = (
    usize,
    std::result::Result<u64, String>,
    Option<(String, String)>,
);

/// Chunks fetched and opened together (one accel job per pack in a group).
const GROUP_BYTES: u64 = 16 << 20;
/// In a sparse file, zero runs of this many bytes (aligned) are left as holes.
const HOLE_GRAIN: usize = 4096;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreSummary {
    pub files: u64,
    pub dirs: u64,
    pub links: u64,
    pub bytes: u64,
    /// Paths that could not be restored, with why.
    pub failed: Vec<(String, String)>,
}

/// Splits `chunks` into groups of about `GROUP_BYTES` (at least one chunk).
fn groups(chunks: &[ChunkRef]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < chunks.len() {
        let mut end = start;
        let mut bytes = 0u64;
        while end < chunks.len() && (end == start || bytes + chunks[end].len as u64 <= GROUP_BYTES)
        {
            bytes += chunks[end].len as u64;
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Where a snapshot's chunk lives, or why the repository cannot say.
fn locate(repo: &Repository, c: &ChunkRef) -> Result<crate::index::Location> {
    repo.index.lookup(repo, &c.id)?.ok_or_else(|| {
        Error::corrupt(
            format!("chunk {}", hex::encode(c.id)),
            "no index file names it (missing)",
        )
    })
}

/// A chunk whose bytes are not as long as the snapshot says.
fn wrong_len(c: &ChunkRef) -> Error {
    Error::corrupt(
        format!("chunk {}", hex::encode(c.id)),
        "length differs from the snapshot",
    )
}

/// Fetches, opens and checks the distinct chunks of `group` (one accel
/// job per pack); returns each plaintext by id, its length checked
/// against the snapshot.
fn fetch_group(repo: &Repository, group: &[ChunkRef]) -> Result<HashMap<[u8; 32], Vec<u8>>> {
    let mut by_pack: HashMap<[u8; 32], Vec<(u32, pack::BlobEntry)>> = HashMap::new();
    let mut plain: HashMap<[u8; 32], Vec<u8>> = HashMap::new();
    for c in group {
        if plain.contains_key(&c.id) {
            continue;
        }
        let loc = locate(repo, c)?;
        plain.insert(c.id, Vec::new());
        by_pack
            .entry(loc.pack)
            .or_default()
            .push((loc.ordinal, loc.blob));
    }
    for (p, blobs) in by_pack {
        let name = hex::encode(p);
        let mut sealed = Vec::with_capacity(blobs.len());
        for (_, b) in &blobs {
            sealed.push(repo.backend.get_range(
                Kind::Pack,
                &name,
                b.offset as u64,
                b.sealed_len as usize,
            )?);
        }
        let opened = pack::open_blobs(repo, &name, &blobs, sealed)?;
        for ((_, b), r) in blobs.iter().zip(opened) {
            let data = r.map_err(|why| {
                Error::corrupt(format!("chunk {} in pack {name}", hex::encode(b.id)), why)
            })?;
            plain.insert(b.id, data);
        }
    }
    for c in group {
        if plain.get(&c.id).map_or(0, |v| v.len()) != c.len as usize {
            return Err(wrong_len(c));
        }
    }
    Ok(plain)
}

/// Fetches, opens and checks chunks; hands each plaintext to `out` in order.
pub fn read_chunks(
    repo: &Repository,
    chunks: &[ChunkRef],
    out: &mut dyn FnMut(&ChunkRef, &[u8]) -> Result<()>,
) -> Result<()> {
    for g in groups(chunks) {
        let group = &chunks[g];
        let plain = fetch_group(repo, group)?;
        for c in group {
            out(
                c,
                plain.get(&c.id).map(|v| v.as_slice()).unwrap_or_default(),
            )?;
        }
    }
    Ok(())
}

/// A `--include` pattern: `*` matches within one path component, `**` any
/// run of components, `?` one byte. An entry is restored when the pattern
/// matches its path or the path of one of its directories.
#[derive(Clone, Debug)]
pub struct Pattern(Vec<u8>);

impl Pattern {
    pub fn new(p: &str) -> Pattern {
        Pattern(
            p.trim_start_matches('/')
                .trim_end_matches('/')
                .as_bytes()
                .to_vec(),
        )
    }
    fn matches_exact(p: &[u8], s: &[u8]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                (0..=s.len()).any(|i| Self::matches_exact(&p[2..], &s[i..]))
            }
            Some(b'*') => (0..=s.len())
                .take_while(|&i| i == 0 || s[i - 1] != b'/')
                .any(|i| Self::matches_exact(&p[1..], &s[i..])),
            Some(b'?') => !s.is_empty() && s[0] != b'/' && Self::matches_exact(&p[1..], &s[1..]),
            Some(&c) => s.first() == Some(&c) && Self::matches_exact(&p[1..], &s[1..]),
        }
    }
    pub fn matches(&self, path: &[u8]) -> bool {
        if Self::matches_exact(&self.0, path) {
            return true;
        }
        path.iter()
            .enumerate()
            .filter(|(_, &b)| b == b'/')
            .any(|(i, _)| Self::matches_exact(&self.0, &path[..i]))
    }
}

fn fs_path(target: &Path, rel: &[u8]) -> Result<PathBuf> {
    let mut p = target.to_path_buf();
    if rel.is_empty() {
        return Ok(p); // the root of a backup of `/`
    }
    for c in rel.split(|&b| b == b'/') {
        if c.is_empty() || c == b"." || c == b".." {
            return Err(Error::corrupt(
                "snapshot",
                format!(
                    "path {:?} has an unsafe component",
                    String::from_utf8_lossy(rel)
                ),
            ));
        }
        p.push(OsStr::from_bytes(c));
    }
    Ok(p)
}

/// Files this large are written through a mapping by many threads at once;
/// smaller ones, restored many at a time, with `pwrite`.
const MAPPED_FROM: u64 = 2 * GROUP_BYTES;

/// Writes a file's chunks at their offsets, groups in parallel (at most one
/// group per worker thread in memory), into a temporary name renamed into
/// place once complete and synced. In a sparse file, zero runs of
/// `HOLE_GRAIN` aligned bytes are not written and stay holes.
fn write_file(repo: &Repository, e: &Entry, dest: &Path) -> Result<u64> {
    let tmp = dest.with_file_name(format!(
        ".gvault-restore-{}",
        hex::encode(gvault_store::keys::random_bytes::<8>())
    ));
    let r = (|| {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .ctx(|| format!("creating {}", tmp.display()))?;
        let sparse = e.flags & FLAG_SPARSE != 0;
        let pos: u64 = e.chunks.iter().map(|c| c.len as u64).sum();
        let mapped = if !sparse && pos >= MAPPED_FROM {
            MappedFile::create(&f, pos).ctx(|| format!("sizing {}", tmp.display()))?
        } else {
            None
        };
        match mapped {
            Some(mut m) => write_mapped(repo, &e.chunks, &mut m)?,
            None => write_at_offsets(repo, &e.chunks, &f, &tmp, sparse)?,
        }
        f.set_len(pos).ctx(|| format!("sizing {}", tmp.display()))?;
        f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
        drop(f);
        fs::rename(&tmp, dest).ctx(|| format!("renaming to {}", dest.display()))?;
        Ok(pos)
    })();
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

/// Writes the chunks with `pwrite` into `f` (at `path`), groups in
/// parallel.
fn write_at_offsets(
    repo: &Repository,
    chunks: &[ChunkRef],
    f: &fs::File,
    path: &Path,
    sparse: bool,
) -> Result<()> {
    let mut offsets = Vec::with_capacity(chunks.len());
    let mut pos = 0u64;
    for c in chunks {
        offsets.push(pos);
        pos += c.len as u64;
    }
    groups(chunks).into_par_iter().try_for_each(|g| {
        let plain = fetch_group(repo, &chunks[g.clone()])?;
        for k in g {
            let c = &chunks[k];
            let data = plain.get(&c.id).map(|v| v.as_slice()).unwrap_or_default();
            write_chunk(f, offsets[k], data, sparse)
                .ctx(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    })
}

/// Restores the chunks into the mapped file, groups in parallel, each into
/// its own disjoint piece of the mapping.
fn write_mapped(repo: &Repository, chunks: &[ChunkRef], m: &mut MappedFile) -> Result<()> {
    let mut rest = m.bytes_mut();
    let mut jobs = Vec::new();
    for g in groups(chunks) {
        let mut pieces = Vec::with_capacity(g.len());
        for c in &chunks[g.clone()] {
            let (piece, after) = std::mem::take(&mut rest).split_at_mut(c.len as usize);
            pieces.push(piece);
            rest = after;
        }
        jobs.push((g, pieces));
    }
    jobs.into_par_iter()
        .try_for_each(|(g, pieces)| fetch_group_into(repo, &chunks[g], pieces))
}

/// Fetches, opens and checks the chunks of `group` into `pieces` (chunk k's
/// bytes go to `pieces[k]`). An uncompressed chunk's ciphertext is read
/// straight into its piece and opened there (one copy of its bytes in all,
/// and no buffer to allocate); a compressed one goes through
/// [`fetch_group`]; a chunk seen earlier in the group is copied from there.
fn fetch_group_into(
    repo: &Repository,
    group: &[ChunkRef],
    mut pieces: Vec<&mut [u8]>,
) -> Result<()> {
    let mut first: HashMap<[u8; 32], usize> = HashMap::new();
    let mut copies = Vec::new();
    let mut indirect = Vec::new();
    // Per pack: (chunk index in the group, ordinal, entry).
    let mut by_pack: HashMap<[u8; 32], Vec<(usize, u32, pack::BlobEntry)>> = HashMap::new();
    for (k, c) in group.iter().enumerate() {
        if pieces[k].len() != c.len as usize {
            return Err(wrong_len(c));
        }
        if let Some(&at) = first.get(&c.id) {
            copies.push((at, k));
            continue;
        }
        first.insert(c.id, k);
        let loc = locate(repo, c)?;
        if pack::opens_in_place(&loc.blob) && loc.blob.raw_len == c.len {
            by_pack
                .entry(loc.pack)
                .or_default()
                .push((k, loc.ordinal, loc.blob));
        } else {
            indirect.push(k);
        }
    }
    // Each piece is handed out once below: a chunk is in one list only.
    let mut slots: Vec<Option<&mut [u8]>> = pieces.iter_mut().map(|p| Some(&mut **p)).collect();
    for (p, blobs) in by_pack {
        let name = hex::encode(p);
        let mut bufs: Vec<&mut [u8]> = Vec::with_capacity(blobs.len());
        for (k, _, _) in &blobs {
            let piece = slots[*k].take().ok_or_else(|| wrong_len(&group[*k]))?;
            crate::mapped_file::prefault(piece);
            bufs.push(piece);
        }
        let mut tags = vec![[0u8; 16]; blobs.len()];
        {
            let mut ranges: Vec<(u64, &mut [u8])> = Vec::with_capacity(2 * blobs.len());
            for ((b, tag), (_, _, e)) in bufs.iter_mut().zip(tags.iter_mut()).zip(&blobs) {
                let at = e.offset as u64;
                ranges.push((at, &mut **b));
                ranges.push((at + e.raw_len as u64, &mut tag[..]));
            }
            repo.backend
                .get_ranges_into(Kind::Pack, &name, &mut ranges)?;
        }
        let entries: Vec<(u32, pack::BlobEntry)> = blobs.iter().map(|(_, o, e)| (*o, *e)).collect();
        let opened = pack::open_blobs_in_place(repo, &name, &entries, &mut bufs, tags)?;
        for ((_, _, e), r) in blobs.iter().zip(opened) {
            r.map_err(|why| {
                Error::corrupt(format!("chunk {} in pack {name}", hex::encode(e.id)), why)
            })?;
        }
    }
    if !indirect.is_empty() {
        let refs: Vec<ChunkRef> = indirect.iter().map(|&k| group[k]).collect();
        let plain = fetch_group(repo, &refs)?;
        for &k in &indirect {
            let piece = slots[k].take().ok_or_else(|| wrong_len(&group[k]))?;
            let data = plain
                .get(&group[k].id)
                .ok_or_else(|| wrong_len(&group[k]))?;
            crate::mapped_file::prefault(piece);
            piece.copy_from_slice(data);
        }
    }
    drop(slots);
    for (from, to) in copies {
        // `from` < `to`: a chunk's first piece comes before its copies.
        let (head, tail) = pieces.split_at_mut(to);
        crate::mapped_file::prefault(tail[0]);
        tail[0].copy_from_slice(head[from]);
    }
    Ok(())
}

/// Writes one chunk at `offset`; in a sparse file, skips aligned zero runs.
fn write_chunk(f: &fs::File, offset: u64, data: &[u8], sparse: bool) -> std::io::Result<()> {
    if !sparse {
        return f.write_all_at(data, offset);
    }
    let mut at = 0usize;
    while at < data.len() {
        // Pieces end on file-system grain boundaries, so holes are aligned.
        let next = ((offset as usize + at) / HOLE_GRAIN + 1) * HOLE_GRAIN - offset as usize;
        let piece = &data[at..next.min(data.len())];
        if piece.iter().any(|&b| b != 0) {
            f.write_all_at(piece, offset + at as u64)?;
        }
        at += piece.len();
    }
    Ok(())
}

/// Sets owner (where permitted), mode and times; returns a failure to report.
fn set_meta(e: &Entry, p: &Path) -> Option<(String, String)> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: c is a valid C string; lchown on a path does not follow links.
    // Owners are kept when the restorer may set them (root); others keep
    // their own, so its failure is not reported.
    unsafe {
        let _ = libc::lchown(c.as_ptr(), e.uid, e.gid);
    }
    let mut failure = None;
    if e.kind != EntryKind::Symlink {
        if let Err(err) = fs::set_permissions(p, fs::Permissions::from_mode(e.mode & 0o7777)) {
            failure = Some((p.display().to_string(), format!("setting its mode: {err}")));
        }
    }
    let ts = |t: i64| libc::timespec {
        tv_sec: t.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: t.rem_euclid(1_000_000_000) as libc::c_long,
    };
    let times = [ts(e.atime_ns), ts(e.mtime_ns)];
    // SAFETY: valid path and a two-element timespec array.
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        );
    }
    failure
}

/// Runs `f` on a rayon pool of at least as many threads as the backend
/// serves requests at once: on object storage the workers mostly wait on
/// the network, so more of them than cores keep the connections busy.
fn with_io_threads<R: Send>(repo: &Repository, f: impl FnOnce() -> R + Send) -> R {
    let want = repo.backend.parallelism();
    if want <= rayon::current_num_threads() {
        return f();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(want).build() {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Restores the entries of `snap` (those `include` selects) under `target`:
/// directories first, then files in parallel (each chunk's id checked),
/// then symlinks and hard links, then the directories' metadata.
pub fn restore(
    repo: &Repository,
    snap: &Snapshot,
    target: &Path,
    include: Option<&Pattern>,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<RestoreSummary> {
    // Shared: a prune (exclusive) cannot delete packs while they are read.
    let _lock = Lock::shared(repo.backend.clone())?;
    fs::create_dir_all(target).ctx(|| format!("creating {}", target.display()))?;
    let mut sum = RestoreSummary::default();
    // Directories on the way to a selected entry are made as needed.
    let mut chosen: Vec<(usize, &Entry, PathBuf)> = Vec::new();
    for (i, e) in snap.entries.iter().enumerate() {
        if include.is_none_or(|p| p.matches(&e.path)) {
            chosen.push((i, e, fs_path(target, &e.path)?));
        }
    }
    let mut dirs: Vec<(&Entry, &PathBuf)> = Vec::new();
    let mut ready = vec![true; chosen.len()];
    for (k, (_, e, dest)) in chosen.iter().enumerate() {
        let made = match e.kind {
            EntryKind::Dir => fs::create_dir_all(dest),
            _ => dest.parent().map_or(Ok(()), fs::create_dir_all),
        };
        if let Err(err) = made {
            sum.failed.push((
                dest.display().to_string(),
                format!("creating directory: {err}"),
            ));
            ready[k] = false;
        } else if e.kind == EntryKind::Dir {
            dirs.push((e, dest));
            sum.dirs += 1;
        }
    }
    // Files, and the groups of chunks of each file, in parallel: at most
    // one group (sealed and opened) per worker thread in memory.
    let done = std::sync::atomic::AtomicU64::new(0);
    let bytes = std::sync::atomic::AtomicU64::new(0);
    let results: Vec<FileResult> = with_io_threads(repo, || {
        chosen
            .par_iter()
            .zip(ready.par_iter())
            .filter(|((_, e, _), ok)| **ok && e.kind == EntryKind::File)
            .map(|((i, e, dest), _)| match write_file(repo, e, dest) {
                Ok(n) => {
                    let meta = set_meta(e, dest);
                    let f = done.fetch_add(1, Ordering::Relaxed) + 1;
                    let b = bytes.fetch_add(n, Ordering::Relaxed) + n;
                    progress(f, b);
                    (*i, Ok(n), meta)
                }
                Err(err) => (*i, Err(err.to_string()), None),
            })
            .collect()
    });
    let mut restored: HashMap<usize, PathBuf> = HashMap::new();
    let dest_of: HashMap<usize, &PathBuf> = chosen.iter().map(|(i, _, d)| (*i, d)).collect();
    for (i, r, meta) in results {
        match r {
            Ok(n) => {
                sum.files += 1;
                sum.bytes += n;
                if let Some(d) = dest_of.get(&i) {
                    restored.insert(i, (*d).clone());
                }
            }
            Err(why) => {
                let shown = dest_of
                    .get(&i)
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                sum.failed.push((shown, why));
            }
        }
        sum.failed.extend(meta);
    }
    for (k, (_, e, dest)) in chosen.iter().enumerate() {
        if !ready[k] {
            continue;
        }
        let shown = dest.display().to_string();
        match e.kind {
            EntryKind::Dir | EntryKind::File => {}
            EntryKind::Symlink => {
                let _ = fs::remove_file(dest);
                match std::os::unix::fs::symlink(OsStr::from_bytes(&e.target), dest) {
                    Ok(()) => {
                        sum.failed.extend(set_meta(e, dest));
                        sum.links += 1;
                    }
                    Err(err) => sum.failed.push((shown, err.to_string())),
                }
            }
            EntryKind::HardLink => {
                let Some(first) = restored.get(&(e.link as usize)).cloned() else {
                    // The file it links to was not selected: this path gets
                    // the contents itself and becomes the one later links use.
                    let Some(file) = snap.entries.get(e.link as usize) else {
                        sum.failed
                            .push((shown, "links to an entry the snapshot lacks".into()));
                        continue;
                    };
                    match write_file(repo, file, dest) {
                        Ok(n) => {
                            sum.files += 1;
                            sum.bytes += n;
                            sum.failed.extend(set_meta(file, dest));
                            restored.insert(e.link as usize, dest.clone());
                        }
                        Err(err) => sum.failed.push((shown, err.to_string())),
                    }
                    continue;
                };
                let _ = fs::remove_file(dest);
                match fs::hard_link(&first, dest) {
                    Ok(()) => sum.links += 1,
                    Err(err) => sum.failed.push((shown, err.to_string())),
                }
            }
        }
    }
    // Directories last, deepest first, so that writing into them does not
    // change their times after they were set.
    for (e, p) in dirs.iter().rev() {
        sum.failed.extend(set_meta(e, p));
    }
    Ok(sum)
}

/// Writes the contents of the file at `path` in `snap` to `out`.
pub fn dump(repo: &Repository, snap: &Snapshot, path: &str, out: &mut dyn Write) -> Result<u64> {
    let want = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .as_bytes();
    let mut e = snap
        .entries
        .iter()
        .find(|e| e.path == want)
        .ok_or_else(|| Error::NotFound(format!("{path} is not in the snapshot")))?;
    if e.kind == EntryKind::HardLink {
        e = snap
            .entries
            .get(e.link as usize)
            .ok_or_else(|| Error::corrupt("snapshot", "bad hard link"))?;
    }
    if e.kind != EntryKind::File {
        return Err(Error::InvalidArgument(format!(
            "{path} is not a regular file"
        )));
    }
    let _lock = Lock::shared(repo.backend.clone())?;
    let mut n = 0u64;
    read_chunks(repo, &e.chunks, &mut |_, data| {
        out.write_all(data)
            .ctx(|| "writing the file out".to_string())?;
        n += data.len() as u64;
        Ok(())
    })?;
    out.flush().ctx(|| "writing the file out".to_string())?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    #[test]
    fn patterns_match_paths_and_their_contents() {
        let p = Pattern::new("home/*/docs");
        assert!(p.matches(b"home/a/docs"));
        assert!(p.matches(b"home/a/docs/x.txt"));
        assert!(!p.matches(b"home/a/b/docs"));
        assert!(Pattern::new("home/**/docs").matches(b"home/a/b/docs/y"));
        assert!(Pattern::new("*.txt").matches(b"a.txt"));
        assert!(!Pattern::new("*.txt").matches(b"d/a.txt"));
        assert!(Pattern::new("**/*.txt").matches(b"d/a.txt"));
        assert!(Pattern::new("a?c").matches(b"abc"));
        assert!(!Pattern::new("a?c").matches(b"a/c"));
    }
}
