//! Scheduling: one queue per operation, each a round robin over clients;
//! workers take the next request of the next op in turn and, when it is
//! small and batching is on, the compatible small requests at the heads of
//! the other clients' queues (and the next ones of the same clients, one
//! per client per round), so that many clients' small requests run as one
//! job (seed 004's batching) while none can starve another. Large requests
//! run alone, several at once on several workers (pipelined on the
//! backend's CPU pool and GPU streams).
//!
//! At most `workers` jobs run at once: each holds a slot. A request that
//! arrives while a slot is free and nothing of its op waits runs at once
//! on the thread that read it (no hand-off: the latency of a lone request
//! is one round trip); requests that find every slot taken queue, and
//! those are what batches are made of. Batching thus costs nothing when
//! the daemon keeps up and coalesces work when it does not.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use gvault_accel::{
    Backend, BackendError, ChunkParams, CtrCipher, CtrIv, CtrSegment, Data, DataMut, DigestAlgo,
    Iv128, Iv64, Job, Nonce96, OpKind, OpenSegment, RsaItem, SealSegment, SegmentResult, Tag,
};

use super::client::{Buffer, Client};
use super::keys::Key;
use crate::protocol::{CtrKind, DigestKind, ErrorCode, Reply, RunOp};

/// One segment of a request, resolved against the client's tables.
pub struct Segment {
    pub buf: Arc<Buffer>,
    pub offset: usize,
    pub len: usize,
    pub nonce: [u8; 12],
    pub tag: [u8; 16],
    pub aad: Vec<u8>,
    pub iv: Vec<u8>,
}

/// A validated run request waiting for a worker.
pub struct Pending {
    pub client: Arc<Client>,
    pub id: u64,
    pub op: RunOp,
    pub key: Option<Arc<Key>>,
    pub params: Option<ChunkParams>,
    pub segments: Vec<Segment>,
    pub bytes: u64,
}

impl Pending {
    /// Whether `other` can run in the same job as `self`: same op, same
    /// key (interned, so the same material is the same key), same
    /// parameters. RSA requests join under any keys (a job under many
    /// keys, as seed 004's server batches its clients' decryptions).
    fn joins(&self, other: &Pending) -> bool {
        let same_key = match (&self.key, &other.key) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let any_key = matches!(self.op, RunOp::Rsa { .. });
        self.op.shape() == other.op.shape() && (same_key || any_key) && self.params == other.params
    }
}

/// How batches are formed.
#[derive(Debug, Clone, Copy)]
pub struct BatchPolicy {
    pub enabled: bool,
    /// Requests of at most this many bytes are "small" and may be batched.
    pub small_bytes: u64,
    /// A batch stops growing at this many bytes ...
    pub max_bytes: u64,
    /// ... or this many requests.
    pub max_requests: usize,
    /// At most this many jobs of small requests of one op run at once; its
    /// other small requests wait and batch (large ones, which never batch,
    /// are not held back). Unbounded (every slot) suits the CPU, where
    /// small jobs run in parallel; a GPU-only daemon takes 2 a GPU, since
    /// a GPU job costs about as much for one request as for a hundred.
    pub per_op: usize,
}

#[derive(Default)]
struct OpQueue {
    /// Clients with queued requests, in round-robin order.
    order: VecDeque<u64>,
    by_client: HashMap<u64, VecDeque<Pending>>,
    /// Queued requests per key (by identity; 0 for none): a batch looks
    /// for partners only when some share its head's key (RSA: any key).
    by_key: HashMap<usize, usize>,
}

impl Pending {
    fn key_id(&self) -> usize {
        self.key.as_ref().map_or(0, |k| Arc::as_ptr(k) as usize)
    }
}

impl OpQueue {
    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    fn push(&mut self, p: Pending) {
        *self.by_key.entry(p.key_id()).or_default() += 1;
        let cid = p.client.id;
        let list = self.by_client.entry(cid).or_default();
        if list.is_empty() {
            self.order.push_back(cid);
        }
        list.push_back(p);
    }

