//! Snapshots: one sealed object each, holding a header and the tree as a
//! flat list of entries in depth-first order, parents before children
//! (docs/repository.md §6).

use crate::accel_jobs;
use crate::backend::Kind;
use crate::coding::{put_bytes, put_i64, put_u32, put_u64, put_u8, Decoder};
use crate::error::{Error, Result};
use crate::repo::{ObjectKind, Repository};

const SNAP_MAGIC: [u8; 8] = *b"GVCASSN1";
pub(crate) const NONCE: [u8; 12] = [0; 12];
pub(crate) const AAD: &[u8] = b"gvault-cas snapshot";
/// The shortest encoded entry: an empty path, a directory.
const MIN_ENTRY_LEN: usize = 4 + 1 + 3 * 4 + 3 * 8 + 3 * 8 + 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Dir = 0,
    File = 1,
    Symlink = 2,
    /// A hard link to an earlier file entry of the same snapshot.
    HardLink = 3,
}

/// One chunk of a file's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    pub id: [u8; 32],
    pub len: u32,
}

/// Entry flag: the file was sparse (it had holes); restore leaves runs
/// of zero bytes as holes.
pub const FLAG_SPARSE: u8 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// '/'-separated path bytes, relative (no leading '/').
    pub path: Vec<u8>,
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub atime_ns: i64,
    pub ctime_ns: i64,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub flags: u8,
    /// Symlink target.
    pub target: Vec<u8>,
    /// For a hard link: the index of the entry it links to.
    pub link: u64,
    pub chunks: Vec<ChunkRef>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub time_ns: i64,
    pub hostname: Vec<u8>,
    pub paths: Vec<Vec<u8>>,
    pub parent: Option<[u8; 32]>,
    pub entries: Vec<Entry>,
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&SNAP_MAGIC);
        put_i64(&mut b, self.time_ns);
        put_bytes(&mut b, &self.hostname);
        put_u32(&mut b, self.paths.len() as u32);
        for p in &self.paths {
            put_bytes(&mut b, p);
        }
        match &self.parent {
            Some(p) => {
                put_u8(&mut b, 1);
                b.extend_from_slice(p);
            }
            None => put_u8(&mut b, 0),
        }
        put_u64(&mut b, self.entries.len() as u64);
        for e in &self.entries {
            put_bytes(&mut b, &e.path);
            put_u8(&mut b, e.kind as u8);
            put_u32(&mut b, e.mode);
            put_u32(&mut b, e.uid);
            put_u32(&mut b, e.gid);
            put_i64(&mut b, e.mtime_ns);
            put_i64(&mut b, e.atime_ns);
            put_i64(&mut b, e.ctime_ns);
            put_u64(&mut b, e.dev);
            put_u64(&mut b, e.ino);
            put_u64(&mut b, e.size);
            put_u8(&mut b, e.flags);
            match e.kind {
                EntryKind::Dir => {}
                EntryKind::Symlink => put_bytes(&mut b, &e.target),
                EntryKind::HardLink => put_u64(&mut b, e.link),
                EntryKind::File => {
                    put_u32(&mut b, e.chunks.len() as u32);
                    for c in &e.chunks {
                        b.extend_from_slice(&c.id);
                        put_u32(&mut b, c.len);
                    }
                }
            }
        }
        b
    }

    pub fn decode(body: &[u8], name: &str) -> Result<Snapshot> {
        let bad = |why: &str| Error::corrupt(format!("snapshot {name}"), why.to_string());
        let cut = || bad("cut short");
        if body.len() < 8 || body[..8] != SNAP_MAGIC {
            return Err(bad("bad magic"));
        }
        let mut d = Decoder::new(&body[8..]);
        let time_ns = d.i64().ok_or_else(cut)?;
        let hostname = d.bytes().ok_or_else(cut)?.to_vec();
        let np = d.u32().ok_or_else(cut)?;
        let mut paths = Vec::new();
        for _ in 0..np {
            paths.push(d.bytes().ok_or_else(cut)?.to_vec());
        }
        let parent = match d.u8().ok_or_else(cut)? {
            0 => None,
            1 => Some(d.array().ok_or_else(cut)?),
            _ => return Err(bad("bad parent flag")),
        };
        let n = d.u64().ok_or_else(cut)?;
        // Reserved by what the body can hold, not by its count: an entry
        // takes at least MIN_ENTRY_LEN bytes (a reserve of a million
        // entries, 170 MB, for a few bytes of input otherwise).
        let mut entries =
            Vec::with_capacity(n.min((d.remaining() / MIN_ENTRY_LEN) as u64) as usize);
        for i in 0..n {
            let path = d.bytes().ok_or_else(cut)?.to_vec();
            let kind = match d.u8().ok_or_else(cut)? {
                0 => EntryKind::Dir,
                1 => EntryKind::File,
                2 => EntryKind::Symlink,
                3 => EntryKind::HardLink,
                k => return Err(bad(&format!("entry {i}: unknown kind {k}"))),
            };
            let mut e = Entry {
                path,
                kind,
                mode: d.u32().ok_or_else(cut)?,
                uid: d.u32().ok_or_else(cut)?,
                gid: d.u32().ok_or_else(cut)?,
                mtime_ns: d.i64().ok_or_else(cut)?,
                atime_ns: d.i64().ok_or_else(cut)?,
                ctime_ns: d.i64().ok_or_else(cut)?,
                dev: d.u64().ok_or_else(cut)?,
                ino: d.u64().ok_or_else(cut)?,
                size: d.u64().ok_or_else(cut)?,
                flags: d.u8().ok_or_else(cut)?,
                target: Vec::new(),
                link: 0,
                chunks: Vec::new(),
            };
            match kind {
                EntryKind::Dir => {}
                EntryKind::Symlink => e.target = d.bytes().ok_or_else(cut)?.to_vec(),
                EntryKind::HardLink => {
                    e.link = d.u64().ok_or_else(cut)?;
                    if e.link >= i {
                        return Err(bad(&format!("entry {i}: hard link to a later entry")));
                    }
                }
                EntryKind::File => {
                    let nc = d.u32().ok_or_else(cut)?;
                    let mut total = 0u64;
                    for _ in 0..nc {
                        let c = ChunkRef {
                            id: d.array().ok_or_else(cut)?,
                            len: d.u32().ok_or_else(cut)?,
                        };
                        total += c.len as u64;
                        e.chunks.push(c);
                    }
                    if total != e.size {
                        return Err(bad(&format!("entry {i}: chunks do not add up to its size")));
                    }
                }
            }
            entries.push(e);
        }
        if !d.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(Snapshot {
            time_ns,
            hostname,
            paths,
            parent,
            entries,
        })
    }

    /// Seals and writes the snapshot; returns its name.
    pub fn write(&self, repo: &Repository) -> Result<String> {
        let id = crate::repo::new_id();
        let key = repo.keys.object_key(ObjectKind::Snapshot, &id);
        let sealed = accel_jobs::seal_one(repo.accel(), &key, NONCE, AAD, self.encode())?;
        let name = hex::encode(id);
        repo.backend.put(Kind::Snapshot, &name, &sealed)?;
        Ok(name)
    }

    pub fn read(repo: &Repository, name: &str) -> Result<Snapshot> {
        let id = crate::repo::parse_id(name)
            .ok_or_else(|| Error::NotFound(format!("snapshot {name}")))?;
        let key = repo.keys.object_key(ObjectKind::Snapshot, &id);
        let sealed = repo.backend.get(Kind::Snapshot, name)?;
        let mut body = accel_jobs::open_one(repo.accel(), &key, NONCE, AAD, &sealed)?;
        // A cached copy that does not authenticate is never trusted: it is
        // dropped and the object read again from the repository.
        if body.is_none() && repo.backend.drop_cached(Kind::Snapshot, name) {
            let sealed = repo.backend.get(Kind::Snapshot, name)?;
            body = accel_jobs::open_one(repo.accel(), &key, NONCE, AAD, &sealed)?;
        }
        let body = body
            .ok_or_else(|| Error::corrupt(format!("snapshot {name}"), "does not authenticate"))?;
        Snapshot::decode(&body, name)
    }
}

