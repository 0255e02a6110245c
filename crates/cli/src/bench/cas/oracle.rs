//! Seed 001's CA-Infinite configuration: content addressing with free
//! hashing. A first pass records every chunking and hashing job's results;
//! the measured pass gets them back without computing anything, while
//! sealing and opening still run on the real backend. What the measured
//! pass gains over the real one is what hashing and chunking cost.
//!
//! A recorded job is found again by its op and, per segment, its length, a
//! CRC-32C of all of its bytes and a fingerprint of 64 sampled words: one
//! hardware CRC pass (tens of GB/s a core) stands for chunking and BLAKE3,
//! and a changed byte anywhere in a segment changes its key, as the
//! *similar* workload's small edits do. A job that was not recorded runs on
//! the real backend and is counted, so a report shows how much of a pass
//! the oracle really served.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gvault_accel::{Backend, BackendError, Data, Job, SegmentResult};

type Key = (u8, Vec<(usize, u32, u64)>);

pub struct Oracle {
    inner: Arc<dyn Backend>,
    recording: AtomicBool,
    table: Mutex<HashMap<Key, Vec<SegmentResult>>>,
    pub served: AtomicU64,
    pub missed: AtomicU64,
}

fn fingerprint(b: &[u8]) -> u64 {
    let mut h = b.len() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    if b.len() >= 8 {
        let step = (b.len() - 8) / 63;
        for i in 0..64 {
            let at = (i * step).min(b.len() - 8);
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            h = (h ^ u64::from_le_bytes(w))
                .wrapping_mul(0x1000_0000_01b3)
                .rotate_left(29);
        }
    } else {
        for &x in b {
            h = (h ^ x as u64).wrapping_mul(0x1000_0000_01b3);
        }
    }
    h
}

fn key(job: &Job<'_>) -> Option<Key> {
    let (op, segs): (u8, &[Data<'_>]) = match job {
        Job::ChunkDigest { segments, .. } => (0, segments),
        Job::Digest { segments, .. } => (1, segments),
        _ => return None,
    };
    let mut k = Vec::with_capacity(segs.len());
    for s in segs {
        let b = s.host()?;
        k.push((s.len(), crc32c::crc32c(b), fingerprint(b)));
    }
    Some((op, k))
}

impl Oracle {
    pub fn new(inner: Arc<dyn Backend>) -> Oracle {
        Oracle {
            inner,
            recording: AtomicBool::new(true),
            table: Mutex::new(HashMap::new()),
            served: AtomicU64::new(0),
            missed: AtomicU64::new(0),
        }
    }

    /// From now on, recorded jobs are answered from the table.
    pub fn replay(&self) {
        self.recording.store(false, Ordering::SeqCst);
    }
}

impl Backend for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn small_gcm_on_caller(&self) -> bool {
        self.inner.small_gcm_on_caller()
    }

    fn alloc_host(&self, len: usize) -> Option<gvault_accel::PinnedBuffer> {
        self.inner.alloc_host(len)
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        let Some(k) = key(job) else {
            return self.inner.run(job);
        };
        if !self.recording.load(Ordering::SeqCst) {
            let hit = self.table.lock().ok().and_then(|t| t.get(&k).cloned());
            if let Some(r) = hit {
                self.served.fetch_add(1, Ordering::Relaxed);
                return Ok(r);
            }
            self.missed.fetch_add(1, Ordering::Relaxed);
            return self.inner.run(job);
        }
        let r = self.inner.run(job)?;
        if let Ok(mut t) = self.table.lock() {
            t.insert(k, r.clone());
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::key;
    use gvault_accel::{Data, DigestAlgo, Job};

    /// An in-place edit of one byte between sampled words (the *similar*
    /// workload's edits) must not find the unedited segment's results.
    #[test]
    fn an_edit_between_the_sampled_words_changes_the_key() {
        let a: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut b = a.clone();
        // Sampled words start at multiples of (len - 8) / 63; byte 3 past
        // the eighth sample's word is none of them.
        let step = (a.len() - 8) / 63;
        b[8 * step + 11] ^= 0x5a;
        let k = |d: &[u8]| {
            key(&Job::Digest {
                algo: DigestAlgo::Crc32c,
                segments: vec![Data::Host(d)],
            })
            .unwrap()
        };
        assert_ne!(k(&a), k(&b));
        assert_eq!(k(&a), k(&a.clone()));
    }
}
