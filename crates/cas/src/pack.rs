//! Packs: many sealed chunks in one object (docs/repository.md §4).
//!
//! `blob_0 ‖ … ‖ blob_{n-1} ‖ header ‖ header_len (u32) ‖ "GVCASPK1"`, every
//! blob and the header sealed with AES-256-GCM under the pack's own key
//! (derived from K and the pack id). Blob i has nonce i; the header has
//! nonce all-ones. A blob's associated data binds its chunk id, raw length
//! and flags, so a blob moved within or between packs, or a header entry
//! pointing at another blob, fails to open.

use crate::accel_jobs::{self, CipherItem, TAG_LEN};
use crate::backend::Kind;
use crate::coding::{put_u32, put_u8, Decoder};
use crate::error::{Error, Result};
use crate::repo::{ObjectKind, Repository};

pub const PACK_MAGIC: [u8; 8] = *b"GVCASPK1";
pub(crate) const TRAILER_LEN: usize = 12;
pub(crate) const ENTRY_LEN: usize = 32 + 4 + 4 + 4 + 1;
pub const HEADER_NONCE: [u8; 12] = [0xff; 12];
/// Flag bit: the chunk is zstd-compressed.
pub const FLAG_ZSTD: u8 = 1;
/// A pack is written once its blobs reach this many bytes.
pub const PACK_TARGET: usize = 16 << 20;

/// Where a chunk lives in its pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobEntry {
    pub id: [u8; 32],
    /// Offset of the sealed blob in the pack.
    pub offset: u32,
    /// Sealed length: stored bytes plus the 16-byte tag.
    pub sealed_len: u32,
    /// The chunk's plaintext length.
    pub raw_len: u32,
    pub flags: u8,
}

pub fn blob_nonce(i: u32) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&i.to_le_bytes());
    n
}

pub fn blob_aad(id: &[u8; 32], raw_len: u32, flags: u8) -> Vec<u8> {
    let mut a = b"gvault-cas blob".to_vec();
    a.extend_from_slice(id);
    put_u32(&mut a, raw_len);
    put_u8(&mut a, flags);
    a
}

pub(crate) fn header_aad(pack_id: &[u8; 32]) -> Vec<u8> {
    let mut a = b"gvault-cas pack header".to_vec();
    a.extend_from_slice(pack_id);
    a
}

/// A gathered chunk's id, raw length, flags and stored length.
type BlobKey = ([u8; 32], u32, u8, usize);

/// Chunks gathered for one pack, not yet sealed: laid out as the pack's
/// body already (stored bytes, then room for the tag), so that sealing
/// works in place and the pack's bytes are never copied again.
#[derive(Default)]
pub struct PackBuilder {
    /// The body's bytes are `body[..used]`; past that, bytes of a pack
    /// written before (a reused buffer is not cleared: every byte up to
    /// `used` is written before it is read).
    body: Vec<u8>,
    used: usize,
    blobs: Vec<BlobKey>,
}

/// A chunk for [`PackBuilder::add_many`]: id, raw length, flags, stored
/// bytes.
pub type NewBlob<'a> = ([u8; 32], u32, u8, &'a [u8]);

/// From this many bytes, a batch's copies into the pack run on every core:
/// one core copies 4-5 GB/s, and a backup passes every new byte through
/// here on one thread.
const PARALLEL_COPY_FROM: usize = 1 << 20;

impl PackBuilder {
    /// A builder that fills `body`, a buffer of a pack written before: its
    /// pages are mapped already, where a fresh buffer of 16 MiB costs a
    /// page fault and a page clear every 4 KiB.
    pub fn with_buffer(body: Vec<u8>) -> PackBuilder {
        PackBuilder {
            body,
            used: 0,
            blobs: Vec::new(),
        }
    }

    pub fn add(&mut self, id: [u8; 32], raw_len: u32, flags: u8, stored: &[u8]) {
        self.add_many(&[(id, raw_len, flags, stored)]);
    }

