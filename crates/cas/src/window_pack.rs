//! Packs whose blobs stay where a backup read them. A large file's new
//! chunks are sealed in place in its read window and written from there,
//! so a new byte crosses memory once for the read and once for the pack
//! write: gathering chunks into a pack buffer first cost one more pass,
//! and, where the GPU sealed a pageable pack buffer, two more for its
//! staging copies (a window is page-locked when a GPU may take its jobs).
//! A window is lent to the packs that hold its blobs ([`Lease`]) and goes
//! back to the reader once the last of them is written or dropped.
//!
//! Nonces are those of every pack: each pack has a fresh id, so a fresh
//! key, and blob k of a pack is sealed with nonce k (docs/repository.md §3);
//! a pack's blobs are numbered before any of them is sealed.

use std::ops::Range;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use rayon::prelude::*;

use crate::accel_jobs::{self, CipherItem, TAG_LEN};
use crate::backend::Kind;
use crate::error::{Error, Result};
use crate::pack::{self, blob_aad, blob_nonce, BlobEntry, SealedBlob, PACK_TARGET};
use crate::repo::{ObjectKind, Repository};

/// A read window out of its pool (being read, chunked, packed, or lent to
/// packs); sent home when dropped, wherever that happens, so that a reader
/// waiting for a window is never left waiting by a thread that failed.
pub(crate) struct Lease<W: Send> {
    window: Option<W>,
    home: Sender<W>,
}

impl<W: Send> Lease<W> {
    pub(crate) fn new(window: W, home: Sender<W>) -> Lease<W> {
        Lease {
            window: Some(window),
            home,
        }
    }
}

impl<W: WindowBytes> std::ops::Deref for Lease<W> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.window.as_ref().map_or(&[][..], |w| w.bytes())
    }
}

impl<W: WindowBytes> std::ops::DerefMut for Lease<W> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.window.as_mut().map_or(&mut [][..], |w| w.bytes_mut())
    }
}

impl<W: Send> Drop for Lease<W> {
    fn drop(&mut self) {
        if let Some(w) = self.window.take() {
            // The reader gone (the backup ended), the window is freed.
            let _ = self.home.send(w);
        }
    }
}

/// A read window's bytes.
pub(crate) trait WindowBytes: Send + Sync {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// Where a blob's sealed bytes lie.
enum Stored<W: Send> {
    InWindow(Arc<Lease<W>>, Range<usize>),
    Owned(Vec<u8>),
}

impl<W: WindowBytes> Stored<W> {
    fn bytes(&self) -> &[u8] {
        match self {
            Stored::InWindow(lease, r) => lease.get(r.clone()).unwrap_or_default(),
            Stored::Owned(v) => v,
        }
    }
}

struct Blob<W: Send> {
    id: [u8; 32],
    raw_len: u32,
    flags: u8,
    stored: Stored<W>,
    tag: [u8; 16],
}

/// A pack being filled from read windows: its blobs numbered as windows
/// are planned, added once sealed, the pack written once full.
pub(crate) struct WindowPack<W: Send> {
    pack_id: [u8; 32],
    /// Ids of the blobs numbered so far (blob k has nonce k).
    ids: Vec<[u8; 32]>,
    blobs: Vec<Blob<W>>,
    /// Stored bytes and tags of the numbered blobs.
    bytes: usize,
}

impl<W: WindowBytes> WindowPack<W> {
    fn new() -> WindowPack<W> {
        WindowPack {
            pack_id: crate::repo::new_id(),
            ids: Vec::new(),
            blobs: Vec::new(),
            bytes: 0,
        }
    }

    /// Ids of its blobs, sealed or still being sealed.
    pub(crate) fn ids(&self) -> impl Iterator<Item = [u8; 32]> + '_ {
        self.ids.iter().copied()
    }

    /// Full, and every numbered blob sealed and added.
    fn complete(&self) -> bool {
        self.bytes >= PACK_TARGET && self.blobs.len() == self.ids.len()
    }

