//! Batches of RSA private-key operations for the batch kernels
//! (`kernels/rsa.cu`, or their CPU emulation `rsa_emu`): many messages
//! under one key, many keys in one batch.
//!
//! The host side, the same for every executor:
//! - each input is checked (length, c < n) as the CPU backend does;
//! - messages are grouped by key size (one launch per size) and ordered
//!   within a launch by seed 004's 0, 1 or 2-pass sorting ([`RsaSort`]);
//! - each is blinded (c' = c * A mod n, A = r^e for a random r; the result
//!   is multiplied by r^-1): a fresh pair every 32 messages of a key (in
//!   launch order), squared in between, as OpenSSL's RSA blinding does;
//!   the fresh pairs of up to 16 runs of one key share one modular
//!   inversion (Montgomery's batch inversion);
//! - every result is checked with the public exponent (m^e mod n == c)
//!   before it is returned: a mismatch (a fault in the device or the
//!   kernel, which on a CRT result could reveal a prime) is an error and
//!   the value is dropped.
//!
//! On a CPU with AVX-512 IFMA the blinding and the checks run eight
//! messages of one key at a time (`rsa_ifma`: eight lanes, one modulus):
//! the checks on up to 8 consecutive messages of a key in launch order
//! ([`lane_groups`]), the blinding on up to 8 runs of a chunk (a lane a
//! run). Both give exactly the scalar `MontN` path's words, factors and
//! results (r^-1 is kept in `MontN`'s Montgomery form either way), which
//! stays for other CPUs and for a lone message or run; a check that fails
//! fails its own message only.
//!
//! Constant-time: the Montgomery products and squarings on secret values
//! (r, r^e, r^-1, their products, the unblinded result); see `rsa_mont`
//! and `rsa_ifma`. Which path a message takes depends on the CPU and on
//! the launch's layout (public), not on values.
//! Not constant-time: the one modular inversion per 16 pairs
//! (`num_bigint_dig`'s extended Euclid on the product of their r's), the
//! rejection of an r below 2 (a branch on the OR of its limbs), the
//! exponentiations (they branch on the public exponent), and the
//! comparisons of inputs and results (public or returned values).

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use num_bigint_dig::{BigUint, ModInverse};
use rand_core::RngCore;
use rayon::prelude::*;
use zeroize::Zeroizing;

use crate::error::{BackendError, SegmentErrorKind};
use crate::job::{Output, SegmentResult};
use crate::rsa_ifma::{Ifma, Lanes, LANES};
use crate::rsa_key::{CrtPlan, RsaPrivateKey};
use crate::rsa_mont::{be_bytes_below, less, limbs_of_be_exact, one, MontN};

/// One RSA private-key operation: `input` (exactly the modulus length,
/// big-endian) under `key`.
#[derive(Clone, Copy, Debug)]
pub struct RsaItem<'a> {
    pub key: &'a RsaPrivateKey,
    pub input: &'a [u8],
}

/// Order of the messages of a batch on the device (seed 004 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RsaSort {
    /// As given ("0 pass").
    None,
    /// Grouped by key ("1 pass"; the seed sorts by the exponent's first
    /// word, which groups by key; here the key itself is the sort key).
    ByKey,
    /// Grouped by key, the smallest groups first ("2 pass": the costly
    /// warps of many small groups take the lowest block indices, where the
    /// scheduler starts them first).
    #[default]
    ByKeySmallFirst,
}

impl RsaSort {
    /// The seed's name: 0, 1 or 2 passes.
    pub fn passes(self) -> u32 {
        match self {
            RsaSort::None => 0,
            RsaSort::ByKey => 1,
            RsaSort::ByKeySmallFirst => 2,
        }
    }

    pub fn from_passes(passes: u32) -> Option<RsaSort> {
        match passes {
            0 => Some(RsaSort::None),
            1 => Some(RsaSort::ByKey),
            2 => Some(RsaSort::ByKeySmallFirst),
            _ => None,
        }
    }
}

/// How a batch runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsaOptions {
    pub sort: RsaSort,
}

/// The window (bits) of the fixed-window exponentiation for keys with
/// `limbs` limbs per prime: the kernels' `RSA_WIN_*` (gpu/rsa.rs writes
/// them into rsa_abi.cuh) and the emulation's.
pub(crate) const fn window_for(limbs: usize) -> u32 {
    match limbs {
        0..=16 => 4,
        _ => 5,
    }
}

/// One kernel launch: the messages of one key size.
#[doc(hidden)]
pub struct Launch {
    /// Limbs per prime (N): 16, 32 or 64.
    pub limbs: usize,
    pub window: u32,
    /// Key records, `12 * limbs` words each.
    pub keys: Zeroizing<Vec<u32>>,
    /// Key record of each message.
    pub msg_key: Vec<u32>,
    /// 2N words per message (blinded).
    pub input: Vec<u32>,
}

impl Launch {
    pub fn messages(&self) -> usize {
        self.msg_key.len()
    }
}

/// What runs a launch: returns 2N words per message.
pub type Executor<'e> = dyn FnMut(&Launch) -> Result<Vec<u32>, String> + 'e;

/// Messages of one key in a row that share a blinding pair (each the
/// square of the one before).
const PAIR_USES: usize = 32;

/// Fresh blinding pairs of one key that share one modular inversion.
const PAIRS_PER_INVERSION: usize = 16;

/// Tries at a chunk's blinding pairs before the batch fails (a retry
/// needs an r below 2 or one sharing a factor with n: practically never).
const BLINDING_TRIES: usize = 8;