    /// Adds chunks in order, their bytes copied in parallel when many.
    pub fn add_many(&mut self, blobs: &[NewBlob<'_>]) {
        use rayon::prelude::*;
        let total: usize = blobs.iter().map(|b| b.3.len() + TAG_LEN).sum();
        let end = self.used + total;
        if self.body.len() < end {
            // Room for the chunks that cross the target and the trailer,
            // so the body is not moved while it fills or at sealing.
            if self.body.capacity() < end {
                let want = end.max(PACK_TARGET) + total + (64 << 10);
                self.body.reserve(want - self.body.len());
            }
            self.body.resize(end, 0);
        }
        let mut rest = &mut self.body[self.used..end];
        let mut pieces = Vec::with_capacity(blobs.len());
        for b in blobs {
            let (piece, after) = std::mem::take(&mut rest).split_at_mut(b.3.len() + TAG_LEN);
            pieces.push((&mut piece[..b.3.len()], b.3));
            rest = after;
        }
        if total >= PARALLEL_COPY_FROM && pieces.len() > 1 {
            pieces
                .into_par_iter()
                .for_each(|(to, from)| to.copy_from_slice(from));
        } else {
            pieces
                .into_iter()
                .for_each(|(to, from)| to.copy_from_slice(from));
        }
        self.used = end;
        self.blobs
            .extend(blobs.iter().map(|b| (b.0, b.1, b.2, b.3.len())));
    }
    pub fn bytes(&self) -> usize {
        self.used
    }
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// Seals every blob in one accel job, writes the pack, and returns its
    /// name, its length and its entries.
    pub fn write(self, repo: &Repository) -> Result<(String, u64, Vec<BlobEntry>)> {
        let sealed = self.seal(repo)?;
        repo.backend.put(Kind::Pack, &sealed.name, &sealed.bytes)?;
        Ok((sealed.name, sealed.bytes.len() as u64, sealed.entries))
    }

    /// Seals every blob in one accel job, in place, and appends the sealed
    /// header and trailer, without writing the pack.
    pub fn seal(self, repo: &Repository) -> Result<SealedPack> {
        let pack_id = crate::repo::new_id();
        let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
        let PackBuilder {
            mut body,
            used,
            blobs,
        } = self;
        body.truncate(used);
        if body.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument("pack larger than 4 GiB".into()));
        }
        let aads: Vec<Vec<u8>> = blobs
            .iter()
            .map(|(id, raw, fl, _)| blob_aad(id, *raw, *fl))
            .collect();
        let mut entries = Vec::with_capacity(blobs.len());
        let mut items = Vec::with_capacity(blobs.len());
        let mut tag_slots = Vec::with_capacity(blobs.len());
        let mut rest = body.as_mut_slice();
        let mut offset = 0usize;
        for (i, ((id, raw_len, flags, len), aad)) in blobs.iter().zip(&aads).enumerate() {
            let (blob, after) = std::mem::take(&mut rest).split_at_mut(len + TAG_LEN);
            let (data, tag) = blob.split_at_mut(*len);
            items.push(CipherItem {
                nonce: blob_nonce(i as u32),
                aad,
                data,
            });
            tag_slots.push(tag);
            entries.push(BlobEntry {
                id: *id,
                offset: offset as u32,
                sealed_len: (len + TAG_LEN) as u32,
                raw_len: *raw_len,
                flags: *flags,
            });
            offset += len + TAG_LEN;
            rest = after;
        }
        let tags = accel_jobs::seal(repo.accel(), &key, items)?;
        for (slot, tag) in tag_slots.into_iter().zip(&tags) {
            slot.copy_from_slice(tag);
        }
        finish(repo, pack_id, body, entries)
    }
}

