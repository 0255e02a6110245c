//! The CPU backend: well-kept crates (aws-lc-rs for AES and SHA-256, the
//! `blake3`, `md-5`, `crc32fast`, `crc32c`, `fastcdc`, `blowfish` and `rsa`
//! crates; TEA by hand), parallel across segments and, for operations that
//! can be cut (CTR modes, BLAKE3, CRCs, and AES-GCM when a job has fewer
//! segments than threads), within large segments, on a rayon pool of its
//! own. Small jobs run on the calling thread, and so do one-block seals
//! and opens ([`Backend::seal_block`], [`Backend::open_block`]), without a
//! job's allocations (a store's group commits and block reads).

mod aes;
pub mod blowfish;
mod chunk;
mod digest;
pub(crate) mod gcm_cut;
pub(crate) mod gf128;
mod rsa;
mod survey;
pub mod tea;

use rayon::prelude::*;

use crate::backend::Backend;
use crate::error::{BackendError, BlockError, SegmentErrorKind};
use crate::job::{CtrCipher, DataMut, Job, Output, SealSegment, SegmentResult};
use crate::types::{Aes256Key, Nonce96, Tag};

pub(crate) use rsa::private_op as rsa_private_op;
pub(crate) use survey::Survey;

/// Segments longer than this are cut into pieces of this size (rounded to the
/// cipher block) for ops that allow it, so one huge segment uses every core.
pub const DEFAULT_SPLIT_BYTES: usize = 1 << 20;
/// AES-GCM segments are cut (into `split_bytes` pieces) only when they make
/// at least this many pieces: a cut piece runs CTR and GHASH as two passes
/// and the pieces' sums are joined afterwards, which costs more than the
/// fused whole-segment seal per byte, so it pays only where it puts idle
/// threads to work.
pub const GCM_CUT_PIECES: usize = 4;
/// Per-byte cost of a cut GCM piece on one thread, as a multiple of the
/// fused whole-segment seal: aws-lc's stand-alone CTR is AES-NI without the
/// fused path's VAES (4.6 GB/s against 8.0 for fused GCM on a 2-core Xeon
/// with VAES; RustCrypto's CTR 4.1) and GHASH runs as a second pass (9.0
/// GB/s), so a piece ran at 3.4-3.7 GB/s (2.3x). On the 16-core H100 host,
/// all threads cutting 4 x 64 MiB to 4 x 1 GiB ran at 41-50 GB/s sealing
/// and 34-48 opening, against 7.1 and 8.4 GB/s a thread fused: 2.3-2.8x
/// and 2.8-4.0x (bench/JOURNAL.md), host memory taking its share. A cut only pays
/// where it more than makes up for that with idle threads.
pub const GCM_CUT_COST: f64 = 3.0;

/// Whether the CPU backend cuts the GCM segments of at least `cut_bytes`
/// of a job of `segments` segments, the longest `largest`, on `threads`
/// threads: only when the threads left idle by whole segments outweigh the
/// cut's cost.
pub fn gcm_cut_applies(segments: usize, largest: u64, threads: usize, cut_bytes: u64) -> bool {
    threads > 1 && largest >= cut_bytes && (segments as f64) * GCM_CUT_COST < threads as f64
}

pub struct CpuBackend {
    /// None: the process-wide rayon pool. A backend on every core shares it
    /// with the GPU backend's staging copies and with other all-core
    /// backends (the auto backend's CPU side), so their threads never
    /// compete: two all-core pools in one process, one spinning down while
    /// the other starts, cost small jobs 10-15% on a 16-core host.
    pool: Option<rayon::ThreadPool>,
    threads: usize,
    split_bytes: usize,
    /// GCM segments of at least this many bytes are cut when the job has
    /// fewer segments than threads.
    gcm_cut_bytes: usize,
}

impl CpuBackend {
    /// A backend using every core.
    pub fn new() -> Self {
        Self::with_threads(0)
    }