/// Fewest messages of a key in a row whose checks take the eight-lane
/// path: eight lanes cost about as much as 1 (RSA-4096) to 1.7
/// (RSA-1024) scalar checks on the development Xeon (Sapphire Rapids),
/// so a message alone stays scalar.
const MIN_CHECK_LANES: usize = 2;

/// Fewest runs of a chunk whose blinding takes the eight-lane path (the
/// same trade as [`MIN_CHECK_LANES`]).
const MIN_BLIND_LANES: usize = 2;

/// Wall time of each host phase of a batch, summed over its launches:
/// what `gvault bench rsa --host-only` reports.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RsaHostTimes {
    /// Input checks (length, key, c < n) and grouping by key size.
    pub check: Duration,
    /// Key records, per-key constants and the device order.
    pub layout: Duration,
    /// Blinding pairs and blinded inputs, written in launch order.
    pub blind: Duration,
    /// The executor (device or emulation): not host work.
    pub execute: Duration,
    /// Unblinding, public-exponent checks and result bytes.
    pub unblind_verify: Duration,
}

impl RsaHostTimes {
    /// All phases but the executor.
    pub fn host(&self) -> Duration {
        self.check + self.layout + self.blind + self.unblind_verify
    }
}

/// Runs `items` through `exec`, one result per item in order. `Err`: the
/// batch could not run (a key the kernels do not take, an executor
/// failure).
pub fn run_with(
    items: &[RsaItem<'_>],
    options: RsaOptions,
    exec: &mut Executor<'_>,
) -> Result<Vec<SegmentResult>, BackendError> {
    let mut times = RsaHostTimes::default();
    run_timed(items, options, exec, &mut rand_core::OsRng, &mut times)
}

/// [`run_with`] with the blinding randomness from `rng` and the time of
/// each host phase added to `times`. For benchmarks: with a seeded `rng`
/// the same batch reaches the executor as the same words, so a recorded
/// launch can be replayed; real work always takes the OS generator
/// through [`run_with`].
#[doc(hidden)]
pub fn run_timed(
    items: &[RsaItem<'_>],
    options: RsaOptions,
    exec: &mut Executor<'_>,
    rng: &mut dyn RngCore,
    times: &mut RsaHostTimes,
) -> Result<Vec<SegmentResult>, BackendError> {
    let start = Instant::now();
    let checked: Vec<Result<Result<&CrtPlan, SegmentErrorKind>, String>> =
        items.par_iter().map(check).collect();
    let mut results: Vec<Option<SegmentResult>> = vec![None; items.len()];
    // Item indices by key size (limbs), smallest first.
    let mut groups: BTreeMap<usize, Vec<(usize, &CrtPlan)>> = BTreeMap::new();
    for (i, c) in checked.into_iter().enumerate() {
        match c.map_err(BackendError::InvalidJob)? {
            Ok(plan) => groups.entry(plan.limbs).or_default().push((i, plan)),
            Err(kind) => results[i] = Some(Err(kind.at(i))),
        }
    }
    times.check += start.elapsed();
    for (limbs, group) in groups {
        let mut run = Group {
            items,
            group: &group,
            options,
            exec: &mut *exec,
            rng: &mut *rng,
            times: &mut *times,
        };
        let done = match limbs {
            16 => run.launch::<16>(),
            32 => run.launch::<32>(),
            64 => run.launch::<64>(),
            _ => Err(BackendError::InvalidJob(format!(
                "RSA keys of {limbs} limbs are not supported by the batch kernels"
            ))),
        }?;
        let start = Instant::now();
        for (i, r) in done {
            results[i] = Some(r);
        }
        times.unblind_verify += start.elapsed();
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| BackendError::Device(format!("RSA batch: no result for item {i}")))
        })
        .collect()
}

/// Runs `items` on the CPU emulation of the kernels (tests and CI).
pub fn run_emulated(
    items: &[RsaItem<'_>],
    options: RsaOptions,
) -> Result<Vec<SegmentResult>, BackendError> {
    run_with(items, options, &mut |l: &Launch| Ok(emulate(l)))
}

/// What the kernel computes for one launch, on the CPU.
pub fn emulate(l: &Launch) -> Vec<u32> {
    crate::rsa_emu::run(&l.keys, l.limbs, l.window, &l.msg_key, &l.input)
}

/// One item's checks, as the CPU backend's: its key's plan (`Err`: the
/// batch cannot run), then its length and range (`Ok(Err)`: this item
/// fails).
fn check<'a>(item: &RsaItem<'a>) -> Result<Result<&'a CrtPlan, SegmentErrorKind>, String> {
    let size = item.key.size();
    if item.input.len() != size {
        return Ok(Err(SegmentErrorKind::InputLength {
            expected: size,
            got: item.input.len(),
        }));
    }
    let plan = item.key.plan()?;
    let mont = &plan.mont;
    if !be_bytes_below(item.input, &mont.n[..mont.len]) {
        return Ok(Err(SegmentErrorKind::InputOutOfRange));
    }
    Ok(Ok(plan))
}

/// The checked messages of one key size and what runs them.
struct Group<'g, 'a, 'e> {
    items: &'g [RsaItem<'a>],
    /// (item index, its key's plan), in item order.
    group: &'g [(usize, &'a CrtPlan)],
    options: RsaOptions,
    exec: &'g mut Executor<'e>,
    rng: &'g mut dyn RngCore,
    times: &'g mut RsaHostTimes,
}