    fn counted_out(&mut self, p: &Pending) {
        let id = p.key_id();
        if let Some(n) = self.by_key.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                self.by_key.remove(&id);
            }
        }
    }

    /// Requests queued under this key.
    fn with_key(&self, id: usize) -> usize {
        self.by_key.get(&id).copied().unwrap_or(0)
    }

    /// Removes a client's requests; how many there were.
    fn remove_client(&mut self, cid: u64) -> usize {
        let Some(list) = self.by_client.remove(&cid) else {
            return 0;
        };
        self.order.retain(|c| *c != cid);
        for p in &list {
            self.counted_out(p);
        }
        list.len()
    }

    /// The request `pop_next` would take.
    fn peek_next(&self) -> Option<&Pending> {
        let cid = self.order.front()?;
        self.by_client.get(cid)?.front()
    }

    /// The head of the next client's queue, the client moved to the back.
    fn pop_next(&mut self) -> Option<Pending> {
        let cid = self.order.pop_front()?;
        let q = self.by_client.get_mut(&cid)?;
        let p = q.pop_front();
        if q.is_empty() {
            self.by_client.remove(&cid);
        } else {
            self.order.push_back(cid);
        }
        if let Some(p) = &p {
            self.counted_out(p);
        }
        p
    }

    /// One round over the clients: from each, its head if `take` accepts
    /// it. Returns whether any was taken.
    fn round(&mut self, mut take: impl FnMut(&Pending) -> bool, out: &mut Vec<Pending>) -> bool {
        let mut took = false;
        for _ in 0..self.order.len() {
            let Some(cid) = self.order.pop_front() else {
                break;
            };
            let Some(q) = self.by_client.get_mut(&cid) else {
                continue;
            };
            let mut taken = None;
            if q.front().is_some_and(&mut take) {
                taken = q.pop_front();
            }
            if q.is_empty() {
                self.by_client.remove(&cid);
            } else {
                self.order.push_back(cid);
            }
            if let Some(p) = taken {
                self.counted_out(&p);
                out.push(p);
                took = true;
            }
        }
        took
    }
}

/// Counters per op, for `gvault serve status`.
#[derive(Default)]
pub struct OpStats {
    pub requests: AtomicU64,
    pub jobs: AtomicU64,
    pub segments: AtomicU64,
    pub bytes: AtomicU64,
    pub largest_batch: AtomicU64,
    pub busy_ns: AtomicU64,
}

struct State {
    ops: Vec<OpQueue>,
    next_op: usize,
    queued: usize,
    closing: bool,
    /// Jobs that may start now (one per worker, taken by workers and by
    /// readers running a request at once).
    free_slots: usize,
    /// Jobs of small requests running per op (bounded by `per_op`).
    running: Vec<usize>,
}

pub struct Scheduler {
    state: Mutex<State>,
    wake: Condvar,
    policy: BatchPolicy,
    pub stats: Vec<OpStats>,
}

fn op_index(op: OpKind) -> usize {
    OpKind::ALL.iter().position(|o| *o == op).unwrap_or(0)
}