/// Appends the sealed header and the trailer to a pack's sealed blobs.
fn finish(
    repo: &Repository,
    pack_id: [u8; 32],
    mut body: Vec<u8>,
    entries: Vec<BlobEntry>,
) -> Result<SealedPack> {
    body.extend_from_slice(&trailer(repo, &pack_id, &entries)?);
    Ok(SealedPack {
        name: hex::encode(pack_id),
        bytes: body,
        entries,
    })
}

/// What follows a pack's sealed blobs: the sealed header, its length and
/// the magic.
fn trailer(repo: &Repository, pack_id: &[u8; 32], entries: &[BlobEntry]) -> Result<Vec<u8>> {
    let key = repo.keys.object_key(ObjectKind::Pack, pack_id);
    let mut header = Vec::with_capacity(4 + entries.len() * ENTRY_LEN);
    put_u32(&mut header, entries.len() as u32);
    for e in entries {
        header.extend_from_slice(&e.id);
        put_u32(&mut header, e.offset);
        put_u32(&mut header, e.sealed_len);
        put_u32(&mut header, e.raw_len);
        put_u8(&mut header, e.flags);
    }
    let sealed = accel_jobs::seal_one(
        repo.accel(),
        &key,
        HEADER_NONCE,
        &header_aad(pack_id),
        header,
    )?;
    let mut out = Vec::with_capacity(sealed.len() + TRAILER_LEN);
    out.extend_from_slice(&sealed);
    put_u32(&mut out, sealed.len() as u32);
    out.extend_from_slice(&PACK_MAGIC);
    Ok(out)
}

/// A blob sealed under its pack's key (nonce = its position, AAD =
/// [`blob_aad`]), not yet laid out.
pub struct SealedBlob<'a> {
    pub id: [u8; 32],
    pub raw_len: u32,
    pub flags: u8,
    pub ciphertext: &'a [u8],
    pub tag: [u8; 16],
}