/// A key's constants for the launch's host work, `N` limbs.
struct KeyConsts<'a, const N: usize> {
    plan: &'a CrtPlan,
    mont: MontN<N>,
    /// The public exponent, little-endian bytes.
    e: Vec<u8>,
    /// R^(2-e) mod n: c * R^(1-e) = mul(c, this) is what the plain
    /// result m gives under `pow_public`, so the check needs no
    /// conversion into or out of Montgomery form.
    check_factor: [u64; N],
    /// The eight-lane arithmetic's constants, on a CPU that has it; made
    /// on first use (five products), so that keys with only lone
    /// messages never pay for them.
    ifma: OnceLock<Option<Ifma<N>>>,
}

impl<'a, const N: usize> KeyConsts<'a, N> {
    fn new(plan: &'a CrtPlan) -> KeyConsts<'a, N> {
        let mont = MontN::<N>::of(&plan.mont).expect("a plan's modulus has `limbs` limbs");
        let e = plan.e.to_bytes_le();
        // Kept with the key's plan: 18 products, once per key.
        let check_factor = plan.mont.check_factor.get_or_init(|| {
            let r_1_minus_e = mont.pow_public(&one(), &e);
            mont.to_mont(&r_1_minus_e).to_vec()
        });
        KeyConsts {
            plan,
            check_factor: check_factor[..].try_into().expect("N limbs"),
            ifma: OnceLock::new(),
            mont,
            e,
        }
    }

    /// The eight-lane constants; None where the CPU lacks AVX-512 IFMA.
    fn ifma(&self) -> Option<&Ifma<N>> {
        self.ifma.get_or_init(|| Ifma::new(&self.mont)).as_ref()
    }
}

/// What a message's result needs after the launch: r^-1 in Montgomery
/// form.
#[derive(Clone, Copy)]
struct Unblinding<const N: usize> {
    ai: [u64; N],
}

impl Group<'_, '_, '_> {
    /// Lays out, blinds, runs and checks the group (one launch): one
    /// result per message, with its item index.
    fn launch<const N: usize>(&mut self) -> Result<Vec<(usize, SegmentResult)>, BackendError> {
        let start = Instant::now();
        let (mut launch, order, keys) = layout::<N>(self.group, self.options.sort);
        self.times.layout += start.elapsed();

        let start = Instant::now();
        let inputs: Vec<&[u8]> = order
            .iter()
            .map(|&g| self.items[self.group[g].0].input)
            .collect();
        let unblinding = blind::<N>(&inputs, &launch.msg_key, &keys, &mut launch.input, self.rng)?;
        self.times.blind += start.elapsed();

        let start = Instant::now();
        let out = (self.exec)(&launch).map_err(BackendError::Device)?;
        self.times.execute += start.elapsed();
        if out.len() != launch.messages() * 2 * N {
            return Err(BackendError::Device(format!(
                "RSA launch returned {} words for {} messages of {} words",
                out.len(),
                launch.messages(),
                2 * N
            )));
        }

        let start = Instant::now();
        let group = self.group;
        let done = lane_groups(&launch.msg_key)
            .into_par_iter()
            .flat_map_iter(|slots| {
                let key = &keys[launch.msg_key[slots.start] as usize];
                let words = &out[slots.start * 2 * N..slots.end * 2 * N];
                let checked = unblind_and_check(
                    key,
                    words,
                    &unblinding[slots.clone()],
                    &inputs[slots.clone()],
                );
                let order = &order[slots];
                checked.into_iter().zip(order).map(move |(r, &g)| {
                    let index = group[g].0;
                    (index, r.map_err(|e| e.at(index)))
                })
            })
            .collect();
        self.times.unblind_verify += start.elapsed();
        Ok(done)
    }
}

/// The slots of a launch in groups of up to `LANES` consecutive messages
/// of one key (key records `msg_key`): what one eight-lane check takes.
fn lane_groups(msg_key: &[u32]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (slot, &k) in msg_key.iter().enumerate() {
        match out.last_mut() {
            Some(g) if msg_key[g.start] == k && g.len() < LANES => g.end += 1,
            _ => out.push(slot..slot + 1),
        }
    }
    out
}

/// The launch of one key size (inputs zero, for [`blind`] to fill), the
/// group position of the message in each slot, and each key record's
/// constants.
fn layout<'a, const N: usize>(
    group: &[(usize, &'a CrtPlan)],
    sort: RsaSort,
) -> (Launch, Vec<usize>, Vec<KeyConsts<'a, N>>) {
    let mut key_index: HashMap<*const CrtPlan, u32> = HashMap::new();
    let mut plans: Vec<&CrtPlan> = Vec::new();
    let mut keys = Zeroizing::new(Vec::new());
    let msg_key: Vec<u32> = group
        .iter()
        .map(|&(_, plan)| {
            *key_index.entry(plan as *const CrtPlan).or_insert_with(|| {
                keys.extend_from_slice(&plan.record);
                plans.push(plan);
                plans.len() as u32 - 1
            })
        })
        .collect();
    let order = sort_order(&msg_key, sort);
    let msg_key = order.iter().map(|&g| msg_key[g]).collect();
    let consts = plans.into_par_iter().map(KeyConsts::new).collect();
    let launch = Launch {
        limbs: N,
        window: window_for(N),
        keys,
        msg_key,
        input: vec![0u32; group.len() * 2 * N],
    };
    (launch, order, consts)
}

/// A run of messages in launch order that one key's blinding pairs
/// cover: up to `PAIRS_PER_INVERSION` pairs, each for up to `PAIR_USES`
/// messages.
struct Chunk {
    key: usize,
    /// First slot.
    start: usize,
    /// Messages of each pair.
    runs: Vec<usize>,
}

impl Chunk {
    fn messages(&self) -> usize {
        self.runs.iter().sum()
    }
}

/// The chunks of a launch whose slots have key records `msg_key`.
fn pair_chunks(msg_key: &[u32]) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    for (slot, &k) in msg_key.iter().enumerate() {
        let key = k as usize;
        match out.last_mut() {
            Some(c) if c.key == key && *c.runs.last().unwrap() < PAIR_USES => {
                *c.runs.last_mut().unwrap() += 1
            }
            Some(c) if c.key == key && c.runs.len() < PAIRS_PER_INVERSION => c.runs.push(1),
            _ => out.push(Chunk {
                key,
                start: slot,
                runs: vec![1],
            }),
        }
    }
    out
}

