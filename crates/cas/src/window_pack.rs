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
use crate::error::Result;
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

/// A pack being filled from read windows: blobs sealed, not yet written.
pub(crate) struct WindowPack<W: Send> {
    pack_id: [u8; 32],
    blobs: Vec<Blob<W>>,
    /// Stored bytes and tags so far.
    bytes: usize,
}

impl<W: WindowBytes> WindowPack<W> {
    fn new() -> WindowPack<W> {
        WindowPack {
            pack_id: crate::repo::new_id(),
            blobs: Vec::new(),
            bytes: 0,
        }
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = [u8; 32]> + '_ {
        self.blobs.iter().map(|b| b.id)
    }

    /// Seals its header and writes the pack where its blobs lie; returns
    /// its name, its length and its entries.
    pub(crate) fn write(self, repo: &Repository) -> Result<(String, u64, Vec<BlobEntry>)> {
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

/// Tags of a pack's blobs, by blob index in the window.
type Tags = Vec<(usize, [u8; 16])>;

/// A new chunk of a window: its id, raw length, its range in the window,
/// and its compressed bytes where compression pays (then stored instead).
pub(crate) struct Fresh {
    pub id: [u8; 32],
    pub raw_len: u32,
    pub range: Range<usize>,
    pub compressed: Option<Vec<u8>>,
}

/// A window's new chunks go into packs: into `open` (the pack being
/// filled, started when `None`) and packs after it. Each chunk is sealed
/// where it lies in `window`, or, when `hold` is false, in a copy of its
/// own so that the window is not lent out (a window holding few new bytes
/// would otherwise stay out until a pack fills, and the reader would run
/// out of windows); compressed chunks in their own buffers. Returns the
/// packs that reached their target, to be written; `open` keeps the rest.
pub(crate) fn add_window<W: WindowBytes>(
    repo: &Repository,
    mut window: Lease<W>,
    fresh: Vec<Fresh>,
    hold: bool,
    open: &mut Option<WindowPack<W>>,
) -> Result<Vec<WindowPack<W>>> {
    // Number every blob first: (pack, ordinal) fixes its key and nonce.
    let mut packs: Vec<WindowPack<W>> = vec![open.take().unwrap_or_else(WindowPack::new)];
    let mut counts = vec![packs[0].blobs.len()];
    let mut place: Vec<(usize, u32)> = Vec::with_capacity(fresh.len());
    for f in &fresh {
        if packs[packs.len() - 1].bytes >= PACK_TARGET {
            packs.push(WindowPack::new());
            counts.push(0);
        }
        let p = packs.len() - 1;
        let stored = f.compressed.as_ref().map_or(f.range.len(), |c| c.len());
        packs[p].bytes += stored + TAG_LEN;
        place.push((p, counts[p] as u32));
        counts[p] += 1;
    }
    let flags = |f: &Fresh| {
        if f.compressed.is_some() {
            pack::FLAG_ZSTD
        } else {
            0
        }
    };
    let aads: Vec<Vec<u8>> = fresh
        .iter()
        .map(|f| blob_aad(&f.id, f.raw_len, flags(f)))
        .collect();
    let metas: Vec<([u8; 32], u32, u8, Range<usize>)> = fresh
        .iter()
        .map(|f| (f.id, f.raw_len, flags(f), f.range.clone()))
        .collect();
    // The bytes each blob is sealed in: its compressed bytes, a copy of its
    // piece of the window, or (`None`) that piece itself.
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
        // Disjoint pieces of the window, in order, for blobs sealed there.
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
        // One seal job per pack (each pack its own key), the packs at once.
        let mut groups: Vec<Vec<(usize, CipherItem<'_>)>> =
            (0..packs.len()).map(|_| Vec::new()).collect();
        for (k, (d, aad)) in data.into_iter().zip(&aads).enumerate() {
            let (p, ordinal) = place[k];
            groups[p].push((
                k,
                CipherItem {
                    nonce: blob_nonce(ordinal),
                    aad,
                    data: d,
                },
            ));
        }
        let ids: Vec<[u8; 32]> = packs.iter().map(|p| p.pack_id).collect();
        let sealed: Vec<Result<Tags>> = groups
            .into_par_iter()
            .zip(ids)
            .map(|(group, pack_id)| {
                if group.is_empty() {
                    return Ok(Vec::new());
                }
                let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
                let (ks, items): (Vec<usize>, Vec<CipherItem<'_>>) = group.into_iter().unzip();
                let t = accel_jobs::seal(repo.accel(), &key, items)?;
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
    for (k, ((id, raw_len, flags, range), o)) in metas.into_iter().zip(owned).enumerate() {
        let stored = match o {
            Some(v) => Stored::Owned(v),
            None => Stored::InWindow(lease.clone(), range),
        };
        packs[place[k].0].blobs.push(Blob {
            id,
            raw_len,
            flags,
            stored,
            tag: tags[k],
        });
    }
    let last = packs.pop().unwrap_or_else(WindowPack::new);
    if last.bytes < PACK_TARGET {
        *open = Some(last);
    } else {
        packs.push(last);
    }
    packs.retain(|p| !p.blobs.is_empty());
    Ok(packs)
}