    /// Seals its header and writes the pack where its blobs lie; returns
    /// its name, its length and its entries.
    pub(crate) fn write(self, repo: &Repository) -> Result<(String, u64, Vec<BlobEntry>)> {
        if self.blobs.len() != self.ids.len() {
            return Err(Error::Accel(format!(
                "pack {}: {} of {} blobs sealed at writing",
                hex::encode(self.pack_id),
                self.blobs.len(),
                self.ids.len()
            )));
        }
        let sealed: Vec<SealedBlob<'_>> = self
            .blobs
            .iter()
            .map(|b| SealedBlob {
                id: b.id,
                raw_len: b.raw_len,
                flags: b.flags,
                ciphertext: b.stored.bytes(),
                tag: b.tag,
            })
            .collect();
        let (entries, trailer) = pack::layout(repo, &self.pack_id, &sealed)?;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * sealed.len() + 1);
        for b in &sealed {
            parts.push(b.ciphertext);
            parts.push(&b.tag);
        }
        parts.push(&trailer);
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let name = hex::encode(self.pack_id);
        repo.backend.put_parts(Kind::Pack, &name, &parts)?;
        Ok((name, len, entries))
    }
}

/// A new chunk of a window: its id, raw length, its range in the window,
/// and its compressed bytes where compression pays (then stored instead).
pub(crate) struct Fresh {
    pub id: [u8; 32],
    pub raw_len: u32,
    pub range: Range<usize>,
    pub compressed: Option<Vec<u8>>,
}

impl Fresh {
    fn flags(&self) -> u8 {
        if self.compressed.is_some() {
            pack::FLAG_ZSTD
        } else {
            0
        }
    }
}

/// A window's new chunks, numbered into packs, to be sealed.
pub(crate) struct Plan<W: Send> {
    window: Lease<W>,
    fresh: Vec<Fresh>,
    /// Per chunk: its pack's id and its ordinal there.
    place: Vec<([u8; 32], u32)>,
    hold: bool,
}

/// Numbers a window's new chunks into `packs` (the last one is being
/// filled; packs are added as each fills): the pack and ordinal of a
/// chunk fix its key and nonce. When `hold` is false each chunk is later
/// sealed in a copy of its own, so that the window is not lent out (a
/// window holding few new bytes would stay out until a pack fills, and the
/// reader would run out of windows).
pub(crate) fn plan<W: WindowBytes>(
    window: Lease<W>,
    fresh: Vec<Fresh>,
    hold: bool,
    packs: &mut Vec<WindowPack<W>>,
) -> Plan<W> {
    let mut place = Vec::with_capacity(fresh.len());
    for f in &fresh {
        if packs.last().is_none_or(|p| p.bytes >= PACK_TARGET) {
            packs.push(WindowPack::new());
        }
        let Some(p) = packs.last_mut() else { break };
        let stored = f.compressed.as_ref().map_or(f.range.len(), |c| c.len());
        p.bytes += stored + TAG_LEN;
        place.push((p.pack_id, p.ids.len() as u32));
        p.ids.push(f.id);
    }
    Plan {
        window,
        fresh,
        place,
        hold,
    }
}

/// A plan's chunks sealed: each with its pack's id.
pub(crate) struct Sealed<W: Send> {
    blobs: Vec<([u8; 32], Blob<W>)>,
}

/// Tags of a pack's blobs, by chunk index in the plan.
type Tags = Vec<(usize, [u8; 16])>;

/// A pack's id and its chunks to seal, by chunk index in the plan.
type PackItems<'a> = ([u8; 32], Vec<(usize, CipherItem<'a>)>);

