//! A CPU emulation of `kernels/rsa.cu`: the same 32-bit limbs, the same
//! CIOS Montgomery product, the same fixed-window schedule and masked
//! table select, the same Garner recombination, over the same key records
//! and message words. CI checks the batch host path (precomputation,
//! sorting, blinding, verification) through it against the CPU backend,
//! where no GPU exists; the GPU test then checks the kernel against it.

use crate::rsa_key::key_record_words;

/// r = a * b * R^-1 mod m, as `rsa_mont_mul` (CIOS, masked final
/// subtraction). `a`, `b`, `m` have `m.len()` limbs.
pub(crate) fn mont_mul(a: &[u32], b: &[u32], m: &[u32], minv: u32) -> Vec<u32> {
    let n = m.len();
    let mut t = vec![0u32; n + 2];
    for &bi in &b[..n] {
        let mut c: u64 = 0;
        for j in 0..n {
            let s = a[j] as u64 * bi as u64 + t[j] as u64 + c;
            t[j] = s as u32;
            c = s >> 32;
        }
        let s = t[n] as u64 + c;
        t[n] = s as u32;
        t[n + 1] = (s >> 32) as u32;
        let q = t[0].wrapping_mul(minv);
        let s = q as u64 * m[0] as u64 + t[0] as u64;
        let mut c = s >> 32;
        for j in 1..n {
            let s = q as u64 * m[j] as u64 + t[j] as u64 + c;
            t[j - 1] = s as u32;
            c = s >> 32;
        }
        let s = t[n] as u64 + c;
        t[n - 1] = s as u32;
        t[n] = t[n + 1].wrapping_add((s >> 32) as u32);
    }
    let (d, borrow) = sub(&t[..n], m);
    let take = 0u32.wrapping_sub(t[n] | (borrow ^ 1));
    (0..n).map(|j| (d[j] & take) | (t[j] & !take)).collect()
}

/// a - b over equal lengths: (difference, borrow out).
fn sub(a: &[u32], b: &[u32]) -> (Vec<u32>, u32) {
    let mut borrow = 0u32;
    let d = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let v = (x as u64)
                .wrapping_sub(y as u64)
                .wrapping_sub(borrow as u64);
            borrow = ((v >> 32) as u32) & 1;
            v as u32
        })
        .collect();
    (d, borrow)
}

/// The `w`-bit window of `e` at bit `pos`, as `rsa_window`.
fn window(e: &[u32], pos: usize, w: u32) -> u32 {
    let (limb, off) = (pos / 32, pos % 32);
    let mut v = e[limb] >> off;
    if off + w as usize > 32 && limb + 1 < e.len() {
        v |= e[limb + 1] << (32 - off);
    }
    v & ((1u32 << w) - 1)
}

/// One half exponentiation (h = 0: p, 1: q) of the 2N-word message `c`,
/// as `rsa_half_exp`.
fn half_exp(rec: &[u32], n: usize, w: u32, h: usize, c: &[u32]) -> Vec<u32> {
    let part = |k: usize| &rec[k * n..(k + 1) * n];
    let m = part(h);
    let e = part(2 + h);
    let minv = rec[11 * n + h];
    let x = mont_mul(&c[..n], part(6 + h), m, minv);
    let y = mont_mul(&c[n..2 * n], part(8 + h), m, minv);
    let mut carry = 0u32;
    let s: Vec<u32> = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| {
            let v = a as u64 + b as u64 + carry as u64;
            carry = (v >> 32) as u32;
            v as u32
        })
        .collect();
    let (d, borrow) = sub(&s, m);
    let take = 0u32.wrapping_sub(carry | (borrow ^ 1));
    let x: Vec<u32> = (0..n).map(|j| (d[j] & take) | (s[j] & !take)).collect();
    let mut tab: Vec<Vec<u32>> = vec![part(4 + h).to_vec(), x.clone()];
    for k in 2..(1usize << w) {
        let next = mont_mul(&tab[k - 1], &x, m, minv);
        tab.push(next);
    }
    let bits = 32 * n;
    let nwin = bits.div_ceil(w as usize);
    let mut acc = tab[0].clone();
    for win in (0..nwin).rev() {
        if win != nwin - 1 {
            for _ in 0..w {
                acc = mont_mul(&acc, &acc, m, minv);
            }
        }
        let idx = window(e, win * w as usize, w);
        let mut sel = vec![0u32; n];
        for (k, entry) in tab.iter().enumerate() {
            let mask = 0u32.wrapping_sub((k as u32 == idx) as u32);
            for j in 0..n {
                sel[j] |= entry[j] & mask;
            }
        }
        acc = mont_mul(&acc, &sel, m, minv);
    }
    let mut one = vec![0u32; n];
    one[0] = 1;
    mont_mul(&acc, &one, m, minv)
}

/// Garner's recombination, as `rsa_garner`: 2N words.
fn garner(rec: &[u32], n: usize, m1: &[u32], m2: &[u32]) -> Vec<u32> {
    let p = &rec[..n];
    let q = &rec[n..2 * n];
    let (d, borrow) = sub(m1, m2);
    let fix = 0u32.wrapping_sub(borrow);
    let mut carry = 0u32;
    let s: Vec<u32> = d
        .iter()
        .zip(p)
        .map(|(&x, &y)| {
            let v = x as u64 + (y & fix) as u64 + carry as u64;
            carry = (v >> 32) as u32;
            v as u32
        })
        .collect();
    let h = mont_mul(&s, &rec[10 * n..11 * n], p, rec[11 * n]);
    let mut acc = vec![0u32; 2 * n];
    for i in 0..n {
        let mut c: u64 = 0;
        for j in 0..n {
            let a = h[j] as u64 * q[i] as u64 + acc[i + j] as u64 + c;
            acc[i + j] = a as u32;
            c = a >> 32;
        }
        acc[i + n] = c as u32;
    }
    let mut carry = 0u64;
    for j in 0..2 * n {
        let a = acc[j] as u64 + if j < n { m2[j] as u64 } else { 0 } + carry;
        acc[j] = a as u32;
        carry = a >> 32;
    }
    acc
}

/// What one launch of a batch kernel computes: for each message k, the
/// 2N output words of `input[2N k ..]` under key record `msg_key[k]` of
/// `keys`, with `limbs` = N and window `w`.
pub(crate) fn run(keys: &[u32], limbs: usize, w: u32, msg_key: &[u32], input: &[u32]) -> Vec<u32> {
    use rayon::prelude::*;
    let n = limbs;
    let stride = key_record_words(n);
    let mut out = vec![0u32; msg_key.len() * 2 * n];
    out.par_chunks_mut(2 * n)
        .zip(msg_key.par_iter())
        .enumerate()
        .for_each(|(k, (o, &key))| {
            let rec = &keys[key as usize * stride..(key as usize + 1) * stride];
            let c = &input[k * 2 * n..(k + 1) * 2 * n];
            let m1 = half_exp(rec, n, w, 0, c);
            let m2 = half_exp(rec, n, w, 1, c);
            o.copy_from_slice(&garner(rec, n, &m1, &m2));
        });
    out
}
