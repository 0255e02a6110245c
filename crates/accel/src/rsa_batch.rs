//! Batches of RSA private-key operations for the batch kernels
//! (`kernels/rsa.cu`, or their CPU emulation `rsa_emu`): many messages
//! under one key, many keys in one batch.
//!
//! The host side, the same for every executor:
//! - each input is checked (length, c < n) as the CPU backend does;
//! - each is blinded (c' = c * A mod n, A = r^e for a random r; the result
//!   is multiplied by r^-1): a fresh pair every 32 messages of a key,
//!   squared in between, as OpenSSL's RSA blinding does;
//! - messages are grouped by key size (one launch per size) and ordered
//!   within a launch by seed 004's 0, 1 or 2-pass sorting ([`RsaSort`]);
//! - every result is checked with the public exponent (m^e mod n == c)
//!   before it is returned: a mismatch (a fault in the device or the
//!   kernel, which on a CRT result could reveal a prime) is an error and
//!   the value is dropped.

use std::collections::HashMap;

use num_bigint_dig::{BigUint, ModInverse};
use rand_core::RngCore;
use rayon::prelude::*;
use zeroize::Zeroizing;

use crate::error::{BackendError, SegmentErrorKind};
use crate::job::{Output, SegmentResult};
use crate::rsa_key::{CrtPlan, RsaPrivateKey};
use crate::rsa_mont::{be_bytes, less, limbs_of, limbs_of_be_bytes, Limbs, MAX_LIMBS};

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

/// A checked, blinded message (limbs: 64-bit, little-endian, the
/// modulus's count).
struct Prepared<'a> {
    index: usize,
    plan: &'a CrtPlan,
    key: *const RsaPrivateKey,
    /// The input, for the public-exponent check.
    c: Vec<u64>,
    /// c * A mod n, what the kernel exponentiates.
    blinded: Vec<u64>,
    /// A^-d = r^-1 in Montgomery form: the unblinding factor.
    ai: Vec<u64>,
}

// SAFETY: `key` is only compared as an address, never dereferenced.
unsafe impl Send for Prepared<'_> {}
unsafe impl Sync for Prepared<'_> {}

/// Runs `items` through `exec`, one result per item in order. `Err`: the
/// batch could not run (a key the kernels do not take, an executor
/// failure).
pub fn run_with(
    items: &[RsaItem<'_>],
    options: RsaOptions,
    exec: &mut Executor<'_>,
) -> Result<Vec<SegmentResult>, BackendError> {
    let mut results: Vec<Option<SegmentResult>> = vec![None; items.len()];
    let mut ok: Vec<(usize, &CrtPlan, Vec<u64>)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let size = item.key.size();
        if item.input.len() != size {
            results[i] = Some(Err(SegmentErrorKind::InputLength {
                expected: size,
                got: item.input.len(),
            }
            .at(i)));
            continue;
        }
        let plan = item.key.plan().map_err(BackendError::InvalidJob)?;
        let len = plan.mont.len;
        let c = limbs_of_be_bytes(item.input);
        if !less(&c, &plan.mont.n, len) {
            results[i] = Some(Err(SegmentErrorKind::InputOutOfRange.at(i)));
            continue;
        }
        ok.push((i, plan, c[..len].to_vec()));
    }
    let prepared = blind(items, ok)?;
    // One launch per key size, smallest first.
    let mut sizes: Vec<usize> = prepared.iter().map(|p| p.plan.limbs).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for limbs in sizes {
        let group: Vec<&Prepared<'_>> = prepared.iter().filter(|p| p.plan.limbs == limbs).collect();
        let (launch, order) = layout(&group, limbs, options.sort);
        let out = exec(&launch).map_err(BackendError::Device)?;
        if out.len() != launch.messages() * 2 * limbs {
            return Err(BackendError::Device(format!(
                "RSA launch returned {} words for {} messages of {} words",
                out.len(),
                launch.messages(),
                2 * limbs
            )));
        }
        let checked: Vec<(usize, SegmentResult)> = order
            .par_iter()
            .enumerate()
            .map(|(slot, &g)| {
                let p = group[g];
                let words = &out[slot * 2 * limbs..(slot + 1) * 2 * limbs];
                (
                    p.index,
                    unblind_and_check(p, words).map_err(|k| k.at(p.index)),
                )
            })
            .collect();
        for (i, r) in checked {
            results[i] = Some(r);
        }
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

/// Blinds every checked message: c * A mod n with A = r^e for a random r,
/// unblinded by r^-1 after the exponentiation. A fresh pair (A, r^-1)
/// starts every run of up to `PAIR_USES` messages of one key, and is
/// squared from one message to the next (OpenSSL's BN_BLINDING update):
/// two products a message instead of an exponentiation and an inversion.
fn blind<'a>(
    items: &[RsaItem<'a>],
    ok: Vec<(usize, &'a CrtPlan, Vec<u64>)>,
) -> Result<Vec<Prepared<'a>>, BackendError> {
    const PAIR_USES: usize = 32;
    type Entry<'a> = (usize, &'a CrtPlan, Vec<u64>);
    let mut runs: Vec<Vec<Entry<'a>>> = Vec::new();
    for entry in ok {
        match runs.last_mut() {
            Some(run) if run.len() < PAIR_USES && std::ptr::eq(run[0].1, entry.1) => {
                run.push(entry)
            }
            _ => runs.push(vec![entry]),
        }
    }
    let done: Result<Vec<Vec<Prepared<'a>>>, BackendError> = runs
        .into_par_iter()
        .map(|run| {
            let plan = run[0].1;
            let mont = &plan.mont;
            let (mut a, mut ai) = blinding_pair(plan)?;
            let mut out = Vec::with_capacity(run.len());
            for (index, plan, c) in run {
                let blinded = mont.mul(&c, &a)[..mont.len].to_vec();
                out.push(Prepared {
                    index,
                    plan,
                    key: items[index].key as *const RsaPrivateKey,
                    c,
                    blinded,
                    ai: ai[..mont.len].to_vec(),
                });
                a = mont.mul(&a, &a);
                ai = mont.mul(&ai, &ai);
            }
            Ok(out)
        })
        .collect();
    Ok(done?.into_iter().flatten().collect())
}

/// (r^e, r^-1) mod n in Montgomery form, r random in [2, n).
fn blinding_pair(plan: &CrtPlan) -> Result<(Limbs, Limbs), BackendError> {
    let mont = &plan.mont;
    let size = plan.bits / 8;
    for _ in 0..8 {
        // size - 1 random bytes: r < 2^(bits - 8) < n.
        let mut bytes = Zeroizing::new(vec![0u8; size - 1]);
        rand_core::OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| BackendError::Device(format!("RSA blinding: no randomness: {e}")))?;
        let r = Zeroizing::new(BigUint::from_bytes_be(&bytes));
        if r.bits() < 2 {
            continue;
        }
        // No inverse: r shares a factor with n (practically never).
        let Some(inv) = (*r)
            .clone()
            .mod_inverse(&plan.n)
            .and_then(|v| v.to_biguint())
        else {
            continue;
        };
        let r_m = mont.to_mont(&limbs_of(&r));
        let a = mont.pow(&r_m, &plan.e);
        let ai = mont.to_mont(&limbs_of(&inv));
        return Ok((a, ai));
    }
    Err(BackendError::Device(
        "RSA blinding: no invertible blinding factor found".into(),
    ))
}

