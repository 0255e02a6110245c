//! AES-256-GCM sealing of blocks through the accelerator batch API.
//!
//! Nonce: file number (64 bits, big-endian) ‖ block number (32 bits). File
//! numbers are never reused and files are immutable once written, so a
//! (data key, nonce) pair seals one block, once (docs/format.md gives the
//! whole argument). Associated data: the block context's bound bytes
//! (format version, block kind, file number, block number, offset) followed
//! by the store id, so a block moved, swapped, replayed from another file or
//! copied from another store fails to open.
//!
//! The codec only builds jobs and hands them to its backend, whichever it
//! is: what runs on the calling thread and what is spread over threads or
//! sent to a GPU is the backend's choice (`gvault_accel::Backend`).

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use gvault_accel::{Aes256Key, Backend, DataMut, Job, Nonce96, OpenSegment, SealSegment, Tag};
use parking_lot::Mutex;
use smallvec::{smallvec, SmallVec};

use crate::codec::{
    BlockCodec, BlockContext, KeyPin, KeyPins, OpenError, OpenSlot, Reseal, ResealError, SealError,
    SealSlot, CONTEXT_LEN,
};

pub const TAG_LEN: usize = 16;
pub const STORE_ID_LEN: usize = 16;
const AAD_LEN: usize = CONTEXT_LEN + STORE_ID_LEN;

/// Called with (data-key id, nonce) before each block is sealed: for audits
/// and for the test that no pair is ever used twice.
pub type SealObserver = Arc<dyn Fn(u32, [u8; 12]) + Send + Sync>;

/// Seal jobs of up to this many blocks keep their associated data on the
/// stack.
const FEW_BLOCKS: usize = 4;

/// The data keys by id: a few (the current one, and older ones until
/// re-encryption retires them), so a list beats a hash map's lookup,
/// which every block seal and open pays.
#[derive(Clone)]
struct KeySet {
    current: u32,
    keys: Vec<(u32, Arc<Aes256Key>)>,
}

impl KeySet {
    fn get(&self, id: u32) -> Option<&Arc<Aes256Key>> {
        self.keys.iter().find(|(i, _)| *i == id).map(|(_, k)| k)
    }
}

pub struct GcmCodec {
    store_id: [u8; STORE_ID_LEN],
    /// Published for every seal and open to read in place (no lock word or
    /// reference count written per block: 16 threads opening blocks under
    /// one key contended on both); replaced under `keys_writer`.
    keys: ArcSwap<KeySet>,
    keys_writer: Mutex<()>,
    backend: Arc<dyn Backend>,
    observer: Option<SealObserver>,
    pins: Arc<KeyPins>,
}

impl fmt::Debug for GcmCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.keys.load();
        let mut ids: Vec<u32> = k.keys.iter().map(|(i, _)| *i).collect();
        ids.sort_unstable();
        f.debug_struct("GcmCodec")
            .field("backend", &self.backend.name())
            .field("current_key", &k.current)
            .field("key_ids", &ids)
            .finish_non_exhaustive()
    }
}

impl GcmCodec {
    pub fn new(
        store_id: [u8; STORE_ID_LEN],
        current: u32,
        keys: Vec<(u32, Aes256Key)>,
        backend: Arc<dyn Backend>,
        observer: Option<SealObserver>,
    ) -> Self {
        GcmCodec {
            store_id,
            keys: ArcSwap::from_pointee(KeySet {
                current,
                keys: keys.into_iter().map(|(i, k)| (i, Arc::new(k))).collect(),
            }),
            keys_writer: Mutex::new(()),
            backend,
            observer,
            pins: Arc::default(),
        }
    }

    /// Keys that files being written are sealed under (never retired).
    pub fn pinned_keys(&self) -> Vec<u32> {
        self.pins.pinned()
    }

    /// Makes `current` the key new files use and adds the keys it does not
    /// hold yet (after a rotation). Keys the registry has retired stay until
    /// the store closes: a reader that opened a file before its deletion may
    /// still read it. Writers that already started a file keep sealing it
    /// under the key they pinned.
    pub fn set_keys(&self, current: u32, keys: Vec<(u32, Aes256Key)>) {
        let _w = self.keys_writer.lock();
        let mut k = KeySet::clone(&self.keys.load());
        k.current = current;
        for (id, key) in keys {
            if k.get(id).is_none() {
                k.keys.push((id, Arc::new(key)));
            }
        }
        self.keys.store(Arc::new(k));
    }

