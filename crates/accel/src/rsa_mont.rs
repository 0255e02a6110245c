//! Montgomery arithmetic modulo an RSA modulus n on the host, with 64-bit
//! limbs: the batch host path's blinding, unblinding and public-exponent
//! check (about 24 products a message), several times faster than going
//! through `BigUint` division. Fixed-size limb arrays, no allocation per
//! product. Not constant-time in the exponent (only the public exponent
//! is used); the products themselves run the same sequence for any value.

use num_bigint_dig::BigUint;

/// Most limbs of a modulus (4096 bits).
pub(crate) const MAX_LIMBS: usize = 64;

/// A residue: `MAX_LIMBS` limbs, of which the modulus's count are used.
pub(crate) type Limbs = [u64; MAX_LIMBS];

/// Montgomery constants for one modulus (R = 2^(64 * len)).
#[derive(Clone)]
pub(crate) struct Mont {
    pub len: usize,
    pub n: Limbs,
    ninv: u64,
    /// R^2 mod n.
    r2: Limbs,
}

/// `v` as little-endian 64-bit limbs (must fit `MAX_LIMBS`).
pub(crate) fn limbs_of(v: &BigUint) -> Limbs {
    limbs_of_le_bytes(&v.to_bytes_le())
}

/// Little-endian bytes as limbs (at most `MAX_LIMBS * 8` bytes are read).
pub(crate) fn limbs_of_le_bytes(bytes: &[u8]) -> Limbs {
    let mut out = [0u64; MAX_LIMBS];
    for (i, c) in bytes.chunks(8).take(MAX_LIMBS).enumerate() {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        out[i] = u64::from_le_bytes(w);
    }
    out
}

/// Big-endian bytes (any length up to `MAX_LIMBS * 8`) as limbs.
pub(crate) fn limbs_of_be_bytes(bytes: &[u8]) -> Limbs {
    let mut out = [0u64; MAX_LIMBS];
    for (i, c) in bytes.rchunks(8).take(MAX_LIMBS).enumerate() {
        let mut w = [0u8; 8];
        w[8 - c.len()..].copy_from_slice(c);
        out[i] = u64::from_be_bytes(w);
    }
    out
}

/// The low `len` limbs as `size` big-endian bytes.
pub(crate) fn be_bytes(v: &[u64], len: usize, size: usize) -> Vec<u8> {
    let mut out = vec![0u8; len * 8];
    for i in 0..len {
        out[(len - 1 - i) * 8..(len - i) * 8].copy_from_slice(&v[i].to_be_bytes());
    }
    out.split_off(len * 8 - size)
}

/// a < b over the low `len` limbs.
pub(crate) fn less(a: &[u64], b: &[u64], len: usize) -> bool {
    for i in (0..len).rev() {
        if a[i] != b[i] {
            return a[i] < b[i];
        }
    }
    false
}