    /// A backend on `threads` worker threads (0 = one per core).
    pub fn with_threads(threads: usize) -> Self {
        Self::with_config(threads, DEFAULT_SPLIT_BYTES)
    }

    /// A backend on a pool of `threads` threads that is never the
    /// process-wide one (the auto backend's split CPU parts: the GPU part's
    /// staging copies run on that one).
    pub fn with_own_pool(threads: usize) -> Self {
        Self::build(threads, DEFAULT_SPLIT_BYTES, true)
    }

    /// `split_bytes` sets where large segments are cut (GCM segments from
    /// `GCM_CUT_PIECES` pieces up); tests use tiny values to exercise the
    /// cut points.
    pub fn with_config(threads: usize, split_bytes: usize) -> Self {
        Self::build(threads, split_bytes, false)
    }

    fn build(threads: usize, split_bytes: usize, own_pool: bool) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let want = if threads == 0 { cores } else { threads };
        let global = rayon::current_num_threads();
        let pool = (own_pool || want != global).then(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(want)
                .thread_name(|i| format!("gvault-cpu-{i}"))
                .build()
                .expect("building a rayon pool only fails if threads cannot be spawned")
        });
        let threads = pool.as_ref().map_or(global, |p| p.current_num_threads());
        let split_bytes = split_bytes.max(64);
        Self {
            pool,
            threads,
            split_bytes,
            gcm_cut_bytes: split_bytes.saturating_mul(GCM_CUT_PIECES),
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Piece size for splitting a segment, a multiple of `unit`; `None` when
    /// the segment is processed whole.
    fn split_for(&self, len: usize, unit: usize) -> Option<usize> {
        if self.threads > 1 && len > self.split_bytes {
            Some((self.split_bytes / unit).max(1) * unit)
        } else {
            None
        }
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Jobs up to this many bytes run on the calling thread: handing a job to
/// the pool and waiting for it costs more (tens of microseconds of
/// cross-thread wake-ups) than sealing a 4 KiB block (about half a
/// microsecond), and the store's block reads and small group commits are
/// exactly such jobs.
const INLINE_MAX_BYTES: u64 = 64 << 10;
/// A cipher job up to this size whose segments but the longest come to at
/// most `INLINE_MAX_BYTES` also runs inline: the longest segment cannot be
/// spread over threads anyway, so the pool could only take the small rest
/// off this thread. A 64 KiB value's sealed frame is just over 64 KiB, and
/// the hand-off doubled its read time; a group commit of one 256 KiB
/// object (its frame and a commit record) spent ~40 us a put asleep in
/// the hand-off on the H100 host (seed 000 inserts at 0.63x of plain).
const INLINE_ONE_CIPHER_SEGMENT_BYTES: u64 = 1 << 20;

/// Whether `job` (of `bytes` bytes, the longest segment `largest`) runs on
/// the calling thread (see the constants above).
fn runs_inline(job: &Job<'_>, bytes: u64, largest: u64) -> bool {
    let cipher = matches!(job, Job::Seal { .. } | Job::Open { .. } | Job::Ctr { .. });
    match job {
        // One message cannot be spread; on the pool it only adds a hand-off
        // to a (possibly idle, slow to wake) worker.
        Job::RsaPrivate { .. } | Job::RsaPrivateKeys { .. } => job.len() == 1,
        _ if bytes <= INLINE_MAX_BYTES => true,
        _ => {
            cipher
                && bytes <= INLINE_ONE_CIPHER_SEGMENT_BYTES
                && bytes.saturating_sub(largest) <= INLINE_MAX_BYTES
        }
    }
}

thread_local! {
    /// Set while a small job runs inline on its caller's thread.
    static INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` on every segment the survey did not reject, in parallel (or in
/// order, for an inline job), and returns the results in order.
fn per_segment<S, F>(segments: &mut [S], survey: &Survey, f: F) -> Vec<SegmentResult>
where
    S: Send,
    F: Fn(&mut S) -> Result<Output, SegmentErrorKind> + Sync,
{
    let one = |(i, seg): (usize, &mut S)| match survey.rejected(i) {
        Some(kind) => Err(kind.at(i)),
        None => f(seg).map_err(|kind| kind.at(i)),
    };
    if INLINE.with(|i| i.get()) {
        return segments.iter_mut().enumerate().map(one).collect();
    }
    segments.par_iter_mut().enumerate().map(one).collect()
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        if let Some(results) = run_on_caller(job) {
            return Ok(results);
        }
        let survey = self.survey(job);
        self.run_surveyed(job, &survey)
    }

    fn small_gcm_on_caller(&self) -> bool {
        true
    }
}

/// Seals `segments` here, each tag into `tags`, if they are a seal job
/// that [`runs_on_caller`] (and as many tags); otherwise `None`, untouched.
pub(crate) fn seal_blocks_on_caller(
    key: &Aes256Key,
    segments: &mut [SealSegment<'_>],
    tags: &mut [Tag],
) -> Option<Result<(), BlockError>> {
    if tags.len() != segments.len()
        || !gcm_on_caller(true, segments.len(), segments.iter().map(|s| &s.data))
    {
        return None;
    }
    let key = aes::GcmKey::new(key);
    for (s, tag) in segments.iter_mut().zip(tags) {
        let Some(data) = s.data.host_mut() else {
            return Some(Err(SegmentErrorKind::DeviceResident.into()));
        };
        *tag = key.seal(&s.nonce, s.aad, data);
    }
    Some(Ok(()))
}

/// Whether a one-block seal or open of `len` bytes runs on the calling
/// thread (the CPU and auto backends): a single segment cannot be spread
/// over threads below the GCM cut, and up to this size the GPU's fixed
/// cost (~40-100 us a job in the H100 host's model) is many times the
/// CPU's 1-8 us per 4-64 KiB, while asking the auto backend's model would
/// cost ~0.3 us of a 4 KiB read's ~1.3 us.
pub(crate) fn block_runs_on_caller(len: usize) -> bool {
    len as u64 <= INLINE_ONE_CIPHER_SEGMENT_BYTES
}

/// Seals one block on the calling thread, outside the job API: no job's
/// allocations (a segment list and a result list, ~0.1-0.2 us against
/// ~0.5 us of AES-GCM for 4 KiB on the H100 host). The key schedule is the
/// thread's cached one (see `aes::GcmKey::new`).
pub(crate) fn seal_on_caller(key: &Aes256Key, nonce: Nonce96, aad: &[u8], data: &mut [u8]) -> Tag {
    aes::GcmKey::new(key).seal(&nonce, aad, data)
}

/// Opens one block in place on the calling thread (see [`seal_on_caller`]);
/// on a bad tag the block is zeroed and `AuthenticationFailed` returned.
pub(crate) fn open_on_caller(
    key: &Aes256Key,
    nonce: Nonce96,
    aad: &[u8],
    tag: Tag,
    data: &mut [u8],
) -> Result<(), SegmentErrorKind> {
    aes::GcmKey::new(key).open(&nonce, aad, &tag, data)
}

/// A seal job of at most this many bytes runs on the calling thread, block
/// by block, whatever its number of segments: handing a batch this small
/// to a thread pool costs more in wake-ups than its threads save (a group
/// commit of one 64 KiB value and its commit record spent longer in the
/// hand-off than in AES-GCM). Larger seals (tables, big groups) are spread
/// over threads.
const CALLER_SEAL_BYTES: u64 = 256 << 10;

/// `f` on each segment in order, on this thread; errors carry their index.
fn each_host_segment<S>(
    segments: &mut [S],
    f: impl Fn(&mut S) -> Result<Output, SegmentErrorKind>,
) -> Vec<SegmentResult> {
    segments
        .iter_mut()
        .enumerate()
        .map(|(i, s)| f(s).map_err(|kind| kind.at(i)))
        .collect()
}

/// Whether host segments of these lengths, in a GCM job (a seal when
/// `seal`), run on the calling thread without a survey: one segment that
/// `block_runs_on_caller`, a seal of at most `CALLER_SEAL_BYTES`, an open
/// of at most `INLINE_MAX_BYTES`. O(1) for a large job: the sum
/// stops once past the bound. The general path's survey, inline flag and
/// per-segment closure cost ~0.18 us on top of aws-lc's ~1.1 us for one
/// 4 KiB group commit on the development machine, ~2% of an encrypted
/// 4 KiB put.
fn gcm_on_caller<'s>(seal: bool, n: usize, data: impl Iterator<Item = &'s DataMut<'s>>) -> bool {
    let limit = match n {
        1 => INLINE_ONE_CIPHER_SEGMENT_BYTES,
        _ if seal => CALLER_SEAL_BYTES,
        _ => INLINE_MAX_BYTES,
    };
    let mut bytes = 0u64;
    let mut data = data;
    data.all(|d| {
        bytes += d.len() as u64;
        matches!(d, DataMut::Host(_)) && bytes <= limit
    })
}

/// Whether `job` runs on the calling thread without a survey (see
/// `gcm_on_caller`): the auto backend asks before deciding.
pub(crate) fn runs_on_caller(job: &Job<'_>) -> bool {
    match job {
        Job::Seal { segments, .. } => {
            gcm_on_caller(true, segments.len(), segments.iter().map(|s| &s.data))
        }
        Job::Open { segments, .. } => {
            gcm_on_caller(false, segments.len(), segments.iter().map(|s| &s.data))
        }
        _ => false,
    }
}

/// Runs `job` here if it is a GCM job that [`runs_on_caller`] (every check
/// the survey would make holds for it: no segment is on the device or
/// over `MAX_SEGMENT_LEN`); otherwise `None`, untouched.
pub(crate) fn run_on_caller(job: &mut Job<'_>) -> Option<Vec<SegmentResult>> {
    if !runs_on_caller(job) {
        return None;
    }
    match job {
        Job::Seal { key, segments } => {
            let key = aes::GcmKey::new(key);
            Some(each_host_segment(segments, |s| {
                let data = s.data.host_mut().ok_or(SegmentErrorKind::DeviceResident)?;
                Ok(Output::Tag(key.seal(&s.nonce, s.aad, data)))
            }))
        }
        Job::Open { key, segments } => {
            let key = aes::GcmKey::new(key);
            Some(each_host_segment(segments, |s| {
                let data = s.data.host_mut().ok_or(SegmentErrorKind::DeviceResident)?;
                key.open(&s.nonce, s.aad, &s.tag, data)
                    .map(|()| Output::Done)
            }))
        }
        _ => None,
    }
}

impl CpuBackend {
    /// Whether a GCM job of this survey has its large segments cut (4 x 64
    /// MiB on 16 threads would leave 12 idle).
    fn cuts_gcm(&self, survey: &Survey, inline: bool) -> bool {
        !inline
            && gcm_cut_applies(
                survey.segments,
                survey.largest,
                self.threads,
                self.gcm_cut_bytes as u64,
            )
    }

    /// The job's survey, taken on this backend's threads when the job has
    /// many segments.
    pub(crate) fn survey(&self, job: &Job<'_>) -> Survey {
        match &self.pool {
            _ if self.threads <= 1 => Survey::of(job),
            Some(pool) => pool.install(|| Survey::of_parallel(job)),
            None => Survey::of_parallel(job),
        }
    }

    /// Runs `job` with its survey already taken (the auto backend decides
    /// with it): no second pass over the segments. A survey of another job
    /// (a different segment count) is taken again.
    pub(crate) fn run_surveyed(
        &self,
        job: &mut Job<'_>,
        survey: &Survey,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        if survey.segments != job.len() {
            return self.run_surveyed(job, &Survey::of(job));
        }
        let inline = runs_inline(job, survey.bytes, survey.largest);
        let gcm_cut = self.cuts_gcm(survey, inline);
        let piece = (self.split_bytes / 16).max(1) * 16;
        let cut_here = |len: usize| gcm_cut && len >= self.gcm_cut_bytes;
        let cdc = chunk::Spread::new(self.threads, survey.segments, inline, self.split_bytes);
        let mut work = || match job {
            Job::Seal { key: k, segments } => {
                let key = aes::GcmKey::new(k);
                let cut = gcm_cut.then(|| gcm_cut::GcmCut::new(k, key.aead()));
                per_segment(segments, survey, |s| {
                    let data = s.data.host_mut().ok_or(SegmentErrorKind::DeviceResident)?;
                    Ok(Output::Tag(match &cut {
                        Some(cut) if cut_here(data.len()) => cut.seal(&s.nonce, s.aad, data, piece),
                        _ => key.seal(&s.nonce, s.aad, data),
                    }))
                })
            }
            Job::Open { key: k, segments } => {
                let key = aes::GcmKey::new(k);
                let cut = gcm_cut.then(|| gcm_cut::GcmCut::new(k, key.aead()));
                per_segment(segments, survey, |s| {
                    let data = s.data.host_mut().ok_or(SegmentErrorKind::DeviceResident)?;
                    match &cut {
                        Some(cut) if cut_here(data.len()) => {
                            cut.open(&s.nonce, s.aad, &s.tag, data, piece)?
                        }
                        _ => key.open(&s.nonce, s.aad, &s.tag, data)?,
                    }
                    Ok(Output::Done)
                })
            }
            Job::Ctr { cipher, segments } => {
                let keystream = CtrKeystream::new(*cipher);
                per_segment(segments, survey, |s| {
                    let data = s.data.host_mut().ok_or(SegmentErrorKind::DeviceResident)?;
                    keystream.apply(self, &s.iv, data);
                    Ok(Output::Done)
                })
            }
            Job::Digest { algo, segments } => per_segment(segments, survey, |s| {
                let data = s.host().ok_or(SegmentErrorKind::DeviceResident)?;
                Ok(Output::Digest(digest::digest(self, algo, data)))
            }),
            Job::Chunk { params, segments } => per_segment(segments, survey, |s| {
                let data = s.host().ok_or(SegmentErrorKind::DeviceResident)?;
                Ok(Output::Chunks(chunk::boundaries(params, data, cdc)))
            }),
            Job::ChunkDigest {
                params,
                key,
                crc32c,
                segments,
            } => per_segment(segments, survey, |s| {
                let data = s.host().ok_or(SegmentErrorKind::DeviceResident)?;
                Ok(Output::DigestedChunks(chunk::digested(
                    params, key, *crc32c, data, cdc,
                )))
            }),
            Job::RsaPrivate { key, segments } => per_segment(segments, survey, |s| {
                rsa::private_op(key, s).map(Output::Bytes)
            }),
            Job::RsaPrivateKeys { items } => per_segment(items, survey, |it| {
                rsa::private_op(it.key, it.input).map(Output::Bytes)
            }),
        };
        let results = if inline {
            /// Clears the flag however the job ends.
            struct Reset;
            impl Drop for Reset {
                fn drop(&mut self) {
                    INLINE.with(|i| i.set(false));
                }
            }
            INLINE.with(|i| i.set(true));
            let _reset = Reset;
            work()
        } else {
            match &self.pool {
                Some(pool) => pool.install(work),
                None => work(),
            }
        };
        Ok(results)
    }
}

/// A CTR-mode cipher with its key schedule done once per job.
enum CtrKeystream {
    Aes(aes::CtrKey),
    Tea(tea::Tea),
    Blowfish(Box<blowfish::BlowfishCtr>),
}

impl CtrKeystream {
    fn new(cipher: CtrCipher<'_>) -> Self {
        match cipher {
            CtrCipher::Aes256(k) => CtrKeystream::Aes(aes::CtrKey::new(k)),
            CtrCipher::Tea(k) => CtrKeystream::Tea(tea::Tea::new(k)),
            CtrCipher::Blowfish(k) => {
                CtrKeystream::Blowfish(Box::new(blowfish::BlowfishCtr::new(k)))
            }
        }
    }

    fn block_len(&self) -> usize {
        match self {
            CtrKeystream::Aes(_) => 16,
            CtrKeystream::Tea(_) | CtrKeystream::Blowfish(_) => 8,
        }
    }

    /// XORs the keystream onto `data`, cutting it into pieces across cores
    /// when it is large. Piece k starts `k * piece / block_len` counter steps in.
    fn apply(&self, cpu: &CpuBackend, iv: &crate::types::CtrIv, data: &mut [u8]) {
        let block = self.block_len();
        let one = |skip: u64, piece: &mut [u8]| match (self, iv) {
            (CtrKeystream::Aes(k), crate::types::CtrIv::B128(iv)) => k.apply(iv, skip, piece),
            (CtrKeystream::Tea(t), crate::types::CtrIv::B64(iv)) => t.ctr_apply(iv, skip, piece),
            (CtrKeystream::Blowfish(b), crate::types::CtrIv::B64(iv)) => b.apply(iv, skip, piece),
            // precheck rejected mismatched IV widths before we got here
            _ => unreachable!("IV width checked by precheck"),
        };
        match cpu.split_for(data.len(), block) {
            Some(piece) => data
                .par_chunks_mut(piece)
                .enumerate()
                .for_each(|(k, p)| one((k * piece / block) as u64, p)),
            None => one(0, data),
        }
    }
}

#[cfg(test)]
mod gcm_cut_tests {
    use super::{CpuBackend, Survey};

    fn survey(segments: usize, largest: u64) -> Survey {
        let mut s = Survey::default();
        s.bytes = largest * segments as u64;
        s.segments = segments;
        s.largest = largest;
        s
    }

    #[test]
    fn few_large_gcm_segments_are_cut() {
        let b = CpuBackend::with_threads(16);
        assert!(b.cuts_gcm(&survey(4, 64 << 20), false));
        assert!(b.cuts_gcm(&survey(5, 64 << 20), false));
        assert!(b.cuts_gcm(&survey(1, 4 << 20), false));
        // Below four pieces, too many segments for the cut to pay, inline.
        assert!(!b.cuts_gcm(&survey(4, (4 << 20) - 1), false));
        assert!(!b.cuts_gcm(&survey(6, 64 << 20), false));
        assert!(!b.cuts_gcm(&survey(1, 64 << 20), true));
        // Two threads: one whole segment on one of them beats both cut.
        assert!(!CpuBackend::with_threads(2).cuts_gcm(&survey(1, 64 << 20), false));
        assert!(!CpuBackend::with_threads(1).cuts_gcm(&survey(1, 64 << 20), false));
    }
}

#[cfg(test)]
mod inline_tests {
    use crate::{Aes256Key, Backend, Job, Nonce96, SealSegment, Tag};

    fn runs_inline(job: &Job<'_>) -> bool {
        let s = super::Survey::of(job);
        super::runs_inline(job, s.bytes, s.largest)
    }

    fn seal_job<'a>(key: &'a Aes256Key, bufs: &'a mut [Vec<u8>]) -> Job<'a> {
        Job::Seal {
            key,
            segments: bufs
                .iter_mut()
                .map(|d| SealSegment {
                    nonce: Nonce96::from_parts(1, 0),
                    aad: b"",
                    data: d.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn small_jobs_and_single_cipher_segments_run_inline() {
        let key = Aes256Key::from_bytes([7; 32]);
        let mut one_value = vec![vec![0u8; (64 << 10) + 40]];
        assert!(runs_inline(&seal_job(&key, &mut one_value)));
        let mut three_values = vec![vec![0u8; 40 << 10]; 3];
        assert!(!runs_inline(&seal_job(&key, &mut three_values)));
        // One large object and its commit record: the pool could only
        // take the record off this thread.
        let mut object = vec![vec![0u8; (256 << 10) + 40], vec![0u8; 30]];
        assert!(runs_inline(&seal_job(&key, &mut object)));
        let mut object_and_values = vec![vec![0u8; 256 << 10], vec![0u8; 80 << 10]];
        assert!(!runs_inline(&seal_job(&key, &mut object_and_values)));
        let mut big = vec![vec![0u8; 2 << 20]];
        assert!(!runs_inline(&seal_job(&key, &mut big)));
        let mut small = vec![vec![0u8; 100]; 8];
        assert!(runs_inline(&seal_job(&key, &mut small)));
    }

    #[test]
    fn one_rsa_message_runs_inline_and_a_batch_on_the_pool() {
        let key =
            crate::rsa_key::RsaPrivateKey::from_pem(include_str!("../../tests/data/rsa1024.pem"))
                .expect("test key");
        let msg = vec![1u8; key.size()];
        let one = Job::RsaPrivate {
            key: &key,
            segments: vec![&msg[..]],
        };
        assert!(runs_inline(&one));
        let two = Job::RsaPrivate {
            key: &key,
            segments: vec![&msg[..], &msg[..]],
        };
        assert!(!runs_inline(&two));
        let mut job = one;
        let out = super::CpuBackend::new().run(&mut job).expect("runs");
        assert!(matches!(&out[..], [Ok(crate::job::Output::Bytes(b))] if b.len() == key.size()));
    }

    /// Segments of distinct lengths and contents, each with its own nonce
    /// and associated data.
    fn segments(lens: &[usize]) -> Vec<Vec<u8>> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect()
    }

    fn seal_each<'a>(key: &'a Aes256Key, bufs: &'a mut [Vec<u8>], aads: &'a [[u8; 5]]) -> Job<'a> {
        Job::Seal {
            key,
            segments: bufs
                .iter_mut()
                .zip(aads)
                .enumerate()
                .map(|(i, (d, aad))| SealSegment {
                    nonce: Nonce96::from_parts(9, i as u32),
                    aad,
                    data: d.into(),
                })
                .collect(),
        }
    }

    /// The calling-thread path gives what the general path gives, bit for
    /// bit: the same ciphertexts and tags, the same opens, the same failures.
    #[test]
    fn gcm_jobs_on_the_caller_match_the_general_path() {
        use crate::job::{OpenSegment, Output};
        use crate::SegmentErrorKind;
        let cpu = super::CpuBackend::with_threads(2);
        let key = Aes256Key::from_bytes([3; 32]);
        let aads = [[1u8; 5], [2; 5], [3; 5], [4; 5]];
        for lens in [
            &[4126usize, 48][..],
            &[0],
            &[1, 17, 4096, 60000],
            &[65536],
            &[(1 << 20) - 16],
        ] {
            let (mut fast, mut slow) = (segments(lens), segments(lens));
            let mut job = seal_each(&key, &mut fast, &aads);
            let tags = super::run_on_caller(&mut job).expect("a small job");
            drop(job);
            let survey = cpu.survey(&seal_each(&key, &mut slow, &aads));
            let want = cpu
                .run_surveyed(&mut seal_each(&key, &mut slow, &aads), &survey)
                .expect("runs");
            assert_eq!(tags, want);
            assert_eq!(fast, slow);
            // Open both back; a flipped byte fails its own segment only and
            // leaves it zeroed.
            if let Some(b) = fast[0].first_mut() {
                *b ^= 1;
            }
            let tag = |r: &crate::SegmentResult| match r {
                Ok(Output::Tag(t)) => *t,
                other => panic!("not a tag: {other:?}"),
            };
            let mut open = Job::Open {
                key: &key,
                segments: fast
                    .iter_mut()
                    .zip(&aads)
                    .zip(&tags)
                    .enumerate()
                    .map(|(i, ((d, aad), t))| OpenSegment {
                        nonce: Nonce96::from_parts(9, i as u32),
                        aad,
                        tag: tag(t),
                        data: d.into(),
                    })
                    .collect(),
            };
            let opened = super::run_on_caller(&mut open).expect("a small job");
            drop(open);
            for (i, r) in opened.iter().enumerate() {
                if i == 0 && lens[0] > 0 {
                    assert_eq!(
                        r.as_ref().map_err(|e| e.kind.clone()),
                        Err(SegmentErrorKind::AuthenticationFailed)
                    );
                    assert!(fast[0].iter().all(|&b| b == 0));
                } else {
                    assert!(matches!(r, Ok(Output::Done)), "{r:?}");
                    assert_eq!(fast[i], segments(lens)[i]);
                }
            }
        }
        // One block outside the job API: the same tag as a job's, opened
        // back, and a flipped byte refused with the block zeroed.
        let mut job_buf = segments(&[4126]);
        let mut job = seal_each(&key, &mut job_buf, &aads);
        let want = super::run_on_caller(&mut job).expect("a small job");
        drop(job);
        let mut block = segments(&[4126]).remove(0);
        let nonce = Nonce96::from_parts(9, 0);
        let tag = cpu
            .seal_block(&key, nonce, &aads[0], &mut block)
            .expect("seals");
        assert!(matches!(&want[0], Ok(Output::Tag(t)) if *t == tag));
        assert_eq!(block, job_buf[0]);
        let mut opened = block.clone();
        cpu.open_block(&key, nonce, &aads[0], tag, &mut opened)
            .expect("opens");
        assert_eq!(opened, segments(&[4126])[0]);
        block[100] ^= 0x80;
        let refused = cpu.open_block(&key, nonce, &aads[0], tag, &mut block);
        assert!(refused.is_err_and(|e| e.is_authentication_failure()));
        assert!(block.iter().all(|&b| b == 0));
        // A seal batch of up to 256 KiB runs here whatever its segment
        // count (a store's small group commits); an open of several
        // segments only up to 64 KiB.
        let five = [[0u8; 5]; 5];
        let mut three = segments(&[40 << 10; 3]);
        let (mut slow, three_aads) = (segments(&[40 << 10; 3]), [[0u8; 5]; 3]);
        let tags = super::run_on_caller(&mut seal_each(&key, &mut three, &three_aads))
            .expect("a small seal");
        let survey = cpu.survey(&seal_each(&key, &mut slow, &three_aads));
        let want = cpu
            .run_surveyed(&mut seal_each(&key, &mut slow, &three_aads), &survey)
            .expect("runs");
        assert_eq!((tags, &three), (want, &slow));
        let mut many = segments(&[10; 5]);
        assert!(super::run_on_caller(&mut seal_each(&key, &mut many, &five)).is_some());
        let mut big = segments(&[200 << 10, 100 << 10]);
        assert!(super::run_on_caller(&mut seal_each(&key, &mut big, &aads)).is_none());
        let mut two = segments(&[40 << 10, 40 << 10]);
        let open_two = Job::Open {
            key: &key,
            segments: two
                .iter_mut()
                .map(|d| OpenSegment {
                    nonce: Nonce96::from_parts(9, 0),
                    aad: b"",
                    tag: Tag::default(),
                    data: d.into(),
                })
                .collect(),
        };
        assert!(!super::runs_on_caller(&open_two));
        // One block over 1 MiB goes through the job path (and is still
        // sealed correctly).
        let mut large = segments(&[(1 << 20) + 1]).remove(0);
        let mut as_job = vec![large.clone()];
        let tag = cpu
            .seal_block(&key, nonce, &aads[0], &mut large)
            .expect("seals");
        let want = cpu
            .run(&mut seal_each(&key, &mut as_job, &aads))
            .expect("runs");
        assert!(!super::block_runs_on_caller(large.len()));
        assert!(matches!(&want[0], Ok(Output::Tag(t)) if *t == tag));
        assert_eq!(large, as_job[0]);
    }
}