impl Scheduler {
    pub fn new(policy: BatchPolicy, slots: usize) -> Self {
        Self {
            state: Mutex::new(State {
                ops: (0..OpKind::ALL.len()).map(|_| OpQueue::default()).collect(),
                next_op: 0,
                queued: 0,
                closing: false,
                free_slots: slots.max(1),
                running: vec![0; OpKind::ALL.len()],
            }),
            wake: Condvar::new(),
            policy,
            stats: (0..OpKind::ALL.len()).map(|_| OpStats::default()).collect(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a request now on the calling thread if a slot is free and no
    /// request of its op waits (it would have nothing to batch with);
    /// otherwise queues it. Refused (returned) once the daemon is closing.
    pub fn submit_or_run(&self, backend: &dyn Backend, p: Pending) -> Result<(), Pending> {
        let op = op_index(p.op.kind());
        let small = self.small(&p);
        {
            let mut st = self.lock();
            let idle = st.ops[op].is_empty();
            let held = small && st.running[op] >= self.policy.per_op;
            if st.closing || !idle || st.free_slots == 0 || held {
                drop(st);
                return self.submit(p);
            }
            st.free_slots -= 1;
            st.running[op] += small as usize;
        }
        self.run_batch(backend, vec![p]);
        self.release_slot(op, small);
        Ok(())
    }

    /// Whether a request may be batched (and so is held to `per_op`).
    fn small(&self, p: &Pending) -> bool {
        self.policy.enabled && p.bytes <= self.policy.small_bytes
    }

    fn release_slot(&self, op: usize, small: bool) {
        let mut st = self.lock();
        st.free_slots += 1;
        st.running[op] = st.running[op].saturating_sub(small as usize);
        let waiting = st.queued > 0 || st.closing;
        drop(st);
        if waiting {
            self.wake.notify_one();
        }
    }

    /// Queues a request; refused (returned) once the daemon is closing.
    pub fn submit(&self, p: Pending) -> Result<(), Pending> {
        let mut st = self.lock();
        if st.closing {
            return Err(p);
        }
        st.ops[op_index(p.op.kind())].push(p);
        st.queued += 1;
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// Requests waiting per op (op name, count).
    pub fn queued(&self) -> Vec<(OpKind, usize)> {
        let st = self.lock();
        OpKind::ALL
            .iter()
            .zip(&st.ops)
            .map(|(op, q)| (*op, q.by_client.values().map(VecDeque::len).sum()))
            .collect()
    }

    /// Drops a departed client's queued requests (nobody will read their
    /// replies).
    pub fn forget_client(&self, cid: u64) {
        let mut st = self.lock();
        let mut dropped = 0;
        for q in &mut st.ops {
            dropped += q.remove_client(cid);
        }
        st.queued -= dropped;
    }

    /// Stops taking requests: every queued one is failed with a clear
    /// error; workers finish what they run and return.
    pub fn close(&self) {
        let drained: Vec<Pending> = {
            let mut st = self.lock();
            st.closing = true;
            let mut out = Vec::new();
            for q in &mut st.ops {
                while let Some(p) = q.pop_next() {
                    out.push(p);
                }
            }
            st.queued = 0;
            out
        };
        self.wake.notify_all();
        for p in drained {
            p.client.reply(
                p.id,
                Reply::Error {
                    code: ErrorCode::ShuttingDown,
                    message: "the gvault service is shutting down; the request did not run".into(),
                },
            );
        }
    }

    /// The next batch and its slot, waiting for both; `None` once closing
    /// and empty.
    fn next_batch(&self) -> Option<Vec<Pending>> {
        let mut st = self.lock();
        loop {
            if st.free_slots > 0 {
                if let Some(b) = self.take_batch(&mut st) {
                    st.queued -= b.len();
                    st.free_slots -= 1;
                    st.running[op_index(b[0].op.kind())] += self.small(&b[0]) as usize;
                    return Some(b);
                }
            }
            if st.closing && st.queued == 0 {
                return None;
            }
            st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn take_batch(&self, st: &mut State) -> Option<Vec<Pending>> {
        let n = st.ops.len();
        for i in 0..n {
            let at = (st.next_op + i) % n;
            let at_bound = st.running[at] >= self.policy.per_op;
            match st.ops[at].peek_next() {
                None => continue,
                Some(head) if at_bound && self.small(head) => continue,
                Some(_) => {}
            }
            st.next_op = (at + 1) % n;
            let q = &mut st.ops[at];
            let first = q.pop_next()?;
            let pol = self.policy;
            let mut batch = vec![first];
            // Partners share the head's key, except for RSA (any key).
            let partners = if matches!(batch[0].op, RunOp::Rsa { .. }) {
                !q.is_empty()
            } else {
                q.with_key(batch[0].key_id()) > 0
            };
            if pol.enabled && batch[0].bytes <= pol.small_bytes && partners {
                let mut bytes = batch[0].bytes;
                let mut segs = batch[0].segments.len();
                let mut count = 1;
                loop {
                    let mut taken = Vec::new();
                    let head = &batch[0];
                    let took = q.round(
                        |p| {
                            let fits = p.bytes <= pol.small_bytes
                                && bytes + p.bytes <= pol.max_bytes
                                && segs + p.segments.len() <= crate::protocol::MAX_SEGMENTS
                                && count < pol.max_requests
                                && head.joins(p);
                            if fits {
                                count += 1;
                                bytes += p.bytes;
                                segs += p.segments.len();
                            }
                            fits
                        },
                        &mut taken,
                    );
                    batch.append(&mut taken);
                    if !took || batch.len() >= pol.max_requests {
                        break;
                    }
                }
            }
            return Some(batch);
        }
        None
    }

    /// A worker: runs batches until the scheduler closes.
    pub fn work(&self, backend: &dyn Backend) {
        while let Some(batch) = self.next_batch() {
            let op = op_index(batch[0].op.kind());
            let small = self.small(&batch[0]);
            self.run_batch(backend, batch);
            self.release_slot(op, small);
        }
    }

    /// Runs a batch as one job, counts it, and replies to each request.
    fn run_batch(&self, backend: &dyn Backend, batch: Vec<Pending>) {
        let started = std::time::Instant::now();
        let live: Vec<Pending> = batch.into_iter().filter(|p| p.client.is_open()).collect();
        if live.is_empty() {
            return;
        }
        let op = live[0].op.kind();
        let replies = std::panic::catch_unwind(AssertUnwindSafe(|| execute(backend, &live)))
            .unwrap_or_else(|_| {
                let err = BackendError::Device("the job panicked in the daemon".into());
                live.iter().map(|_| Reply::RunFailed(err.clone())).collect()
            });
        let s = &self.stats[op_index(op)];
        s.jobs.fetch_add(1, Ordering::Relaxed);
        s.requests.fetch_add(live.len() as u64, Ordering::Relaxed);
        s.segments.fetch_add(
            live.iter().map(|p| p.segments.len() as u64).sum(),
            Ordering::Relaxed,
        );
        s.bytes
            .fetch_add(live.iter().map(|p| p.bytes).sum(), Ordering::Relaxed);
        s.largest_batch
            .fetch_max(live.len() as u64, Ordering::Relaxed);
        s.busy_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        for (p, r) in live.iter().zip(replies) {
            p.client.reply(p.id, r);
        }
    }
}

/// Runs a batch as one job; one reply per request.
fn execute(backend: &dyn Backend, batch: &[Pending]) -> Vec<Reply> {
    let head = &batch[0];
    let segs = batch.iter().flat_map(|p| p.segments.iter());
    // The slices of the job (SAFETY of `host`): each segment lies inside its buffer
    // (checked when the request was resolved, and buffers never shrink);
    // in-place segments of one request do not overlap (checked too), and
    // the buffer's Arc keeps the mapping alive for the job. The client may
    // write the same pages concurrently: the bytes are plain data, any
    // value is valid, and a racing client can only spoil its own results.
    #[allow(clippy::mut_from_ref)] // shared memory, see above
    fn host(s: &Segment) -> Option<&mut [u8]> {
        // SAFETY: see above.
        unsafe { s.buf.mem.slice_mut(s.offset, s.len) }
    }
    let results = (|| -> Result<Vec<SegmentResult>, BackendError> {
        let missing = || BackendError::Device("a segment left its buffer".into());
        let key = head.key.as_deref();
        // RSA batches may hold several keys (`Pending::joins`).
        let one_key = || {
            batch
                .iter()
                .all(|p| matches!((&p.key, &head.key), (Some(a), Some(b)) if Arc::ptr_eq(a, b)))
        };
        let mut job = match (head.op, key) {
            (RunOp::Seal { .. }, Some(Key::Aes256(k))) => Job::Seal {
                key: k,
                segments: segs
                    .map(|s| {
                        Ok(SealSegment {
                            nonce: Nonce96::from_bytes(s.nonce),
                            aad: &s.aad,
                            data: DataMut::Host(host(s).ok_or_else(missing)?),
                        })
                    })
                    .collect::<Result<_, BackendError>>()?,
            },
            (RunOp::Open { .. }, Some(Key::Aes256(k))) => Job::Open {
                key: k,
                segments: segs
                    .map(|s| {
                        Ok(OpenSegment {
                            nonce: Nonce96::from_bytes(s.nonce),
                            aad: &s.aad,
                            tag: Tag::from_bytes(s.tag),
                            data: DataMut::Host(host(s).ok_or_else(missing)?),
                        })
                    })
                    .collect::<Result<_, BackendError>>()?,
            },
            (RunOp::Ctr { cipher, .. }, Some(k)) => Job::Ctr {
                cipher: match (cipher, k) {
                    (CtrKind::Aes256, Key::Aes256(k)) => CtrCipher::Aes256(k),
                    (CtrKind::Tea, Key::Tea(k)) => CtrCipher::Tea(k),
                    (CtrKind::Blowfish, Key::Blowfish(k)) => CtrCipher::Blowfish(k),
                    _ => return Err(BackendError::InvalidJob("key kind".into())),
                },
                segments: segs
                    .map(|s| {
                        Ok(CtrSegment {
                            iv: ctr_iv(&s.iv).ok_or_else(|| {
                                BackendError::InvalidJob("a counter block of 8 or 16 bytes".into())
                            })?,
                            data: DataMut::Host(host(s).ok_or_else(missing)?),
                        })
                    })
                    .collect::<Result<_, BackendError>>()?,
            },
            (RunOp::Digest { algo, .. }, k) => Job::Digest {
                algo: match (algo, k) {
                    (DigestKind::Blake3Keyed, Some(Key::Blake3(k))) => DigestAlgo::Blake3Keyed(k),
                    (DigestKind::Blake3, _) => DigestAlgo::Blake3,
                    (DigestKind::Sha256, _) => DigestAlgo::Sha256,
                    (DigestKind::Md5, _) => DigestAlgo::Md5,
                    (DigestKind::Crc32, _) => DigestAlgo::Crc32,
                    (DigestKind::Crc32c, _) => DigestAlgo::Crc32c,
                    _ => return Err(BackendError::InvalidJob("key kind".into())),
                },
                segments: read_only(segs, host)?,
            },
            (RunOp::Chunk { .. }, _) => Job::Chunk {
                params: head.params.unwrap_or(ChunkParams::DEFAULT),
                segments: read_only(segs, host)?,
            },
            (RunOp::ChunkDigest { crc32c, .. }, Some(Key::Blake3(k))) => Job::ChunkDigest {
                params: head.params.unwrap_or(ChunkParams::DEFAULT),
                key: k,
                crc32c,
                segments: read_only(segs, host)?,
            },
            (RunOp::Rsa { .. }, Some(Key::Rsa(k))) if one_key() => Job::RsaPrivate {
                key: k,
                segments: segs
                    .map(|s| host(s).map(|b| &*b).ok_or_else(missing))
                    .collect::<Result<_, BackendError>>()?,
            },
            (RunOp::Rsa { .. }, Some(Key::Rsa(_))) => {
                let mut items = Vec::with_capacity(batch.iter().map(|p| p.segments.len()).sum());
                for p in batch {
                    let Some(Key::Rsa(k)) = p.key.as_deref() else {
                        return Err(BackendError::InvalidJob(
                            "an RSA request without an RSA key".into(),
                        ));
                    };
                    for s in &p.segments {
                        items.push(RsaItem {
                            key: k,
                            input: host(s).map(|b| &*b).ok_or_else(missing)?,
                        });
                    }
                }
                Job::RsaPrivateKeys { items }
            }
            _ => {
                return Err(BackendError::InvalidJob(
                    "key kind does not fit the op".into(),
                ))
            }
        };
        backend.run(&mut job)
    })();
    match results {
        Err(e) => batch.iter().map(|_| Reply::RunFailed(e.clone())).collect(),
        Ok(all) => {
            let mut it = all.into_iter();
            let mut base = 0;
            batch
                .iter()
                .map(|p| {
                    let n = p.segments.len();
                    let mine: Vec<SegmentResult> = it
                        .by_ref()
                        .take(n)
                        .map(|r| {
                            r.map_err(|mut e| {
                                e.index = e.index.saturating_sub(base);
                                e
                            })
                        })
                        .collect();
                    base += n;
                    if mine.len() == n {
                        Reply::Run(mine)
                    } else {
                        Reply::RunFailed(BackendError::Device(format!(
                            "the backend returned {} results for {n} segments",
                            mine.len()
                        )))
                    }
                })
                .collect()
        }
    }
}

/// A CTR segment's counter block: 16 bytes (AES) or 8 (TEA, Blowfish).
pub fn ctr_iv(iv: &[u8]) -> Option<CtrIv> {
    match iv.len() {
        16 => Iv128::try_from_slice(iv).ok().map(CtrIv::B128),
        8 => Iv64::try_from_slice(iv).ok().map(CtrIv::B64),
        _ => None,
    }
}

fn read_only<'a>(
    segs: impl Iterator<Item = &'a Segment>,
    host: impl Fn(&'a Segment) -> Option<&'a mut [u8]>,
) -> Result<Vec<Data<'a>>, BackendError> {
    segs.map(|s| {
        host(s)
            .map(|b| Data::Host(&*b))
            .ok_or_else(|| BackendError::Device("a segment left its buffer".into()))
    })
    .collect()
}