/// Lays out a pack from blobs already sealed under the key of `pack_id`
/// (on a GPU where the chunks live) and seals its header. `pack_id` must
/// be fresh ([`crate::repo::new_id`]) and its key used for these blobs only
/// (docs/repository.md §3).
pub fn assemble(
    repo: &Repository,
    pack_id: [u8; 32],
    blobs: &[SealedBlob<'_>],
) -> Result<SealedPack> {
    let (entries, trailer) = layout(repo, &pack_id, blobs)?;
    let mut bytes = Vec::with_capacity(pack_len(&entries, &trailer));
    for b in blobs {
        bytes.extend_from_slice(b.ciphertext);
        bytes.extend_from_slice(&b.tag);
    }
    bytes.extend_from_slice(&trailer);
    Ok(SealedPack {
        name: hex::encode(pack_id),
        bytes,
        entries,
    })
}

/// The entries of a pack of `blobs` and the bytes that follow them (the
/// pack is each blob's ciphertext and tag in order, then the trailer):
/// what [`assemble`] concatenates, for writers that write the pieces
/// where they lie instead.
pub fn layout(
    repo: &Repository,
    pack_id: &[u8; 32],
    blobs: &[SealedBlob<'_>],
) -> Result<(Vec<BlobEntry>, Vec<u8>)> {
    let mut entries = Vec::with_capacity(blobs.len());
    let mut offset = 0usize;
    for b in blobs {
        entries.push(BlobEntry {
            id: b.id,
            offset: u32::try_from(offset)
                .map_err(|_| Error::InvalidArgument("pack larger than 4 GiB".into()))?,
            sealed_len: (b.ciphertext.len() + TAG_LEN) as u32,
            raw_len: b.raw_len,
            flags: b.flags,
        });
        offset += b.ciphertext.len() + TAG_LEN;
    }
    let trailer = trailer(repo, pack_id, &entries)?;
    Ok((entries, trailer))
}

/// A pack's length from its entries and trailer.
pub fn pack_len(entries: &[BlobEntry], trailer: &[u8]) -> usize {
    entries.iter().map(|e| e.sealed_len as usize).sum::<usize>() + trailer.len()
}

/// A pack ready to be written.
pub struct SealedPack {
    pub name: String,
    pub bytes: Vec<u8>,
    pub entries: Vec<BlobEntry>,
}

/// Reads and opens a pack's header (from the whole pack's bytes, or by
/// ranged reads when `bytes` is `None`).
pub fn read_header(repo: &Repository, name: &str, bytes: Option<&[u8]>) -> Result<Vec<BlobEntry>> {
    let what = || format!("pack {name}");
    let pack_id = crate::repo::parse_id(name)
        .ok_or_else(|| Error::corrupt(what(), "name is not a pack id"))?;
    let size = match bytes {
        Some(b) => b.len() as u64,
        None => repo.backend.size(Kind::Pack, name)?,
    };
    if size < TRAILER_LEN as u64 {
        return Err(Error::corrupt(
            what(),
            format!("{size} bytes, shorter than its trailer (truncated)"),
        ));
    }
    let get = |off: u64, len: usize| -> Result<Vec<u8>> {
        match bytes {
            Some(b) => Ok(b[off as usize..off as usize + len].to_vec()),
            None => repo.backend.get_range(Kind::Pack, name, off, len),
        }
    };
    let trailer = get(size - TRAILER_LEN as u64, TRAILER_LEN)?;
    if trailer[4..] != PACK_MAGIC {
        return Err(Error::corrupt(
            what(),
            "bad trailer magic (truncated or not a pack)",
        ));
    }
    let hlen = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) as u64;
    if hlen + TRAILER_LEN as u64 > size {
        return Err(Error::corrupt(
            what(),
            "header length past the start of the pack",
        ));
    }
    let hoff = size - TRAILER_LEN as u64 - hlen;
    let sealed = get(hoff, hlen as usize)?;
    let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
    let header = accel_jobs::open_one(
        repo.accel(),
        &key,
        HEADER_NONCE,
        &header_aad(&pack_id),
        &sealed,
    )?
    .ok_or_else(|| Error::corrupt(what(), "header does not authenticate"))?;
    let bad = || Error::corrupt(what(), "malformed header");
    let mut d = Decoder::new(&header);
    let n = d.u32().ok_or_else(bad)? as usize;
    if d.remaining() != n * ENTRY_LEN {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let e = BlobEntry {
            id: d.array().ok_or_else(bad)?,
            offset: d.u32().ok_or_else(bad)?,
            sealed_len: d.u32().ok_or_else(bad)?,
            raw_len: d.u32().ok_or_else(bad)?,
            flags: d.u8().ok_or_else(bad)?,
        };
        if e.offset as u64 + e.sealed_len as u64 > hoff || (e.sealed_len as usize) < TAG_LEN {
            return Err(bad());
        }
        out.push(e);
    }
    Ok(out)
}

/// Opens ciphertexts of blobs of `pack` in place, each with its tag: per
/// blob, whether it authenticated (a failed one's bytes are wiped).
fn open_items(
    repo: &Repository,
    pack: &str,
    blobs: &[(u32, BlobEntry)],
    datas: Vec<&mut [u8]>,
    tags: Vec<[u8; 16]>,
) -> Result<Vec<bool>> {
    let pack_id = crate::repo::parse_id(pack)
        .ok_or_else(|| Error::corrupt(format!("pack {pack}"), "bad name"))?;
    let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
    let aads: Vec<Vec<u8>> = blobs
        .iter()
        .map(|(_, e)| blob_aad(&e.id, e.raw_len, e.flags))
        .collect();
    let items = blobs
        .iter()
        .zip(datas.into_iter().zip(tags))
        .zip(&aads)
        .map(|(((i, _), (data, tag)), aad)| {
            (
                CipherItem {
                    nonce: blob_nonce(*i),
                    aad,
                    data,
                },
                tag,
            )
        })
        .collect();
    accel_jobs::open(repo.accel(), &key, items)
}

/// Checks opened plaintexts against their chunk ids: `plain[k]` is blob
/// k's plaintext, or why it has none; a mismatch becomes an error.
fn check_ids<B: AsRef<[u8]>>(
    repo: &Repository,
    blobs: &[(u32, BlobEntry)],
    plain: &mut [std::result::Result<B, String>],
) -> Result<()> {
    let ok_bufs: Vec<&[u8]> = plain
        .iter()
        .filter_map(|p| p.as_ref().ok().map(|b| b.as_ref()))
        .collect();
    let ids = accel_jobs::keyed_digests(repo.accel(), &repo.keys.chunk_id, &ok_bufs)?;
    let mut ids = ids.into_iter();
    for (p, (_, e)) in plain.iter_mut().zip(blobs) {
        if p.is_ok() && ids.next() != Some(e.id) {
            *p = Err("content does not match its chunk id".into());
        }
    }
    Ok(())
}

/// Opens, decompresses and checks a batch of blobs of one pack. Per blob:
/// the plaintext, or why it could not be had.
pub fn open_blobs(
    repo: &Repository,
    pack: &str,
    blobs: &[(u32, BlobEntry)],
    mut sealed: Vec<Vec<u8>>,
) -> Result<Vec<std::result::Result<Vec<u8>, String>>> {
    let short: Vec<bool> = sealed.iter().map(|b| b.len() < TAG_LEN).collect();
    let mut whole = Vec::with_capacity(blobs.len());
    let (mut datas, mut tags) = (Vec::new(), Vec::new());
    for (k, buf) in sealed.iter_mut().enumerate() {
        if short[k] {
            continue;
        }
        let split = buf.len() - TAG_LEN;
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&buf[split..]);
        whole.push(blobs[k]);
        datas.push(&mut buf[..split]);
        tags.push(tag);
    }
    let oks = open_items(repo, pack, &whole, datas, tags)?;
    let mut oks = oks.into_iter();
    let mut plain: Vec<std::result::Result<Vec<u8>, String>> = Vec::with_capacity(blobs.len());
    for (k, (_, e)) in blobs.iter().enumerate() {
        let mut buf = std::mem::take(&mut sealed[k]);
        if short[k] || !oks.next().unwrap_or(false) {
            plain.push(Err(NOT_AUTHENTIC.into()));
            continue;
        }
        buf.truncate(buf.len() - TAG_LEN);
        if e.raw_len > repo.config.chunker.max_len() {
            // Decompression reserves the recorded length up front: a
            // damaged one must not reserve 4 GiB. No chunk is longer than
            // the repository's chunker makes them.
            plain.push(Err("longer than the repository's largest chunk".into()));
            continue;
        }
        if e.flags & FLAG_ZSTD != 0 {
            match zstd::bulk::decompress(&buf, e.raw_len as usize) {
                Ok(b) if b.len() == e.raw_len as usize => plain.push(Ok(b)),
                _ => plain.push(Err("does not decompress".into())),
            }
        } else if buf.len() == e.raw_len as usize {
            plain.push(Ok(buf));
        } else {
            plain.push(Err("length differs from the index".into()));
        }
    }
    // Every chunk's id is checked after opening it.
    check_ids(repo, blobs, &mut plain)?;
    Ok(plain)
}