/// Seals a plan's chunks where they lie in its window (or in copies, or
/// in their compressed bytes): one accel job per pack, each pack its own
/// key, the packs at once. Runs beside the planning of the next window.
pub(crate) fn seal<W: WindowBytes>(repo: &Repository, plan: Plan<W>) -> Result<Sealed<W>> {
    let Plan {
        mut window,
        fresh,
        place,
        hold,
    } = plan;
    let aads: Vec<Vec<u8>> = fresh
        .iter()
        .map(|f| blob_aad(&f.id, f.raw_len, f.flags()))
        .collect();
    let metas: Vec<([u8; 32], u32, u8, Range<usize>)> = fresh
        .iter()
        .map(|f| (f.id, f.raw_len, f.flags(), f.range.clone()))
        .collect();
    // The bytes each chunk is sealed in: its compressed bytes, a copy of
    // its piece of the window, or (`None`) that piece itself.
    let whole: &mut [u8] = &mut window;
    let mut owned: Vec<Option<Vec<u8>>> = fresh
        .into_iter()
        .map(|f| match f.compressed {
            Some(c) => Some(c),
            None if !hold => Some(whole[f.range].to_vec()),
            None => None,
        })
        .collect();
    let mut tags = vec![[0u8; 16]; metas.len()];
    {
        // Disjoint pieces of the window, in order, for chunks sealed there.
        let mut data: Vec<&mut [u8]> = Vec::with_capacity(metas.len());
        let mut rest: &mut [u8] = whole;
        let mut at = 0usize;
        for (m, o) in metas.iter().zip(owned.iter_mut()) {
            match o {
                Some(v) => data.push(v.as_mut_slice()),
                None => {
                    let r = &m.3;
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
                    let (piece, after) = tail.split_at_mut(r.len());
                    data.push(piece);
                    rest = after;
                    at = r.end;
                }
            }
        }
        let mut groups: Vec<PackItems<'_>> = Vec::new();
        for (k, (d, aad)) in data.into_iter().zip(&aads).enumerate() {
            let (pack_id, ordinal) = place[k];
            if groups.last().is_none_or(|g| g.0 != pack_id) {
                groups.push((pack_id, Vec::new()));
            }
            if let Some(g) = groups.last_mut() {
                g.1.push((
                    k,
                    CipherItem {
                        nonce: blob_nonce(ordinal),
                        aad,
                        data: d,
                    },
                ));
            }
        }
        // Under the auto backend a window is sealed on the CPU cores: its
        // seals run beside the chunk jobs of the windows after it, and on
        // the GPU they queued behind them (second backups 30% slower on the
        // H200 host, first ones no faster). A backend the user forced is
        // used as it is.
        let cpu;
        let backend: &dyn gvault_accel::Backend = if repo.accel().name() == "auto" {
            cpu = accel_jobs::cpu_backend();
            &*cpu
        } else {
            repo.accel()
        };
        let sealed: Vec<Result<Tags>> = groups
            .into_par_iter()
            .map(|(pack_id, group)| {
                let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
                let (ks, items): (Vec<usize>, Vec<CipherItem<'_>>) = group.into_iter().unzip();
                let t = accel_jobs::seal(backend, &key, items)?;
                Ok(ks.into_iter().zip(t).collect())
            })
            .collect();
        for group in sealed {
            for (k, t) in group? {
                tags[k] = t;
            }
        }
    }
    let lease = Arc::new(window);
    let blobs = metas
        .into_iter()
        .zip(owned)
        .enumerate()
        .map(|(k, ((id, raw_len, flags, range), o))| {
            let stored = match o {
                Some(v) => Stored::Owned(v),
                None => Stored::InWindow(lease.clone(), range),
            };
            (
                place[k].0,
                Blob {
                    id,
                    raw_len,
                    flags,
                    stored,
                    tag: tags[k],
                },
            )
        })
        .collect();
    Ok(Sealed { blobs })
}

/// Adds sealed chunks to their packs, in order, and takes out the packs
/// that are full and complete (to be written).
pub(crate) fn attach<W: WindowBytes>(
    sealed: Sealed<W>,
    packs: &mut Vec<WindowPack<W>>,
) -> Result<Vec<WindowPack<W>>> {
    for (pack_id, blob) in sealed.blobs {
        let p = packs
            .iter_mut()
            .find(|p| p.pack_id == pack_id)
            .ok_or_else(|| Error::Accel("a sealed chunk's pack is gone".into()))?;
        if p.ids.get(p.blobs.len()) != Some(&blob.id) {
            return Err(Error::Accel(
                "sealed chunks out of their packs' order".into(),
            ));
        }
        p.blobs.push(blob);
    }
    let (full, open): (Vec<_>, Vec<_>) = std::mem::take(packs)
        .into_iter()
        .partition(|p| p.complete());
    *packs = open;
    Ok(full)
}

/// Every pack, whatever its size: what is left at the end of a backup.
/// Each must be complete (no plan of its chunks still being sealed).
pub(crate) fn take_all<W: WindowBytes>(packs: &mut Vec<WindowPack<W>>) -> Vec<WindowPack<W>> {
    std::mem::take(packs)
        .into_iter()
        .filter(|p| !p.ids.is_empty())
        .collect()
}