/// Blinds the launch's messages (`inputs`, in slot order) into its input
/// words: c * A mod n with A = r^e for a random r, unblinded by r^-1
/// after the exponentiation. A fresh pair (A, r^-1) starts every run of
/// up to `PAIR_USES` messages of one key, and is squared from one message
/// to the next (OpenSSL's BN_BLINDING update): two squarings a message
/// instead of an exponentiation and an inversion.
fn blind<const N: usize>(
    inputs: &[&[u8]],
    msg_key: &[u32],
    keys: &[KeyConsts<'_, N>],
    words: &mut [u32],
    rng: &mut dyn RngCore,
) -> Result<Vec<Unblinding<N>>, BackendError> {
    let zero = Unblinding { ai: [0; N] };
    let mut unblinding = vec![zero; inputs.len()];
    let chunks = pair_chunks(msg_key);
    let r_bytes = 8 * N - 1;
    let pairs: usize = chunks.iter().map(|c| c.runs.len()).sum();
    let mut random = Zeroizing::new(vec![0u8; pairs * r_bytes]);
    fill_random(rng, &mut random)?;
    let work: Vec<ChunkWork<'_, N>> = {
        let mut random = &random[..];
        let mut words = &mut words[..];
        let mut unblinding = &mut unblinding[..];
        chunks
            .iter()
            .map(|chunk| {
                let (r, rest_r) = random.split_at(chunk.runs.len() * r_bytes);
                let (w, rest_w) = std::mem::take(&mut words).split_at_mut(chunk.messages() * 2 * N);
                let (u, rest_u) = std::mem::take(&mut unblinding).split_at_mut(chunk.messages());
                (random, words, unblinding) = (rest_r, rest_w, rest_u);
                ChunkWork {
                    chunk,
                    random: r,
                    words: w,
                    unblinding: u,
                }
            })
            .collect()
    };
    let failed: Vec<usize> = work
        .into_par_iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let c = w.chunk;
            let slots = c.start..c.start + c.messages();
            let ok = blind_chunk(
                c,
                &keys[c.key],
                w.random,
                &inputs[slots],
                w.words,
                w.unblinding,
            );
            (!ok).then_some(i)
        })
        .collect();
    for i in failed {
        let c = &chunks[i];
        let slots = c.start..c.start + c.messages();
        let w = &mut words[slots.start * 2 * N..slots.end * 2 * N];
        let u = &mut unblinding[slots.clone()];
        let mut done = false;
        for _ in 0..BLINDING_TRIES {
            let mut r = Zeroizing::new(vec![0u8; c.runs.len() * r_bytes]);
            fill_random(rng, &mut r)?;
            if blind_chunk(c, &keys[c.key], &r, &inputs[slots.clone()], w, u) {
                done = true;
                break;
            }
        }
        if !done {
            return Err(BackendError::Device(
                "RSA blinding: no invertible blinding factor found".into(),
            ));
        }
    }
    Ok(unblinding)
}

/// One chunk's share of the random bytes and of the outputs.
struct ChunkWork<'w, const N: usize> {
    chunk: &'w Chunk,
    random: &'w [u8],
    words: &'w mut [u32],
    unblinding: &'w mut [Unblinding<N>],
}

fn fill_random(rng: &mut dyn RngCore, out: &mut [u8]) -> Result<(), BackendError> {
    rng.try_fill_bytes(out)
        .map_err(|e| BackendError::Device(format!("RSA blinding: no randomness: {e}")))
}

