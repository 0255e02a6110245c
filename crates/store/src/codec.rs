//! The sealing layer: the one place through which every block of every file
//! is written and read. An unencrypted store appends a masked CRC32C over
//! (context ‖ payload); an encrypted one seals with AES-256-GCM through
//! gvault-accel ([`crate::crypto::GcmCodec`]), with the same context as
//! associated data and (file number ‖ block number) as the nonce. Callers
//! hand over a whole batch (all blocks of a table, all frames of a group
//! commit) because that batch becomes one accelerator job.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::format::FORMAT_VERSION;
use crate::lock_order::{Rank, RankedMutex};

/// Data keys that files being written are sealed under, with how many such
/// files each has. A re-encryption pass never retires a pinned key: a flush
/// or compaction reads the current key when it seals a table and installs
/// the table in the version only later, so between the two the table is on
/// no list a pass can see (a retired key there made the store unopenable).
#[derive(Debug)]
pub struct KeyPins(RankedMutex<BTreeMap<u32, usize>>);

impl Default for KeyPins {
    fn default() -> KeyPins {
        KeyPins(RankedMutex::new(Rank::KeyPins, BTreeMap::new()))
    }
}

impl KeyPins {
    /// Pins `id`; the caller makes reading the current key and this call
    /// one step with respect to rotations (see `GcmCodec::pin_key`).
    pub fn pin(self: &Arc<Self>, id: u32) -> KeyPin {
        *self.0.lock().entry(id).or_default() += 1;
        KeyPin {
            id,
            pins: Some(self.clone()),
        }
    }

    /// The keys pinned now.
    pub fn pinned(&self) -> Vec<u32> {
        self.0.lock().keys().copied().collect()
    }
}

/// The data key a new file is sealed under, kept from the moment the key is
/// read until the file is on a list that re-encryption reads (the version,
/// or the current manifest); dropping it releases the key.
#[derive(Debug)]
pub struct KeyPin {
    id: u32,
    pins: Option<Arc<KeyPins>>,
}

impl KeyPin {
    /// A key nothing can retire (key 0: CRC32C).
    pub fn fixed(id: u32) -> KeyPin {
        KeyPin { id, pins: None }
    }

    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for KeyPin {
    fn drop(&mut self) {
        if let Some(p) = &self.pins {
            let mut m = p.0.lock();
            if let Some(n) = m.get_mut(&self.id) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.id);
                }
            }
        }
    }
}

/// What a block is; bound into its seal so a block cannot be moved to a place
/// where it would be read as something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    Data = 1,
    Index = 2,
    Filter = 3,
    Footer = 4,
    LogCommit = 5,
    LogValue = 6,
    ManifestEdit = 7,
    Pointer = 8,
}

impl BlockKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => BlockKind::Data,
            2 => BlockKind::Index,
            3 => BlockKind::Filter,
            4 => BlockKind::Footer,
            5 => BlockKind::LogCommit,
            6 => BlockKind::LogValue,
            7 => BlockKind::ManifestEdit,
            8 => BlockKind::Pointer,
            _ => return None,
        })
    }
}

/// Where a block belongs. Sealing binds all of it, so a block copied to
/// another file, offset or block number, or read as another kind, fails to
/// open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockContext {
    /// The data key named by the file's header (0: none). Not part of the
    /// bound bytes: it selects the key, which binds it.
    pub key_id: u32,
    pub file_number: u64,
    pub block_number: u32,
    pub offset: u64,
    pub kind: BlockKind,
}

pub const CONTEXT_LEN: usize = 23;

impl BlockContext {
    /// The bytes bound into the seal: format version (u16), kind (u8), file
    /// number (u64), block number (u32), offset (u64), all little-endian.
    pub fn bound_bytes(&self) -> [u8; CONTEXT_LEN] {
        let mut b = [0u8; CONTEXT_LEN];
        b[0..2].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[2] = self.kind as u8;
        b[3..11].copy_from_slice(&self.file_number.to_le_bytes());
        b[11..15].copy_from_slice(&self.block_number.to_le_bytes());
        b[15..23].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
}

/// Why a block would not open (a checksum or tag mismatch, a short block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenError(pub String);

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a batch could not be re-sealed: block `block` of the batch would not
/// open, or the new seals could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResealError {
    Open { block: usize, reason: OpenError },
    Seal(SealError),
}

/// One block to re-seal in place: `sealed` holds payload ‖ seal under
/// `from`; afterwards it holds the same payload sealed under `to`. The
/// length does not change (a codec's overhead is fixed), so a file can be
/// re-sealed with every offset where it was.
pub struct Reseal<'a> {
    pub from: BlockContext,
    pub to: BlockContext,
    pub sealed: &'a mut [u8],
}

/// One block to seal in place: `block` holds the payload followed by
/// room for the seal (the codec's overhead), which sealing fills.
pub struct SealSlot<'a> {
    pub ctx: BlockContext,
    pub block: &'a mut [u8],
}