/// The launch of one key size, and for each of its slots the index in
/// `group` of the message there.
fn layout(group: &[&Prepared<'_>], limbs: usize, sort: RsaSort) -> (Launch, Vec<usize>) {
    let mut key_index: HashMap<*const RsaPrivateKey, u32> = HashMap::new();
    let mut keys = Zeroizing::new(Vec::new());
    let mut msg_key = Vec::with_capacity(group.len());
    for p in group {
        let next = key_index.len() as u32;
        let k = *key_index.entry(p.key).or_insert_with(|| {
            keys.extend_from_slice(&p.plan.record);
            next
        });
        msg_key.push(k);
    }
    let order = sort_order(&msg_key, sort);
    let mut input = vec![0u32; group.len() * 2 * limbs];
    for (slot, &g) in order.iter().enumerate() {
        let words = &mut input[slot * 2 * limbs..(slot + 1) * 2 * limbs];
        for (j, &l) in group[g].blinded.iter().enumerate() {
            words[2 * j] = l as u32;
            words[2 * j + 1] = (l >> 32) as u32;
        }
    }
    let msg_key = order.iter().map(|&g| msg_key[g]).collect();
    (
        Launch {
            limbs,
            window: window_for(limbs),
            keys,
            msg_key,
            input,
        },
        order,
    )
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

/// The result of one message from the launch's 2N words: unblinded, and
/// returned only if it passes the public-exponent check.
fn unblind_and_check(p: &Prepared<'_>, words: &[u32]) -> Result<Output, SegmentErrorKind> {
    let mont = &p.plan.mont;
    let len = mont.len;
    let mut blinded_m = [0u64; MAX_LIMBS];
    for j in 0..len {
        blinded_m[j] = words[2 * j] as u64 | (words[2 * j + 1] as u64) << 32;
    }
    let in_range = less(&blinded_m, &mont.n, len);
    let m = mont.mul(&blinded_m, &p.ai);
    let back = mont.out_of_mont(&mont.pow(&mont.to_mont(&m), &p.plan.e));
    if !in_range || back[..len] != p.c[..] {
        return Err(SegmentErrorKind::Internal(
            "RSA result failed the public-exponent check (a device or kernel fault); discarded"
                .into(),
        ));
    }
    Ok(Output::Bytes(be_bytes(&m, len, p.plan.bits / 8)))
}