const NOT_AUTHENTIC: &str = "does not authenticate (damaged or moved bytes)";

/// Whether a blob holds its chunk's ciphertext alone (not compressed, its
/// lengths consistent), so that it can be read and opened where its
/// plaintext belongs ([`open_blobs_in_place`]).
pub fn opens_in_place(e: &BlobEntry) -> bool {
    e.flags & FLAG_ZSTD == 0 && e.sealed_len as u64 == e.raw_len as u64 + TAG_LEN as u64
}

/// Opens and checks blobs of one pack (each [`opens_in_place`]) whose
/// ciphertexts were read into `bufs` (each exactly the blob's `raw_len`
/// bytes) and tags into `tags`: a restore reads a chunk straight into the
/// file it restores, so its bytes are copied once. Per blob, `Ok` when
/// `bufs[k]` now holds the chunk, or why not.
pub fn open_blobs_in_place(
    repo: &Repository,
    pack: &str,
    blobs: &[(u32, BlobEntry)],
    bufs: &mut [&mut [u8]],
    tags: Vec<[u8; 16]>,
) -> Result<Vec<std::result::Result<(), String>>> {
    if blobs.len() != bufs.len() || blobs.len() != tags.len() {
        return Err(Error::Accel(format!(
            "{} blobs, {} buffers and {} tags to open",
            blobs.len(),
            bufs.len(),
            tags.len()
        )));
    }
    for ((_, e), b) in blobs.iter().zip(bufs.iter()) {
        if !opens_in_place(e) || b.len() != e.raw_len as usize {
            return Err(Error::Accel(format!(
                "chunk {}: not a blob to open in place",
                hex::encode(e.id)
            )));
        }
    }
    let datas = bufs.iter_mut().map(|b| &mut **b).collect();
    let oks = open_items(repo, pack, blobs, datas, tags)?;
    let mut plain: Vec<std::result::Result<&[u8], String>> = bufs
        .iter()
        .zip(oks)
        .map(|(b, ok)| {
            if ok {
                Ok(&**b)
            } else {
                Err(NOT_AUTHENTIC.into())
            }
        })
        .collect();
    check_ids(repo, blobs, &mut plain)?;
    Ok(plain.into_iter().map(|p| p.map(|_| ())).collect())
}