impl Mont {
    /// Constants for an odd modulus of at most `MAX_LIMBS` limbs.
    pub(crate) fn new(n: &BigUint) -> Option<Mont> {
        let len = n.bits().div_ceil(64);
        if len == 0 || len > MAX_LIMBS || limbs_of(n)[0] & 1 == 0 {
            return None;
        }
        let nl = limbs_of(n);
        let mut inv: u64 = 1;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(nl[0].wrapping_mul(inv)));
        }
        let r2 = (BigUint::from(1u32) << (128 * len)) % n;
        Some(Mont {
            len,
            n: nl,
            ninv: inv.wrapping_neg(),
            r2: limbs_of(&r2),
        })
    }

    /// a * b * R^-1 mod n (CIOS), fully reduced for a, b < n.
    pub(crate) fn mul(&self, a: &[u64], b: &[u64]) -> Limbs {
        let len = self.len;
        let n = &self.n;
        let mut t = [0u64; MAX_LIMBS + 2];
        for &bi in &b[..len] {
            let mut c: u128 = 0;
            for j in 0..len {
                let s = a[j] as u128 * bi as u128 + t[j] as u128 + c;
                t[j] = s as u64;
                c = s >> 64;
            }
            let s = t[len] as u128 + c;
            t[len] = s as u64;
            t[len + 1] = (s >> 64) as u64;
            let m = t[0].wrapping_mul(self.ninv);
            let s = m as u128 * n[0] as u128 + t[0] as u128;
            let mut c = s >> 64;
            for j in 1..len {
                let s = m as u128 * n[j] as u128 + t[j] as u128 + c;
                t[j - 1] = s as u64;
                c = s >> 64;
            }
            let s = t[len] as u128 + c;
            t[len - 1] = s as u64;
            t[len] = t[len + 1].wrapping_add((s >> 64) as u64);
        }
        let mut d = [0u64; MAX_LIMBS];
        let mut borrow = 0u64;
        for j in 0..len {
            let (x, b1) = t[j].overflowing_sub(n[j]);
            let (x, b2) = x.overflowing_sub(borrow);
            d[j] = x;
            borrow = (b1 | b2) as u64;
        }
        let take = 0u64.wrapping_sub(t[len] | (borrow ^ 1));
        let mut r = [0u64; MAX_LIMBS];
        for j in 0..len {
            r[j] = (d[j] & take) | (t[j] & !take);
        }
        r
    }

    /// a * R mod n.
    pub(crate) fn to_mont(&self, a: &[u64]) -> Limbs {
        self.mul(a, &self.r2)
    }

    /// a * R^-1 mod n.
    pub(crate) fn out_of_mont(&self, a: &[u64]) -> Limbs {
        let mut one = [0u64; MAX_LIMBS];
        one[0] = 1;
        self.mul(a, &one)
    }

    /// base^e for `base` in Montgomery form (result in Montgomery form);
    /// left to right over the bits of the public exponent.
    pub(crate) fn pow(&self, base: &Limbs, e: &BigUint) -> Limbs {
        let bits = e.bits();
        if bits == 0 {
            let mut one = [0u64; MAX_LIMBS];
            one[0] = 1;
            return self.to_mont(&one);
        }
        let eb = e.to_bytes_le();
        let bit = |i: usize| (eb[i / 8] >> (i % 8)) & 1 == 1;
        let mut acc = *base;
        for i in (0..bits - 1).rev() {
            acc = self.mul(&acc, &acc);
            if bit(i) {
                acc = self.mul(&acc, base);
            }
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_and_powers_match_biguint() {
        use rand_core::RngCore;
        let mut rng = rand_core::OsRng;
        for bytes in [128usize, 256, 512, 24] {
            let mut nb = vec![0u8; bytes];
            rng.fill_bytes(&mut nb);
            nb[0] |= 0x80;
            nb[bytes - 1] |= 1;
            let n = BigUint::from_bytes_be(&nb);
            let m = Mont::new(&n).unwrap();
            let r_inv = {
                use num_bigint_dig::ModInverse;
                let r = BigUint::from(1u32) << (64 * m.len);
                r.mod_inverse(&n).unwrap().to_biguint().unwrap()
            };
            for _ in 0..20 {
                let mut ab = vec![0u8; bytes];
                rng.fill_bytes(&mut ab);
                let a = BigUint::from_bytes_be(&ab) % &n;
                rng.fill_bytes(&mut ab);
                let b = BigUint::from_bytes_be(&ab) % &n;
                let got = m.mul(&limbs_of(&a), &limbs_of(&b));
                let want = (&a * &b * &r_inv) % &n;
                assert_eq!(got, limbs_of(&want));
                let e = BigUint::from(65537u32);
                let p = m.out_of_mont(&m.pow(&m.to_mont(&limbs_of(&a)), &e));
                assert_eq!(p, limbs_of(&a.modpow(&e, &n)));
                assert_eq!(be_bytes(&limbs_of(&a), m.len, bytes), {
                    let v = a.to_bytes_be();
                    let mut o = vec![0u8; bytes];
                    o[bytes - v.len()..].copy_from_slice(&v);
                    o
                });
                assert_eq!(limbs_of_be_bytes(&a.to_bytes_be()), limbs_of(&a));
                assert_eq!(less(&limbs_of(&a), &m.n, m.len), a < n);
            }
            // n - 1 and 0 at the edges.
            let nm1 = &n - BigUint::from(1u32);
            let sq =
                m.out_of_mont(&m.mul(&m.to_mont(&limbs_of(&nm1)), &m.to_mont(&limbs_of(&nm1))));
            assert_eq!(sq, limbs_of(&BigUint::from(1u32)));
            assert!(!less(&m.n, &m.n, m.len));
        }
    }
}