/// Blinds one chunk's messages with fresh pairs from `random` (8N - 1
/// bytes a pair: r < 2^(bits - 8) < n) into `words` (2N a message) and
/// `unblinding`. False: an r below 2, or the r's share a factor with n
/// (practically never); nothing usable was written.
fn blind_chunk<const N: usize>(
    chunk: &Chunk,
    key: &KeyConsts<'_, N>,
    random: &[u8],
    inputs: &[&[u8]],
    words: &mut [u32],
    unblinding: &mut [Unblinding<N>],
) -> bool {
    let mont = &key.mont;
    let r_bytes = 8 * N - 1;
    let mut r_plain: Zeroizing<Vec<[u64; N]>> =
        Zeroizing::new(Vec::with_capacity(chunk.runs.len()));
    let mut r_mont: Vec<[u64; N]> = Vec::with_capacity(chunk.runs.len());
    for bytes in random.chunks_exact(r_bytes) {
        let mut padded = [0u8; 8];
        padded[1..].copy_from_slice(&bytes[..7]);
        let mut r: [u64; N] = limbs_of_be_exact(&bytes[7..]);
        r[N - 1] = u64::from_be_bytes(padded);
        if !at_least_two(&r) {
            return false;
        }
        r_mont.push(mont.to_mont(&r));
        r_plain.push(r);
    }
    let Some(r_inv) = batch_inverse(key, &r_mont) else {
        return false;
    };
    if chunk.runs.len() >= MIN_BLIND_LANES {
        if let Some(v) = key.ifma() {
            blind_runs_ifma(v, chunk, key, &r_plain, &r_inv, inputs, words, unblinding);
            return true;
        }
    }
    let mut slot = 0;
    for ((&len, r), mut ai) in chunk.runs.iter().zip(&r_mont).zip(r_inv) {
        let mut a = mont.pow_public(r, &key.e);
        for k in 0..len {
            let c: [u64; N] = limbs_of_be_exact(inputs[slot]);
            let blinded = mont.mul(&c, &a);
            write_words(&mut words[slot * 2 * N..(slot + 1) * 2 * N], &blinded);
            unblinding[slot] = Unblinding { ai };
            if k + 1 < len {
                a = mont.sqr(&a);
                ai = mont.sqr(&ai);
            }
            slot += 1;
        }
    }
    true
}

/// `blind_chunk`'s products on the eight-lane path: the chunk's runs
/// eight at a time (a lane a run), the same values as the scalar loop.
#[allow(clippy::too_many_arguments)]
fn blind_runs_ifma<const N: usize>(
    v: &Ifma<N>,
    chunk: &Chunk,
    key: &KeyConsts<'_, N>,
    r: &[[u64; N]],
    r_inv: &[[u64; N]],
    inputs: &[&[u8]],
    words: &mut [u32],
    unblinding: &mut [Unblinding<N>],
) {
    // First slot of each run, within the chunk.
    let starts: Vec<usize> = chunk
        .runs
        .iter()
        .scan(0, |s, &len| {
            let start = *s;
            *s += len;
            Some(start)
        })
        .collect();
    let lanes = chunk.runs.chunks(LANES).zip(starts.chunks(LANES));
    for (g, (runs, starts)) in lanes.enumerate() {
        let first = g * LANES;
        let mut r_l: Zeroizing<Lanes<N>> = Zeroizing::new([[0; N]; LANES]);
        let mut ai_l: Zeroizing<Lanes<N>> = Zeroizing::new([[0; N]; LANES]);
        r_l[..runs.len()].copy_from_slice(&r[first..first + runs.len()]);
        ai_l[..runs.len()].copy_from_slice(&r_inv[first..first + runs.len()]);
        let steps = runs.iter().copied().max().unwrap_or(0);
        let mut c: Vec<Lanes<N>> = vec![[[0; N]; LANES]; steps];
        for (lane, (&len, &start)) in runs.iter().zip(starts).enumerate() {
            for (s, c) in c[..len].iter_mut().enumerate() {
                c[lane] = limbs_of_be_exact(inputs[start + s]);
            }
        }
        let mut blinded: Vec<Lanes<N>> = vec![[[0; N]; LANES]; steps];
        let mut ai_out: Zeroizing<Vec<Lanes<N>>> = Zeroizing::new(vec![[[0; N]; LANES]; steps]);
        v.blind_run(&r_l, &key.e, &ai_l, &c, &mut blinded, &mut ai_out);
        for (lane, (&len, &start)) in runs.iter().zip(starts).enumerate() {
            for s in 0..len {
                let slot = start + s;
                write_words(
                    &mut words[slot * 2 * N..(slot + 1) * 2 * N],
                    &blinded[s][lane],
                );
                unblinding[slot] = Unblinding {
                    ai: ai_out[s][lane],
                };
            }
        }
    }
}

/// `N` limbs as 2N little-endian 32-bit words.
fn write_words<const N: usize>(words: &mut [u32], v: &[u64; N]) {
    for (w, &l) in words.chunks_exact_mut(2).zip(v) {
        w[0] = l as u32;
        w[1] = (l >> 32) as u32;
    }
}

/// Whether `r` >= 2, without branching on its limbs.
fn at_least_two<const N: usize>(r: &[u64; N]) -> bool {
    let high = r[1..].iter().fold(0u64, |acc, &l| acc | l);
    (high != 0) | (r[0] >= 2)
}

/// The inverses of the Montgomery-form values `x` (Montgomery form) with
/// one modular inversion (Montgomery's trick: the inverse of the product,
/// then one product back per value). None: the product shares a factor
/// with n.
fn batch_inverse<const N: usize>(key: &KeyConsts<'_, N>, x: &[[u64; N]]) -> Option<Vec<[u64; N]>> {
    let mont = &key.mont;
    // prefix[i]: x[0] * ... * x[i].
    let mut prefix: Vec<[u64; N]> = Vec::with_capacity(x.len());
    for v in x {
        let next = match prefix.last() {
            Some(p) => mont.mul(p, v),
            None => *v,
        };
        prefix.push(next);
    }
    let product = Zeroizing::new(le_bytes(&mont.out_of_mont(prefix.last()?)));
    let product = Zeroizing::new(BigUint::from_bytes_le(&product));
    let inv = Zeroizing::new((*product).clone().mod_inverse(&key.plan.n)?.to_biguint()?);
    let inv_bytes = Zeroizing::new(inv.to_bytes_le());
    let mut acc = mont.to_mont(&limbs_of_le_exact(&inv_bytes));
    let mut out = vec![[0u64; N]; x.len()];
    for i in (1..x.len()).rev() {
        out[i] = mont.mul(&acc, &prefix[i - 1]);
        acc = mont.mul(&acc, &x[i]);
    }
    out[0] = acc;
    Some(out)
}

