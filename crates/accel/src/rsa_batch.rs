//! Batches of RSA private-key operations for the batch kernels
//! (`kernels/rsa.cu`, or their CPU emulation `rsa_emu`): many messages
//! under one key, many keys in one batch.
//!
//! The host side, the same for every executor:
//! - each input is checked (length, c < n) as the CPU backend does;
//! - each is blinded as the CPU path does (c' = c * r^e mod n, r random;
//!   the result is multiplied by r^-1, inverses found for many r at once);
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
use crate::rsa_key::{put_limbs, CrtPlan, RsaPrivateKey};

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

/// A checked, blinded message.
struct Prepared<'a> {
    index: usize,
    plan: &'a CrtPlan,
    key: *const RsaPrivateKey,
    c: BigUint,
    blinded: BigUint,
    r_inv: BigUint,
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
    let mut ok: Vec<(usize, &CrtPlan, BigUint)> = Vec::with_capacity(items.len());
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
        let c = BigUint::from_bytes_be(item.input);
        if c >= plan.n {
            results[i] = Some(Err(SegmentErrorKind::InputOutOfRange.at(i)));
            continue;
        }
        ok.push((i, plan, c));
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

/// Blinds every checked message (c * r^e mod n), with r^-1 for the
/// unblinding; the inverses of a chunk of messages under one key cost one
/// modular inversion (Montgomery's trick).
fn blind<'a>(
    items: &[RsaItem<'a>],
    ok: Vec<(usize, &'a CrtPlan, BigUint)>,
) -> Result<Vec<Prepared<'a>>, BackendError> {
    const CHUNK: usize = 64;
    // Chunks of consecutive messages of one key: a chunk shares n.
    let mut chunks: Vec<Vec<(usize, &'a CrtPlan, BigUint)>> = Vec::new();
    for entry in ok {
        let same = chunks
            .last()
            .is_some_and(|c: &Vec<(usize, &CrtPlan, BigUint)>| {
                c.len() < CHUNK && std::ptr::eq(c[0].1, entry.1)
            });
        if same {
            if let Some(last) = chunks.last_mut() {
                last.push(entry);
            }
        } else {
            chunks.push(vec![entry]);
        }
    }
    let done: Result<Vec<Vec<Prepared<'a>>>, BackendError> = chunks
        .into_par_iter()
        .map(|chunk| {
            let plan = chunk[0].1;
            let (rs, invs) = blinding_factors(plan, chunk.len())?;
            Ok(chunk
                .into_iter()
                .zip(rs.into_iter().zip(invs))
                .map(|((index, plan, c), (r_e, r_inv))| Prepared {
                    index,
                    plan,
                    key: items[index].key as *const RsaPrivateKey,
                    blinded: (&c * &r_e) % &plan.n,
                    c,
                    r_inv,
                })
                .collect())
        })
        .collect();
    Ok(done?.into_iter().flatten().collect())
}

/// `count` pairs (r^e mod n, r^-1 mod n) for random r in [2, n).
fn blinding_factors(
    plan: &CrtPlan,
    count: usize,
) -> Result<(Vec<BigUint>, Vec<BigUint>), BackendError> {
    let size = plan.bits / 8;
    for _ in 0..8 {
        // size - 1 random bytes: r < 2^(bits - 8) < n.
        let mut bytes = Zeroizing::new(vec![0u8; (size - 1) * count]);
        rand_core::OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| BackendError::Device(format!("RSA blinding: no randomness: {e}")))?;
        let rs: Vec<BigUint> = bytes.chunks(size - 1).map(BigUint::from_bytes_be).collect();
        if rs.iter().any(|r| r.bits() < 2) {
            continue;
        }
        let Some(invs) = batch_inverse(&rs, &plan.n) else {
            continue; // an r shares a factor with n: practically never
        };
        let r_e = rs.iter().map(|r| r.modpow(&plan.e, &plan.n)).collect();
        return Ok((r_e, invs));
    }
    Err(BackendError::Device(
        "RSA blinding: no invertible blinding factor found".into(),
    ))
}

/// Inverses modulo n of every value, with one modular inversion.
fn batch_inverse(vals: &[BigUint], n: &BigUint) -> Option<Vec<BigUint>> {
    let mut prefix = Vec::with_capacity(vals.len());
    let mut acc = BigUint::from(1u32);
    for v in vals {
        acc = (&acc * v) % n;
        prefix.push(acc.clone());
    }
    let mut inv = acc.mod_inverse(n)?.to_biguint()?;
    let mut out = vec![BigUint::default(); vals.len()];
    for i in (0..vals.len()).rev() {
        out[i] = if i == 0 {
            inv.clone()
        } else {
            (&inv * &prefix[i - 1]) % n
        };
        inv = (&inv * &vals[i]) % n;
    }
    Some(out)
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
        put_limbs(
            &mut input[slot * 2 * limbs..(slot + 1) * 2 * limbs],
            &group[g].blinded,
        );
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
    let bytes: Zeroizing<Vec<u8>> =
        Zeroizing::new(words.iter().flat_map(|w| w.to_le_bytes()).collect());
    let blinded_m = BigUint::from_bytes_le(&bytes);
    let m = (&blinded_m * &p.r_inv) % &p.plan.n;
    if blinded_m >= p.plan.n || m.modpow(&p.plan.e, &p.plan.n) != p.c {
        return Err(SegmentErrorKind::Internal(
            "RSA result failed the public-exponent check (a device or kernel fault); discarded"
                .into(),
        ));
    }
    let size = p.plan.bits / 8;
    let be = m.to_bytes_be();
    let mut out = vec![0u8; size];
    out[size - be.len()..].copy_from_slice(&be);
    Ok(Output::Bytes(out))
}