    fn key(&self, id: u32) -> Option<Arc<Aes256Key>> {
        self.keys.load().get(id).cloned()
    }

    /// The key every context of a batch names (a batch is one job, under
    /// one key).
    fn batch_key<'a>(
        &self,
        mut ids: impl Iterator<Item = &'a BlockContext>,
    ) -> Result<Option<Arc<Aes256Key>>, String> {
        let Some(first) = ids.next().map(|c| c.key_id) else {
            return Ok(None);
        };
        if ids.any(|c| c.key_id != first) {
            return Err("a batch must use one data key".into());
        }
        self.key(first)
            .map(Some)
            .ok_or_else(|| format!("data key {first} is not in the key registry"))
    }

    /// Seals `blocks` in place as one accelerator job; each tag goes to
    /// the room at the end of its block.
    fn seal_job(
        &self,
        key: &Aes256Key,
        key_id: u32,
        blocks: &mut [SealSlot<'_>],
    ) -> Result<(), SealError> {
        let n = blocks.len();
        let refused = |e: gvault_accel::BlockError| {
            SealError(format!(
                "accelerator {} could not seal {n} blocks: {e}",
                self.backend.name()
            ))
        };
        // One block (a manifest edit, a pointer file): no segment list.
        if let [slot] = blocks {
            let nonce = Nonce96::from_parts(slot.ctx.file_number, slot.ctx.block_number);
            let aad = self.aad(&slot.ctx);
            if let Some(obs) = &self.observer {
                obs(key_id, *nonce.as_bytes());
            }
            let (payload, room) = slot.split(TAG_LEN)?;
            let tag = self
                .backend
                .seal_block(key, nonce, &aad, payload)
                .map_err(refused)?;
            room.copy_from_slice(tag.as_bytes());
            return Ok(());
        }
        // A group commit of one put is two blocks: their associated data,
        // segments and tags stay on the stack (a backend that seals them on
        // this thread allocates nothing).
        let mut few = [[0u8; AAD_LEN]; FEW_BLOCKS];
        let many: Vec<[u8; AAD_LEN]>;
        let aads: &[[u8; AAD_LEN]] = if blocks.len() <= FEW_BLOCKS {
            for (a, s) in few.iter_mut().zip(blocks.iter()) {
                *a = self.aad(&s.ctx);
            }
            &few[..blocks.len()]
        } else {
            many = blocks.iter().map(|s| self.aad(&s.ctx)).collect();
            &many
        };
        let mut tags: SmallVec<[Tag; FEW_BLOCKS]> = smallvec![Tag::default(); blocks.len()];
        let mut segments: SmallVec<[SealSegment<'_>; FEW_BLOCKS]> =
            SmallVec::with_capacity(blocks.len());
        for (slot, aad) in blocks.iter_mut().zip(aads) {
            let nonce = Nonce96::from_parts(slot.ctx.file_number, slot.ctx.block_number);
            let (payload, _) = slot.split(TAG_LEN)?;
            if let Some(obs) = &self.observer {
                obs(key_id, *nonce.as_bytes());
            }
            segments.push(SealSegment {
                nonce,
                aad,
                data: DataMut::Host(payload),
            });
        }
        self.backend
            .seal_blocks(key, &mut segments, &mut tags)
            .map_err(refused)?;
        drop(segments);
        for (slot, tag) in blocks.iter_mut().zip(&tags) {
            let (_, room) = slot.split(TAG_LEN)?;
            room.copy_from_slice(tag.as_bytes());
        }
        Ok(())
    }

    fn aad(&self, ctx: &BlockContext) -> [u8; AAD_LEN] {
        let mut a = [0u8; AAD_LEN];
        a[..CONTEXT_LEN].copy_from_slice(&ctx.bound_bytes());
        a[CONTEXT_LEN..].copy_from_slice(&self.store_id);
        a
    }
}

impl BlockCodec for GcmCodec {
    fn key_id(&self) -> u32 {
        self.keys.load().current
    }

    fn pin_key(&self) -> KeyPin {
        // The writer lock keeps `set_keys` out until the pin is counted: a
        // key stops being current only when no pin on it is still to come.
        let _w = self.keys_writer.lock();
        self.pins.pin(self.keys.load().current)
    }

    fn knows_key(&self, key_id: u32) -> bool {
        self.keys.load().get(key_id).is_some()
    }

    fn overhead(&self) -> usize {
        TAG_LEN
    }

    fn seal_slots(&self, blocks: &mut [SealSlot<'_>]) -> Result<(), SealError> {
        let Some(first) = blocks.first() else {
            return Ok(());
        };
        let key_id = first.ctx.key_id;
        if blocks.iter().any(|s| s.ctx.key_id != key_id) {
            return Err(SealError("a batch must seal under one data key".into()));
        }
        let key = self
            .key(key_id)
            .ok_or_else(|| SealError(format!("data key {key_id} is not in the key registry")))?;
        self.seal_job(&key, key_id, blocks)
    }

    /// One open job over every block, then one seal job, both in place in
    /// the caller's buffers: no copy of the payloads.
    fn reseal_batch(&self, blocks: &mut [Reseal<'_>]) -> Result<(), ResealError> {
        let seal_err = |e: String| ResealError::Seal(SealError(e));
        let from_key = self.batch_key(blocks.iter().map(|b| &b.from));
        let to_key = self.batch_key(blocks.iter().map(|b| &b.to));
        let (Some(from_key), Some(to_key)) =
            (from_key.map_err(seal_err)?, to_key.map_err(seal_err)?)
        else {
            return Ok(());
        };
        for (i, b) in blocks.iter().enumerate() {
            if b.sealed.len() < TAG_LEN {
                return Err(ResealError::Open {
                    block: i,
                    reason: OpenError(format!("block of {} bytes is too short", b.sealed.len())),
                });
            }
        }
        let from_aads: Vec<[u8; AAD_LEN]> = blocks.iter().map(|b| self.aad(&b.from)).collect();
        let to_aads: Vec<[u8; AAD_LEN]> = blocks.iter().map(|b| self.aad(&b.to)).collect();
        let refused = |e: gvault_accel::BackendError| {
            seal_err(format!(
                "accelerator {} refused a re-seal job: {e}",
                self.backend.name()
            ))
        };
        let segments: Vec<OpenSegment<'_>> = blocks
            .iter_mut()
            .zip(&from_aads)
            .map(|(b, aad)| {
                let (data, tag) = b.sealed.split_at_mut(b.sealed.len() - TAG_LEN);
                OpenSegment {
                    nonce: Nonce96::from_parts(b.from.file_number, b.from.block_number),
                    aad,
                    tag: Tag::try_from_slice(tag).expect("16 bytes"),
                    data: DataMut::Host(data),
                }
            })
            .collect();
        let mut job = Job::Open {
            key: &from_key,
            segments,
        };
        let opened = self.backend.run(&mut job).map_err(refused)?;
        drop(job);
        if let Some(i) = opened.iter().position(|r| r.is_err()) {
            return Err(ResealError::Open {
                block: i,
                reason: OpenError(format!(
                    "authentication failed for {:?} block (damaged, moved, swapped or from another store)",
                    blocks[i].from.kind
                )),
            });
        }
        let segments: Vec<SealSegment<'_>> = blocks
            .iter_mut()
            .zip(&to_aads)
            .map(|(b, aad)| {
                let nonce = Nonce96::from_parts(b.to.file_number, b.to.block_number);
                if let Some(obs) = &self.observer {
                    obs(b.to.key_id, *nonce.as_bytes());
                }
                let n = b.sealed.len() - TAG_LEN;
                SealSegment {
                    nonce,
                    aad,
                    data: DataMut::Host(&mut b.sealed[..n]),
                }
            })
            .collect();
        let mut job = Job::Seal {
            key: &to_key,
            segments,
        };
        let sealed = self.backend.run(&mut job).map_err(refused)?;
        drop(job);
        for (b, r) in blocks.iter_mut().zip(sealed) {
            let tag = r
                .map_err(|e| seal_err(format!("sealing a block: {}", e.kind)))?
                .tag()
                .ok_or_else(|| seal_err("seal job returned no tag".into()))?;
            let n = b.sealed.len() - TAG_LEN;
            b.sealed[n..].copy_from_slice(tag.as_bytes());
        }
        Ok(())
    }

    fn opens_in_parallel(&self) -> bool {
        true
    }

    /// One open job per data key named in the batch (one, but for files
    /// written across a rotation); per-block results.
    fn open_many_in_place(&self, blocks: &mut [OpenSlot<'_>]) -> Vec<Result<usize, OpenError>> {
        let mut results: Vec<Result<usize, OpenError>> = blocks
            .iter()
            .map(|b| {
                b.sealed.len().checked_sub(TAG_LEN).ok_or_else(|| {
                    OpenError(format!("block of {} bytes is too short", b.sealed.len()))
                })
            })
            .collect();
        let mut key_ids: Vec<u32> = blocks.iter().map(|b| b.ctx.key_id).collect();
        key_ids.sort_unstable();
        key_ids.dedup();
        for key_id in key_ids {
            let members: Vec<usize> = (0..blocks.len())
                .filter(|&i| blocks[i].ctx.key_id == key_id && results[i].is_ok())
                .collect();
            let Some(key) = self.key(key_id) else {
                for i in members {
                    results[i] = Err(OpenError(format!(
                        "data key {key_id} is not in the key registry"
                    )));
                }
                continue;
            };
            let aads: Vec<[u8; AAD_LEN]> =
                members.iter().map(|&i| self.aad(&blocks[i].ctx)).collect();
            let mut segments = Vec::with_capacity(members.len());
            for (b, aad) in blocks
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| members.binary_search(i).is_ok())
                .map(|(_, b)| b)
                .zip(&aads)
            {
                let n = b.sealed.len() - TAG_LEN;
                let (data, tag) = b.sealed.split_at_mut(n);
                segments.push(OpenSegment {
                    nonce: Nonce96::from_parts(b.ctx.file_number, b.ctx.block_number),
                    aad,
                    tag: Tag::try_from_slice(tag).expect("16 bytes"),
                    data: DataMut::Host(data),
                });
            }
            let mut job = Job::Open {
                key: &key,
                segments,
            };
            match self.backend.run(&mut job) {
                Ok(opened) if opened.len() == members.len() => {
                    for (&i, r) in members.iter().zip(opened) {
                        if r.is_err() {
                            results[i] = Err(auth_failed(blocks[i].ctx.kind));
                        }
                    }
                }
                Ok(_) => {
                    for &i in &members {
                        results[i] = Err(OpenError("open job returned too few results".into()));
                    }
                }
                Err(e) => {
                    let why = format!(
                        "accelerator {} refused an open job: {e}",
                        self.backend.name()
                    );
                    for &i in &members {
                        results[i] = Err(OpenError(why.clone()));
                    }
                }
            }
        }
        results
    }

    fn open_in_place(&self, ctx: &BlockContext, sealed: &mut [u8]) -> Result<usize, OpenError> {
        let n = sealed
            .len()
            .checked_sub(TAG_LEN)
            .ok_or_else(|| OpenError(format!("block of {} bytes is too short", sealed.len())))?;
        let (data, tag) = sealed.split_at_mut(n);
        let tag = Tag::try_from_slice(tag).expect("16 bytes");
        let keys = self.keys.load();
        let key = keys.get(ctx.key_id).ok_or_else(|| {
            OpenError(format!(
                "data key {} is not in the key registry",
                ctx.key_id
            ))
        })?;
        let aad = self.aad(ctx);
        let nonce = Nonce96::from_parts(ctx.file_number, ctx.block_number);
        match self.backend.open_block(key, nonce, &aad, tag, data) {
            Ok(()) => Ok(n),
            Err(e) if e.is_authentication_failure() => Err(auth_failed(ctx.kind)),
            Err(e) => Err(OpenError(format!(
                "accelerator {} could not open a block: {e}",
                self.backend.name()
            ))),
        }
    }
}

fn auth_failed(kind: crate::codec::BlockKind) -> OpenError {
    OpenError(format!(
        "authentication failed for {kind:?} block (damaged, moved, swapped or from another store)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::BlockKind;

    fn ctx(block: u32) -> BlockContext {
        BlockContext {
            key_id: 1,
            file_number: 7,
            block_number: block,
            offset: 100,
            kind: BlockKind::Data,
        }
    }

    /// `payloads` as a batch, block i under ctx(i).
    fn numbered(payloads: &[Vec<u8>]) -> Vec<(BlockContext, Vec<u8>)> {
        payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (ctx(i as u32), p.clone()))
            .collect()
    }

    fn codec(store: u8, key: u8) -> GcmCodec {
        GcmCodec::new(
            [store; 16],
            1,
            vec![(1, Aes256Key::from_bytes([key; 32]))],
            gvault_accel::CpuBackend::shared(),
            None,
        )
    }

    #[test]
    fn seal_open_round_trip_and_binding() {
        let c = codec(1, 9);
        let mut batch = vec![(ctx(0), b"hello".to_vec()), (ctx(1), Vec::new())];
        c.seal_batch(&mut batch).unwrap();
        assert_eq!(batch[0].1.len(), 5 + TAG_LEN);
        assert_ne!(&batch[0].1[..5], b"hello");
        assert_eq!(c.open(&ctx(0), batch[0].1.clone()).unwrap(), b"hello");
        assert_eq!(c.open(&ctx(1), batch[1].1.clone()).unwrap(), b"");
        assert!(c.open(&ctx(1), batch[0].1.clone()).is_err());
        let mut moved = ctx(0);
        moved.offset += 1;
        assert!(c.open(&moved, batch[0].1.clone()).is_err());
        let mut flipped = batch[0].1.clone();
        flipped[2] ^= 0x10;
        assert!(c.open(&ctx(0), flipped).is_err());
        // Same key, another store id: rejected.
        assert!(codec(2, 9).open(&ctx(0), batch[0].1.clone()).is_err());
        // Another key: rejected.
        assert!(codec(1, 8).open(&ctx(0), batch[0].1.clone()).is_err());
        let mut unknown = ctx(0);
        unknown.key_id = 5;
        assert!(c.open(&unknown, batch[0].1.clone()).is_err());
        assert!(c.open(&ctx(0), vec![1, 2]).is_err());
    }

    /// Opening in the caller's buffer gives the payload at its front, and
    /// a forged block's payload is never handed back as plaintext.
    #[test]
    fn open_in_place_leaves_the_payload_at_the_front() {
        let c = codec(1, 9);
        let mut batch = vec![(ctx(3), b"in place".to_vec())];
        c.seal_batch(&mut batch).unwrap();
        let mut buf = batch[0].1.clone();
        assert_eq!(c.open_in_place(&ctx(3), &mut buf), Ok(8));
        assert_eq!(&buf[..8], b"in place");
        let mut forged = batch[0].1.clone();
        forged[0] ^= 1;
        assert!(c.open_in_place(&ctx(3), &mut forged).is_err());
        assert!(c.open_in_place(&ctx(3), &mut [0u8; TAG_LEN - 1]).is_err());
    }

    /// Counts what reaches the backend it wraps; it is named "auto" and
    /// overrides neither one-block call (they become jobs), so a codec that
    /// picked a path by the backend's name would go around it.
    #[derive(Default)]
    struct Counted {
        cpu: gvault_accel::CpuBackend,
        jobs: std::sync::atomic::AtomicUsize,
    }

    impl Backend for Counted {
        fn name(&self) -> &'static str {
            "auto"
        }
        fn run(
            &self,
            job: &mut Job<'_>,
        ) -> Result<Vec<gvault_accel::SegmentResult>, gvault_accel::BackendError> {
            self.jobs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.cpu.run(job)
        }
    }

    /// Every seal and open goes to the codec's backend, whatever its name,
    /// and gives the bytes a CPU backend's calling-thread path gives
    /// (small group commits, single blocks), failing alike.
    #[test]
    fn every_seal_and_open_goes_to_the_backend() {
        let counted = Arc::new(Counted::default());
        let jobs = GcmCodec::new(
            [3; 16],
            1,
            vec![(1, Aes256Key::from_bytes([4; 32]))],
            counted.clone(),
            None,
        );
        let inline = codec(3, 4);
        let payloads: Vec<Vec<u8>> = [4126usize, 48, 0, 9000]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        let (mut a, mut b) = (numbered(&payloads), numbered(&payloads));
        inline.seal_batch(&mut a).unwrap();
        jobs.seal_batch(&mut b).unwrap();
        assert_eq!(a, b);
        let mut one = numbered(&payloads[..1]);
        jobs.seal_batch(&mut one).unwrap();
        assert_eq!(one[0], a[0]);
        let count = || counted.jobs.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(count(), 2);
        for (i, (ctx, sealed)) in a.iter().enumerate() {
            assert_eq!(inline.open(ctx, sealed.clone()).unwrap(), payloads[i]);
            assert_eq!(jobs.open(ctx, sealed.clone()).unwrap(), payloads[i]);
            let mut bad = sealed.clone();
            bad[0] ^= 1;
            assert!(inline.open(ctx, bad.clone()).is_err());
            assert!(jobs.open(ctx, bad).is_err());
        }
        assert_eq!(count(), 2 + 2 * payloads.len());
    }

    #[test]
    fn a_batch_cut_into_jobs_seals_every_block_as_one_job_would() {
        let c = codec(1, 9);
        let payloads: Vec<Vec<u8>> = [40_000usize, 40_000, 10_000, 70_000, 5]
            .iter()
            .enumerate()
            .map(|(i, &n)| vec![i as u8; n])
            .collect();
        let mut batch = numbered(&payloads);
        c.seal_batch(&mut batch).unwrap();
        for (i, (ctx, sealed)) in batch.iter().enumerate() {
            assert_eq!(sealed.len(), payloads[i].len() + TAG_LEN);
            // One block at a time gives the same bytes (same key and nonce).
            let mut alone = vec![(*ctx, payloads[i].clone())];
            c.seal_batch(&mut alone).unwrap();
            assert_eq!(&alone[0].1, sealed);
            assert_eq!(c.open(ctx, sealed.clone()).unwrap(), payloads[i]);
        }
    }

    #[test]
    fn reseal_moves_blocks_to_another_key_in_place() {
        let c = GcmCodec::new(
            [1; 16],
            1,
            vec![
                (1, Aes256Key::from_bytes([9; 32])),
                (2, Aes256Key::from_bytes([7; 32])),
            ],
            gvault_accel::CpuBackend::shared(),
            None,
        );
        let payloads: Vec<Vec<u8>> = vec![b"one".to_vec(), vec![5; 70_000], Vec::new()];
        let mut batch = numbered(&payloads);
        c.seal_batch(&mut batch).unwrap();
        let to = |i: u32| BlockContext {
            key_id: 2,
            ..ctx(i)
        };
        // Re-seals every buffer from ctx(i) to to(i), in one batch.
        let reseal_all = |bufs: &mut [Vec<u8>]| {
            let mut blocks: Vec<Reseal<'_>> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| Reseal {
                    from: ctx(i as u32),
                    to: to(i as u32),
                    sealed: b.as_mut_slice(),
                })
                .collect();
            c.reseal_batch(&mut blocks)
        };
        let mut bufs: Vec<Vec<u8>> = batch.iter().map(|(_, s)| s.clone()).collect();
        reseal_all(&mut bufs).unwrap();
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(b.len(), batch[i].1.len());
            assert_eq!(c.open(&to(i as u32), b.clone()).unwrap(), payloads[i]);
            assert!(c.open(&ctx(i as u32), b.clone()).is_err());
        }
        // A damaged block is named, and nothing is sealed under the new key.
        let mut bufs: Vec<Vec<u8>> = batch.iter().map(|(_, s)| s.clone()).collect();
        bufs[1][100] ^= 1;
        match reseal_all(&mut bufs) {
            Err(ResealError::Open { block: 1, .. }) => {}
            other => panic!("expected block 1 to fail, got {other:?}"),
        }
    }
}