/// `N` limbs as little-endian bytes.
fn le_bytes<const N: usize>(v: &[u64; N]) -> Vec<u8> {
    v.iter().flat_map(|l| l.to_le_bytes()).collect()
}

/// Little-endian bytes (at most 8N) as `N` limbs.
fn limbs_of_le_exact<const N: usize>(bytes: &[u8]) -> [u64; N] {
    let mut out = [0u64; N];
    for (o, c) in out.iter_mut().zip(bytes.chunks(8)) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        *o = u64::from_le_bytes(w);
    }
    out
}

/// The results of a group of up to `LANES` consecutive messages of one
/// key (see [`lane_groups`]) from the launch's 2N words each: unblinded,
/// and each returned only if it passes the public-exponent check
/// (m^e mod n == c; a message that fails is an error, the others are
/// unaffected). Eight lanes at a time where the CPU has them and the
/// group is large enough, else [`unblind_and_check_one`].
fn unblind_and_check<const N: usize>(
    key: &KeyConsts<'_, N>,
    words: &[u32],
    u: &[Unblinding<N>],
    inputs: &[&[u8]],
) -> Vec<Result<Output, SegmentErrorKind>> {
    let count = u.len();
    let vector = if count >= MIN_CHECK_LANES {
        key.ifma()
    } else {
        None
    };
    let Some(v) = vector else {
        return words
            .chunks_exact(2 * N)
            .zip(u)
            .zip(inputs)
            .map(|((w, u), c)| unblind_and_check_one(key, w, u, c))
            .collect();
    };
    assert!(count <= LANES);
    // Lanes past `count` stay 0 (results ignored).
    let mut blinded: Lanes<N> = [[0; N]; LANES];
    let mut ai: Zeroizing<Lanes<N>> = Zeroizing::new([[0; N]; LANES]);
    for (lane, w) in words.chunks_exact(2 * N).enumerate() {
        blinded[lane] = limbs_of_words(w);
        ai[lane] = u[lane].ai;
    }
    let (m, m_e) = v.unblind_and_pow(&blinded, &ai, &key.e);
    (0..count)
        .map(|lane| {
            let in_range = less(&blinded[lane], &key.mont.n, N);
            let c: [u64; N] = limbs_of_be_exact(inputs[lane]);
            if !in_range || m_e[lane] != c {
                return Err(check_failed());
            }
            Ok(result_bytes(key, &m[lane]))
        })
        .collect()
}

/// One message's result on the scalar path: the check done as
/// m^e R^(1-e) == c R^(1-e) (both sides in the same Montgomery scaling).
fn unblind_and_check_one<const N: usize>(
    key: &KeyConsts<'_, N>,
    words: &[u32],
    u: &Unblinding<N>,
    input: &[u8],
) -> Result<Output, SegmentErrorKind> {
    let mont = &key.mont;
    let blinded_m: [u64; N] = limbs_of_words(words);
    let in_range = less(&blinded_m, &mont.n, N);
    let m = mont.mul(&blinded_m, &u.ai);
    let ck = mont.mul(&limbs_of_be_exact(input), &key.check_factor);
    if !in_range || mont.pow_public(&m, &key.e) != ck {
        return Err(check_failed());
    }
    Ok(result_bytes(key, &m))
}

/// 2N little-endian 32-bit words as `N` limbs.
fn limbs_of_words<const N: usize>(words: &[u32]) -> [u64; N] {
    let mut out = [0u64; N];
    for (l, w) in out.iter_mut().zip(words.chunks_exact(2)) {
        *l = w[0] as u64 | (w[1] as u64) << 32;
    }
    out
}

fn check_failed() -> SegmentErrorKind {
    SegmentErrorKind::Internal(
        "RSA result failed the public-exponent check (a device or kernel fault); discarded".into(),
    )
}

/// A checked result as the key's size in big-endian bytes.
fn result_bytes<const N: usize>(key: &KeyConsts<'_, N>, m: &[u64; N]) -> Output {
    let bytes: Vec<u8> = m.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    debug_assert_eq!(bytes.len(), key.plan.bits / 8);
    Output::Bytes(bytes)
}