/// Compresses a chunk with zstd when that saves at least 1/32 of it.
pub fn maybe_compress(data: &[u8]) -> Option<Vec<u8>> {
    if !sample_compresses(data) {
        return None;
    }
    let c = compress_at(3, data).ok()?;
    (c.len() + data.len() / 32 < data.len()).then_some(c)
}

/// zstd at `level` with this thread's compressor for that level: a fresh
/// one allocates and clears its tables on every call, which costs as much
/// as compressing a sample.
fn compress_at(level: i32, data: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::cell::RefCell;
    type Kept = RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>>;
    thread_local! {
        static KEPT: Kept = const { RefCell::new(Vec::new()) };
    }
    KEPT.with(|kept| {
        let mut kept = kept.try_borrow_mut().map_err(std::io::Error::other)?;
        let i = match kept.iter().position(|(l, _)| *l == level) {
            Some(i) => i,
            None => {
                kept.push((level, zstd::bulk::Compressor::new(level)?));
                kept.len() - 1
            }
        };
        kept[i].1.compress(data)
    })
}

/// Whether four 16 KiB samples spread over a large chunk save at least
/// 1/32 under zstd level 1: incompressible chunks (media, archives,
/// encrypted files, most model weights) then cost a twentieth of a full
/// compression attempt. Small chunks are always tried.
fn sample_compresses(data: &[u8]) -> bool {
    const PIECE: usize = 16 << 10;
    const PIECES: usize = 4;
    if data.len() < 4 * PIECES * PIECE {
        return true;
    }
    let step = (data.len() - PIECE) / (PIECES - 1);
    let mut sample = Vec::with_capacity(PIECES * PIECE);
    for i in 0..PIECES {
        sample.extend_from_slice(&data[i * step..i * step + PIECE]);
    }
    match compress_at(1, &sample) {
        Ok(c) => c.len() + sample.len() / 32 < sample.len(),
        Err(_) => true,
    }
}

impl PackBuilder {
    /// Ids of the chunks gathered so far.
    pub fn ids(&self) -> Vec<[u8; 32]> {
        self.blobs.iter().map(|(id, ..)| *id).collect()
    }
}