/// All snapshot names, oldest first by their recorded time.
pub fn list(repo: &Repository) -> Result<Vec<(String, Snapshot)>> {
    let mut out = Vec::new();
    for n in repo.backend.list(Kind::Snapshot)? {
        let s = Snapshot::read(repo, &n)?;
        out.push((n, s));
    }
    out.sort_by(|a, b| a.1.time_ns.cmp(&b.1.time_ns).then(a.0.cmp(&b.0)));
    Ok(out)
}

/// Every snapshot's header (its entries left empty), oldest first: one
/// snapshot is decoded at a time, so memory holds the largest snapshot
/// and the headers, never every tree at once.
pub fn headers(repo: &Repository) -> Result<Vec<(String, Snapshot)>> {
    let mut out = Vec::new();
    for n in repo.backend.list(Kind::Snapshot)? {
        let mut s = Snapshot::read(repo, &n)?;
        s.entries = Vec::new();
        out.push((n, s));
    }
    out.sort_by(|a, b| a.1.time_ns.cmp(&b.1.time_ns).then(a.0.cmp(&b.0)));
    Ok(out)
}

/// Resolves a snapshot name: a unique prefix of its id, or `latest`.
pub fn resolve(repo: &Repository, name: &str) -> Result<String> {
    let all = repo.backend.list(Kind::Snapshot)?;
    if name == "latest" {
        return headers(repo)?
            .pop()
            .map(|(n, _)| n)
            .ok_or_else(|| Error::NotFound("the repository has no snapshots".into()));
    }
    let hits: Vec<&String> = all.iter().filter(|n| n.starts_with(name)).collect();
    match hits.as_slice() {
        [one] if !name.is_empty() => Ok((*one).clone()),
        [] => Err(Error::NotFound(format!("no snapshot {name}"))),
        _ => Err(Error::InvalidArgument(format!(
            "{name:?} names {} snapshots; give more of its id",
            hits.len()
        ))),
    }
}