/// The device order of messages with key indices `msg_key`: a permutation
/// of 0..len (stable within a key).
pub(crate) fn sort_order(msg_key: &[u32], sort: RsaSort) -> Vec<usize> {
    let mut order: Vec<usize> = (0..msg_key.len()).collect();
    match sort {
        RsaSort::None => {}
        RsaSort::ByKey => order.sort_by_key(|&i| msg_key[i]),
        RsaSort::ByKeySmallFirst => {
            let mut count: HashMap<u32, usize> = HashMap::new();
            for &k in msg_key {
                *count.entry(k).or_default() += 1;
            }
            order.sort_by_key(|&i| (count[&msg_key[i]], msg_key[i]));
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rsa::traits::{PrivateKeyParts, PublicKeyParts};

    use super::*;
    use crate::rsa_key::RsaPrivateKey;

    pub(super) fn key(bits: usize, seed: u64) -> RsaPrivateKey {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        RsaPrivateKey::from_key(rsa::RsaPrivateKey::new(&mut rng, bits).unwrap()).unwrap()
    }

    /// `count` random messages below the key's modulus.
    pub(super) fn messages(key: &RsaPrivateKey, count: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..count)
            .map(|_| {
                let mut b = vec![0u8; key.size()];
                rng.fill_bytes(&mut b);
                let v = BigUint::from_bytes_be(&b) % key.inner().n();
                let be = v.to_bytes_be();
                let mut out = vec![0u8; key.size()];
                out[key.size() - be.len()..].copy_from_slice(&be);
                out
            })
            .collect()
    }

    #[test]
    fn chunks_hold_at_most_32_messages_a_pair_and_16_pairs_of_one_key() {
        let msg_key: Vec<u32> = [(0u32, 600usize), (1, 40), (0, 5)]
            .iter()
            .flat_map(|&(k, n)| std::iter::repeat_n(k, n))
            .collect();
        let got: Vec<(usize, usize, Vec<usize>)> = pair_chunks(&msg_key)
            .into_iter()
            .map(|c| (c.key, c.start, c.runs))
            .collect();
        let mut want = vec![(0, 0, vec![32; 16]), (0, 512, vec![32, 32, 24])];
        want.push((1, 600, vec![32, 8]));
        want.push((0, 640, vec![5]));
        assert_eq!(got, want);
    }

    #[test]
    fn batch_inversion_inverts_each_value() {
        let k = key(1024, 11);
        let consts = KeyConsts::<16>::new(k.plan().unwrap());
        let mont = &consts.mont;
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        for count in [1usize, 2, 16] {
            let x: Vec<[u64; 16]> = (0..count)
                .map(|_| {
                    let mut v = [0u64; 16];
                    v.iter_mut().for_each(|l| *l = rng.next_u64());
                    v[15] >>= 8; // below n
                    mont.to_mont(&v)
                })
                .collect();
            let inv = batch_inverse(&consts, &x).unwrap();
            for (a, b) in x.iter().zip(&inv) {
                assert_eq!(mont.out_of_mont(&mont.mul(a, b)), one());
            }
        }
        // A value sharing a factor with n has no inverse.
        let p = limbs_of_le_exact::<16>(&k.inner().primes()[0].to_bytes_le());
        assert!(batch_inverse(&consts, &[mont.to_mont(&p)]).is_none());
    }

    /// Many pairs and several inversions of one key, and a second key in
    /// between: every result is the key's private operation.
    #[test]
    fn long_runs_of_one_key_match_the_rsa_crate() {
        let a = key(1024, 21);
        let b = key(1024, 22);
        let ma = messages(&a, 600, 1);
        let mb = messages(&b, 40, 2);
        let mut items: Vec<RsaItem<'_>> = ma[..300]
            .iter()
            .map(|m| RsaItem { key: &a, input: m })
            .collect();
        items.extend(mb.iter().map(|m| RsaItem { key: &b, input: m }));
        items.extend(ma[300..].iter().map(|m| RsaItem { key: &a, input: m }));
        let out = run_emulated(
            &items,
            RsaOptions {
                sort: RsaSort::None,
            },
        )
        .unwrap();
        for (item, r) in items.iter().zip(&out) {
            let c = BigUint::from_bytes_be(item.input);
            let want =
                rsa::hazmat::rsa_decrypt_and_check::<rand::rngs::OsRng>(item.key.inner(), None, &c)
                    .unwrap();
            let Ok(Output::Bytes(got)) = r else {
                panic!("no result: {r:?}")
            };
            assert_eq!(BigUint::from_bytes_be(got), want);
        }
    }

    /// A seeded blinding reaches the executor as the same words every
    /// time (what `bench rsa --host-only` replays); another seed differs.
    #[test]
    fn a_seeded_blinding_repeats_its_launch() {
        let k = key(1024, 31);
        let msgs = messages(&k, 70, 3);
        let items: Vec<RsaItem<'_>> = msgs.iter().map(|m| RsaItem { key: &k, input: m }).collect();
        let launch_words = |seed: u64| {
            let mut words = Vec::new();
            let mut exec = |l: &Launch| {
                words = l.input.clone();
                Ok(emulate(l))
            };
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut times = RsaHostTimes::default();
            let out = run_timed(
                &items,
                RsaOptions::default(),
                &mut exec,
                &mut rng,
                &mut times,
            );
            assert!(out.unwrap().iter().all(|r| r.is_ok()));
            words
        };
        let first = launch_words(5);
        assert_eq!(first, launch_words(5));
        assert_ne!(first, launch_words(6));
    }
}

#[cfg(test)]
mod lane_tests {
    use rand::SeedableRng;

    use super::tests::{key, messages};
    use super::*;

    /// The key's constants, with the eight-lane path (where the CPU has
    /// it) or forced scalar.
    fn consts<const N: usize>(plan: &CrtPlan, vector: bool) -> KeyConsts<'_, N> {
        let k = KeyConsts::<N>::new(plan);
        if !vector {
            k.ifma.set(None).ok().expect("not made yet");
        }
        k
    }

    #[test]
    fn lane_groups_hold_up_to_8_consecutive_messages_of_one_key() {
        let msg_key = [0u32, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let want = vec![0..3, 3..5, 5..13, 13..18, 18..19];
        assert_eq!(lane_groups(&msg_key), want);
        assert!(lane_groups(&[]).is_empty());
    }

    /// The eight-lane blinding and checks give exactly the scalar path's
    /// words, unblinding factors and results (or errors), for chunks of
    /// 1 to 16 runs with short last runs, and groups of 1 to 8 messages
    /// with faults in some.
    fn paths_agree<const N: usize>(bits: usize) {
        if !crate::rsa_ifma::available() {
            eprintln!("no AVX-512 IFMA on this CPU: both sides run the scalar path");
        }
        let k = key(bits, bits as u64);
        let plan = k.plan().unwrap();
        let (vector, scalar) = (consts::<N>(plan, true), consts::<N>(plan, false));
        for count in [1usize, 2, 33, 70, 300] {
            let msgs = messages(&k, count, count as u64);
            let inputs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
            let msg_key = vec![0u32; count];
            let run = |keys: &KeyConsts<'_, N>| {
                let mut words = vec![0u32; count * 2 * N];
                let mut rng = rand::rngs::StdRng::seed_from_u64(7);
                let u = blind::<N>(
                    &inputs,
                    &msg_key,
                    std::slice::from_ref(keys),
                    &mut words,
                    &mut rng,
                )
                .unwrap();
                (words, u.iter().map(|u| u.ai).collect::<Vec<_>>(), u)
            };
            let (words, ai, u) = run(&vector);
            let (words_s, ai_s, _) = run(&scalar);
            assert_eq!(words, words_s, "{count} messages");
            assert_eq!(ai, ai_s, "{count} messages");
            // The kernel's answers, some of them faulty.
            let launch = Launch {
                limbs: N,
                window: window_for(N),
                keys: Zeroizing::new(plan.record.to_vec()),
                msg_key: msg_key.clone(),
                input: words,
            };
            let mut out = emulate(&launch);
            for slot in (0..count).filter(|s| s % 7 == 3) {
                out[slot * 2 * N + slot % (2 * N)] ^= 1 << (slot % 32);
            }
            for g in lane_groups(&msg_key) {
                let words = &out[g.start * 2 * N..g.end * 2 * N];
                let v = unblind_and_check(&vector, words, &u[g.clone()], &inputs[g.clone()]);
                let s = unblind_and_check(&scalar, words, &u[g.clone()], &inputs[g.clone()]);
                for (i, (v, s)) in v.iter().zip(&s).enumerate() {
                    let slot = g.start + i;
                    match (v, s) {
                        (Ok(Output::Bytes(a)), Ok(Output::Bytes(b))) => {
                            assert_ne!(slot % 7, 3, "a faulty result passed");
                            assert_eq!(a, b);
                        }
                        (Err(a), Err(b)) => {
                            assert_eq!(slot % 7, 3, "a good result failed");
                            assert_eq!(format!("{a:?}"), format!("{b:?}"));
                        }
                        _ => panic!("the paths disagree at slot {slot}"),
                    }
                }
            }
        }
    }

    #[test]
    fn eight_lane_and_scalar_paths_agree_1024() {
        paths_agree::<16>(1024);
    }

    #[test]
    fn eight_lane_and_scalar_paths_agree_2048() {
        paths_agree::<32>(2048);
    }

    /// A fault in one message's result fails that message alone, wherever
    /// it sits: inside a group of 8, at a group's edges, in a short tail
    /// (eight lanes) or a lone message (scalar), with keys interleaved.
    #[test]
    fn a_faulty_result_fails_only_its_message_in_any_lane_group() {
        let a = key(1024, 41);
        let b = key(1024, 42);
        let ma = messages(&a, 30, 1);
        let mb = messages(&b, 9, 2);
        // Launch order as given: a x19 (groups 8, 8, 3), b x1, a x11
        // (8, 3), b x8 (8), a x0: groups of 1 (scalar) and 2..8.
        let mut items: Vec<RsaItem<'_>> = Vec::new();
        items.extend(ma[..19].iter().map(|m| RsaItem { key: &a, input: m }));
        items.push(RsaItem {
            key: &b,
            input: &mb[0],
        });
        items.extend(ma[19..].iter().map(|m| RsaItem { key: &a, input: m }));
        items.extend(mb[1..].iter().map(|m| RsaItem { key: &b, input: m }));
        let want: Vec<BigUint> = items
            .iter()
            .map(|item| {
                let c = BigUint::from_bytes_be(item.input);
                rsa::hazmat::rsa_decrypt_and_check::<rand::rngs::OsRng>(item.key.inner(), None, &c)
                    .unwrap()
            })
            .collect();
        let options = RsaOptions {
            sort: RsaSort::None,
        };
        for faulty in [
            vec![3usize],
            vec![0, 7, 8, 15],
            vec![17],
            vec![19],
            vec![20, 30],
            vec![31, 38],
            vec![4, 18, 19, 25, 35],
        ] {
            let out = run_with(&items, options, &mut |l: &Launch| {
                let mut w = emulate(l);
                for &slot in &faulty {
                    w[slot * 32 + (slot * 5) % 32] ^= 1 << 7;
                }
                Ok(w)
            })
            .unwrap();
            for (i, r) in out.iter().enumerate() {
                if faulty.contains(&i) {
                    let e = r
                        .as_ref()
                        .expect_err("a faulty result must not be returned");
                    assert_eq!(e.index, i);
                    assert!(
                        matches!(e.kind, SegmentErrorKind::Internal(ref s) if s.contains("public-exponent"))
                    );
                } else {
                    let Ok(Output::Bytes(got)) = r else {
                        panic!("no result at {i} (faults {faulty:?}): {r:?}")
                    };
                    assert_eq!(BigUint::from_bytes_be(got), want[i], "item {i}");
                }
            }
        }
    }
}