impl SealSlot<'_> {
    /// Splits the block into (payload, room for the seal).
    pub(crate) fn split(&mut self, overhead: usize) -> Result<(&mut [u8], &mut [u8]), SealError> {
        let n = self.block.len().checked_sub(overhead).ok_or_else(|| {
            SealError(format!(
                "a block of {} bytes has no room for a {overhead}-byte seal",
                self.block.len()
            ))
        })?;
        Ok(self.block.split_at_mut(n))
    }
}

/// One sealed block to open in place: payload ‖ seal, under `ctx`.
pub struct OpenSlot<'a> {
    pub ctx: BlockContext,
    pub sealed: &'a mut [u8],
}

/// Why a batch could not be sealed (the accelerator refused the job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealError(pub String);

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub trait BlockCodec: Send + Sync + fmt::Debug {
    /// The data-key id to write in the header of each new file (0: no
    /// encryption). It changes when the data key rotates, so a writer reads
    /// it once per file and seals every block of that file under it.
    fn key_id(&self) -> u32;

    /// The current data key, pinned: a writer takes this once per new file
    /// and holds it until the file is installed (see [`KeyPins`]).
    fn pin_key(&self) -> KeyPin {
        KeyPin::fixed(self.key_id())
    }

    /// Whether blocks under this data key can be opened.
    fn knows_key(&self, key_id: u32) -> bool;

    /// Bytes a sealed block has beyond its payload; fixed per codec so that
    /// offsets of a whole batch are known before sealing.
    fn overhead(&self) -> usize;

    /// Seals a whole batch in place, in the caller's buffers (one
    /// accelerator job): each block is payload ‖ `overhead()` spare bytes,
    /// which receive the seal. Every context names the same key.
    fn seal_slots(&self, blocks: &mut [SealSlot<'_>]) -> Result<(), SealError>;

    /// Seals a whole batch of owned payloads: each gets its seal appended.
    fn seal_batch(&self, blocks: &mut [(BlockContext, Vec<u8>)]) -> Result<(), SealError> {
        let overhead = self.overhead();
        let mut slots: Vec<SealSlot<'_>> = blocks
            .iter_mut()
            .map(|(ctx, payload)| {
                payload.resize(payload.len() + overhead, 0);
                SealSlot {
                    ctx: *ctx,
                    block: payload.as_mut_slice(),
                }
            })
            .collect();
        self.seal_slots(&mut slots)
    }

    /// Checks and strips the seal of one block.
    fn open(&self, ctx: &BlockContext, mut sealed: Vec<u8>) -> Result<Vec<u8>, OpenError> {
        let n = self.open_in_place(ctx, &mut sealed)?;
        sealed.truncate(n);
        Ok(sealed)
    }

    /// Checks the seal of one block held in the caller's buffer and turns
    /// its payload into plaintext where it lies; returns the payload's
    /// length (the payload is `sealed[..len]`). Readers that keep a buffer
    /// of their own use this to avoid allocating and copying per block.
    fn open_in_place(&self, ctx: &BlockContext, sealed: &mut [u8]) -> Result<usize, OpenError>;

    /// Opens many blocks in place, each independently: result i is block
    /// i's payload length or why it would not open, so one damaged block
    /// fails only itself. This default opens them one by one; an encrypting
    /// codec overrides it to run one accelerator job over all of them
    /// (spread over cores), which is what read-ahead is for.
    fn open_many_in_place(&self, blocks: &mut [OpenSlot<'_>]) -> Vec<Result<usize, OpenError>> {
        blocks
            .iter_mut()
            .map(|b| self.open_in_place(&b.ctx, b.sealed))
            .collect()
    }

    /// Whether [`Self::open_many_in_place`] spreads a batch over cores, so
    /// that reading ahead pays off (CRC32C is cheaper than the hand-off).
    fn opens_in_parallel(&self) -> bool {
        false
    }

    /// Re-seals a batch in place (key rotation). This default copies each
    /// block; codecs override it to run one open job and one seal job over
    /// the caller's buffer.
    fn reseal_batch(&self, blocks: &mut [Reseal<'_>]) -> Result<(), ResealError> {
        let mut batch = Vec::with_capacity(blocks.len());
        for (i, b) in blocks.iter().enumerate() {
            let payload = self
                .open(&b.from, b.sealed.to_vec())
                .map_err(|reason| ResealError::Open { block: i, reason })?;
            batch.push((b.to, payload));
        }
        self.seal_batch(&mut batch).map_err(ResealError::Seal)?;
        for (b, (_, sealed)) in blocks.iter_mut().zip(batch) {
            if sealed.len() != b.sealed.len() {
                return Err(ResealError::Seal(SealError(
                    "a re-sealed block changed length".into(),
                )));
            }
            b.sealed.copy_from_slice(&sealed);
        }
        Ok(())
    }
}

/// Integrity without secrecy: a masked CRC32C over context and payload.
#[derive(Debug, Default, Clone, Copy)]
pub struct Crc32cCodec;

/// LevelDB's mask: a CRC of bytes that contain CRCs is otherwise weak.
const MASK_DELTA: u32 = 0xa282_ead8;

fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

fn block_crc(ctx: &BlockContext, payload: &[u8]) -> u32 {
    mask(crc32c::crc32c_append(
        crc32c::crc32c(&ctx.bound_bytes()),
        payload,
    ))
}

impl Crc32cCodec {
    pub const fn overhead_len(&self) -> usize {
        4
    }
}

impl BlockCodec for Crc32cCodec {
    fn key_id(&self) -> u32 {
        0
    }

    fn knows_key(&self, key_id: u32) -> bool {
        key_id == 0
    }

    fn overhead(&self) -> usize {
        self.overhead_len()
    }

    fn seal_slots(&self, blocks: &mut [SealSlot<'_>]) -> Result<(), SealError> {
        for slot in blocks.iter_mut() {
            let ctx = slot.ctx;
            let (payload, seal) = slot.split(4)?;
            seal.copy_from_slice(&block_crc(&ctx, payload).to_le_bytes());
        }
        Ok(())
    }

    fn open_in_place(&self, ctx: &BlockContext, sealed: &mut [u8]) -> Result<usize, OpenError> {
        let n = sealed
            .len()
            .checked_sub(4)
            .ok_or_else(|| OpenError(format!("block of {} bytes is too short", sealed.len())))?;
        let stored = u32::from_le_bytes(sealed[n..].try_into().expect("4 bytes"));
        if stored != block_crc(ctx, &sealed[..n]) {
            return Err(OpenError(format!(
                "checksum mismatch for {:?} block (damaged, moved or swapped)",
                ctx.kind
            )));
        }
        Ok(n)
    }

    fn reseal_batch(&self, blocks: &mut [Reseal<'_>]) -> Result<(), ResealError> {
        for (i, b) in blocks.iter_mut().enumerate() {
            let short = || ResealError::Open {
                block: i,
                reason: OpenError(format!("block of {} bytes is too short", b.sealed.len())),
            };
            let n = b.sealed.len().checked_sub(4).ok_or_else(short)?;
            let (payload, crc) = b.sealed.split_at_mut(n);
            if u32::from_le_bytes((&*crc).try_into().expect("4 bytes"))
                != block_crc(&b.from, payload)
            {
                return Err(ResealError::Open {
                    block: i,
                    reason: OpenError(format!(
                        "checksum mismatch for {:?} block (damaged, moved or swapped)",
                        b.from.kind
                    )),
                });
            }
            crc.copy_from_slice(&block_crc(&b.to, payload).to_le_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(block: u32) -> BlockContext {
        BlockContext {
            key_id: 0,
            file_number: 7,
            block_number: block,
            offset: 100,
            kind: BlockKind::Data,
        }
    }

    #[test]
    fn seal_open_round_trip_and_binding() {
        let codec = Crc32cCodec;
        let mut batch = vec![(ctx(0), b"hello".to_vec()), (ctx(1), Vec::new())];
        codec.seal_batch(&mut batch).unwrap();
        assert_eq!(batch[0].1.len(), 5 + codec.overhead());
        assert_eq!(codec.open(&ctx(0), batch[0].1.clone()).unwrap(), b"hello");
        assert_eq!(codec.open(&ctx(1), batch[1].1.clone()).unwrap(), b"");
        // Same bytes, another place: rejected.
        assert!(codec.open(&ctx(1), batch[0].1.clone()).is_err());
        let mut other_kind = ctx(0);
        other_kind.kind = BlockKind::Index;
        assert!(codec.open(&other_kind, batch[0].1.clone()).is_err());
        let mut flipped = batch[0].1.clone();
        flipped[2] ^= 0x10;
        assert!(codec.open(&ctx(0), flipped).is_err());
        assert!(codec.open(&ctx(0), vec![1, 2]).is_err());
    }

    #[test]
    fn crc_reseal_rebinds_and_checks() {
        let codec = Crc32cCodec;
        let mut batch = vec![(ctx(0), b"hello".to_vec())];
        codec.seal_batch(&mut batch).unwrap();
        let mut buf = batch[0].1.clone();
        let to = BlockContext {
            offset: 999,
            ..ctx(0)
        };
        let mut blocks = [Reseal {
            from: ctx(0),
            to,
            sealed: &mut buf,
        }];
        codec.reseal_batch(&mut blocks).unwrap();
        assert_eq!(codec.open(&to, buf.clone()).unwrap(), b"hello");
        assert!(codec.open(&ctx(0), buf.clone()).is_err());
        // Sealed under `to` now, so re-sealing from ctx(0) again fails.
        let mut blocks = [Reseal {
            from: ctx(0),
            to,
            sealed: &mut buf,
        }];
        assert!(matches!(
            codec.reseal_batch(&mut blocks),
            Err(ResealError::Open { block: 0, .. })
        ));
    }
}
