//! Montgomery arithmetic modulo an RSA modulus n on the host, with 64-bit
//! limbs: the batch host path's blinding, unblinding and public-exponent
//! check (about 22 products a message). [`MontN`] works on `N`-limb arrays
//! (N = 16, 32, 64: RSA-1024, 2048, 4096), with a dedicated squaring;
//! [`Mont`] holds the constants for any length up to `MAX_LIMBS`.
//!
//! Constant-time: the products, squarings and the final reduction run the
//! same instruction sequence for any value (masked subtraction, no
//! value-dependent branches or indices). Not constant-time: the
//! exponentiation branches on the exponent's bits (only public exponents
//! are used), and the comparisons (`less`, `be_bytes_below`) stop at the
//! first differing limb (used on inputs, outputs and the public modulus).

use std::sync::OnceLock;

use num_bigint_dig::BigUint;

/// Most limbs of a modulus (4096 bits).
pub(crate) const MAX_LIMBS: usize = 64;

/// A residue: `MAX_LIMBS` limbs, of which the modulus's count are used.
pub(crate) type Limbs = [u64; MAX_LIMBS];

/// Montgomery constants for one modulus (R = 2^(64 * len)); its own
/// product (any length) is the tests' reference for [`MontN`].
#[derive(Clone)]
pub(crate) struct Mont {
    pub len: usize,
    pub n: Limbs,
    ninv: u64,
    /// R^2 mod n.
    r2: Limbs,
    /// R^(2-e) mod n for the key's public exponent e, made on first use
    /// by the batch path (see `rsa_batch`'s public-exponent check).
    pub check_factor: OnceLock<Vec<u64>>,
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
#[cfg(test)]
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
#[cfg(test)]
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
            check_factor: OnceLock::new(),
        })
    }

    /// a * b * R^-1 mod n (CIOS), fully reduced for a, b < n.
    #[cfg(test)]
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
    #[cfg(test)]
    pub(crate) fn to_mont(&self, a: &[u64]) -> Limbs {
        self.mul(a, &self.r2)
    }

    /// a * R^-1 mod n.
    #[cfg(test)]
    pub(crate) fn out_of_mont(&self, a: &[u64]) -> Limbs {
        let mut one = [0u64; MAX_LIMBS];
        one[0] = 1;
        self.mul(a, &one)
    }

    /// base^e for `base` in Montgomery form (result in Montgomery form);
    /// left to right over the bits of the public exponent.
    #[cfg(test)]
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

/// Montgomery arithmetic modulo a modulus of exactly `N` limbs (16, 32
/// or 64: RSA-1024, 2048, 4096): the batch path's products on
/// fixed-size arrays, so that loops have constant bounds and no bounds
/// checks, and a residue costs `8 * N` bytes, not `8 * MAX_LIMBS`.
#[derive(Clone)]
pub(crate) struct MontN<const N: usize> {
    pub n: [u64; N],
    ninv: u64,
    r2: [u64; N],
}

impl<const N: usize> MontN<N> {
    /// The constants of `m` when its modulus has exactly `N` limbs.
    pub(crate) fn of(m: &Mont) -> Option<MontN<N>> {
        (m.len == N).then(|| MontN {
            n: m.n[..N].try_into().expect("N limbs"),
            ninv: m.ninv,
            r2: m.r2[..N].try_into().expect("N limbs"),
        })
    }

    /// a * b * R^-1 mod n, fully reduced for a < n (any b < R): CIOS with
    /// the multiplication and reduction passes fused into one loop.
    #[inline]
    pub(crate) fn mul(&self, a: &[u64; N], b: &[u64; N]) -> [u64; N] {
        let n = &self.n;
        let mut t = [0u64; N];
        let mut top = 0u64;
        for &bi in b {
            let s = mac(a[0], bi, t[0], 0);
            let m = (s as u64).wrapping_mul(self.ninv);
            let mut c1 = (s >> 64) as u64;
            let mut c2 = (mac(m, n[0], s as u64, 0) >> 64) as u64;
            for j in 1..N {
                let s = mac(a[j], bi, t[j], c1);
                c1 = (s >> 64) as u64;
                let r = mac(m, n[j], s as u64, c2);
                c2 = (r >> 64) as u64;
                t[j - 1] = r as u64;
            }
            let s = top as u128 + c1 as u128 + c2 as u128;
            t[N - 1] = s as u64;
            top = (s >> 64) as u64;
        }
        self.reduce_once(&t, top)
    }

    /// a^2 * R^-1 mod n for a < n: the cross products once, doubled,
    /// plus the squares (N(N+1)/2 limb products instead of N^2), then a
    /// separate Montgomery reduction.
    #[inline]
    pub(crate) fn sqr(&self, a: &[u64; N]) -> [u64; N] {
        let mut wide = [[0u64; N]; 2];
        let t = wide.as_flattened_mut();
        for i in 0..N - 1 {
            let mut c = 0u64;
            for j in i + 1..N {
                let s = mac(a[i], a[j], t[i + j], c);
                t[i + j] = s as u64;
                c = (s >> 64) as u64;
            }
            t[i + N] = c;
        }
        let mut shifted_out = 0u64;
        let mut carry = 0u64;
        for i in 0..N {
            let lo = t[2 * i];
            let hi = t[2 * i + 1];
            let d_lo = (lo << 1) | shifted_out;
            let d_hi = (hi << 1) | (lo >> 63);
            shifted_out = hi >> 63;
            let sq = a[i] as u128 * a[i] as u128;
            let s = d_lo as u128 + (sq as u64) as u128 + carry as u128;
            t[2 * i] = s as u64;
            let s = d_hi as u128 + (sq >> 64) + (s >> 64);
            t[2 * i + 1] = s as u64;
            carry = (s >> 64) as u64;
        }
        self.redc(&mut wide)
    }

    /// t * R^-1 mod n for the 2N-limb t (low half first) < n * R.
    #[inline]
    fn redc(&self, wide: &mut [[u64; N]; 2]) -> [u64; N] {
        let n = &self.n;
        let t = wide.as_flattened_mut();
        let mut top = 0u64;
        for i in 0..N {
            let m = t[i].wrapping_mul(self.ninv);
            let mut c = 0u64;
            for j in 0..N {
                let s = mac(m, n[j], t[i + j], c);
                t[i + j] = s as u64;
                c = (s >> 64) as u64;
            }
            let s = t[i + N] as u128 + c as u128 + top as u128;
            t[i + N] = s as u64;
            top = (s >> 64) as u64;
        }
        self.reduce_once(&wide[1], top)
    }

    /// (top, t) - n when that is not negative, else t: a masked select,
    /// the same instructions for any value.
    #[inline]
    fn reduce_once(&self, t: &[u64; N], top: u64) -> [u64; N] {
        let mut d = [0u64; N];
        let mut borrow = 0u64;
        for j in 0..N {
            let (x, b1) = t[j].overflowing_sub(self.n[j]);
            let (x, b2) = x.overflowing_sub(borrow);
            d[j] = x;
            borrow = (b1 | b2) as u64;
        }
        let take = 0u64.wrapping_sub((top != 0) as u64 | (borrow ^ 1));
        let mut r = [0u64; N];
        for j in 0..N {
            r[j] = (d[j] & take) | (t[j] & !take);
        }
        r
    }

    /// a * R mod n.
    pub(crate) fn to_mont(&self, a: &[u64; N]) -> [u64; N] {
        self.mul(a, &self.r2)
    }

    /// a * R^-1 mod n.
    pub(crate) fn out_of_mont(&self, a: &[u64; N]) -> [u64; N] {
        self.mul(a, &one())
    }

    /// base^e * R^(1-e) mod n, left to right over the bits of the public
    /// exponent `e` (little-endian bytes, no trailing zeros): for `base`
    /// in Montgomery form (x R) that is x^e in Montgomery form; for a
    /// plain x, the plain value x^e * R^(1-e). Branches on the bits of
    /// `e` only.
    pub(crate) fn pow_public(&self, base: &[u64; N], e: &[u8]) -> [u64; N] {
        let Some(&last) = e.last() else {
            return self.to_mont(&one());
        };
        let bits = 8 * e.len() - last.leading_zeros() as usize;
        let mut acc = *base;
        for i in (0..bits - 1).rev() {
            acc = self.sqr(&acc);
            if (e[i / 8] >> (i % 8)) & 1 == 1 {
                acc = self.mul(&acc, base);
            }
        }
        acc
    }
}

/// 1 as `N` limbs.
pub(crate) fn one<const N: usize>() -> [u64; N] {
    let mut v = [0u64; N];
    v[0] = 1;
    v
}

/// a * b + c + d: never overflows 128 bits.
#[inline(always)]
fn mac(a: u64, b: u64, c: u64, d: u64) -> u128 {
    a as u128 * b as u128 + c as u128 + d as u128
}

/// Big-endian bytes (exactly `8 * N`) as `N` little-endian limbs.
pub(crate) fn limbs_of_be_exact<const N: usize>(bytes: &[u8]) -> [u64; N] {
    let mut out = [0u64; N];
    for (o, c) in out.iter_mut().zip(bytes.rchunks_exact(8)) {
        *o = u64::from_be_bytes(c.try_into().expect("8 bytes"));
    }
    out
}

/// Whether the big-endian `bytes` (exactly `8 * n.len()`) are below the
/// little-endian limbs `n`. Stops at the first differing limb: for
/// public values only.
pub(crate) fn be_bytes_below(bytes: &[u8], n: &[u64]) -> bool {
    for (c, &ni) in bytes.chunks_exact(8).zip(n.iter().rev()) {
        let ci = u64::from_be_bytes(c.try_into().expect("8 bytes"));
        if ci != ni {
            return ci < ni;
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
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

    /// A random odd modulus of exactly `N` limbs (top bit set).
    pub(crate) fn modulus<const N: usize>(rng: &mut impl rand_core::RngCore) -> BigUint {
        let mut nb = vec![0u8; 8 * N];
        rng.fill_bytes(&mut nb);
        nb[0] |= 0x80;
        nb[8 * N - 1] |= 1;
        BigUint::from_bytes_be(&nb)
    }

    /// `v` (below 2^(64N)) as exactly `N` limbs.
    pub(crate) fn fixed<const N: usize>(v: &BigUint) -> [u64; N] {
        limbs_of(v)[..N].try_into().unwrap()
    }

    /// MontN's product, squaring, conversions and public powers against
    /// the generic product and BigUint, for random values and 0, 1, 2,
    /// n - 2 and n - 1.
    fn fixed_length_arithmetic_matches<const N: usize>() {
        use num_bigint_dig::ModInverse;
        use rand_core::RngCore;
        let mut rng = rand_core::OsRng;
        for _ in 0..3 {
            let n = modulus::<N>(&mut rng);
            let g = Mont::new(&n).unwrap();
            let m = MontN::<N>::of(&g).unwrap();
            assert!(
                MontN::<N>::of(&Mont::new(&((&n >> 64usize) | BigUint::from(1u32))).unwrap())
                    .is_none()
            );
            let r_inv = (BigUint::from(1u32) << (64 * N))
                .mod_inverse(&n)
                .unwrap()
                .to_biguint()
                .unwrap();
            let one = BigUint::from(1u32);
            let mut values = vec![
                BigUint::from(0u32),
                one.clone(),
                BigUint::from(2u32),
                &n - BigUint::from(2u32),
                &n - &one,
            ];
            for _ in 0..8 {
                let mut b = vec![0u8; 8 * N];
                rng.fill_bytes(&mut b);
                values.push(BigUint::from_bytes_be(&b) % &n);
            }
            for a in &values {
                let al = fixed::<N>(a);
                let want_sq = (a * a * &r_inv) % &n;
                assert_eq!(m.sqr(&al), fixed::<N>(&want_sq));
                assert_eq!(m.sqr(&al)[..], g.mul(&limbs_of(a), &limbs_of(a))[..N]);
                assert_eq!(m.to_mont(&al), fixed::<N>(&((a << (64 * N)) % &n)));
                assert_eq!(m.out_of_mont(&al), fixed::<N>(&((a * &r_inv) % &n)));
                for b in &values {
                    let want = (a * b * &r_inv) % &n;
                    let got = m.mul(&al, &fixed::<N>(b));
                    assert_eq!(got, fixed::<N>(&want));
                    assert_eq!(got[..], g.mul(&limbs_of(a), &limbs_of(b))[..N]);
                }
                // pow_public on a plain value: a^e * R^(1-e); in
                // Montgomery form: (a^e) R.
                for e in [1u32, 3, 65537] {
                    let eb = BigUint::from(e).to_bytes_le();
                    let ae = a.modpow(&BigUint::from(e), &n);
                    let in_mont = m.out_of_mont(&m.pow_public(&m.to_mont(&al), &eb));
                    assert_eq!(in_mont, fixed::<N>(&ae));
                    let plain = m.pow_public(&al, &eb);
                    let scale = r_inv.modpow(&BigUint::from(e - 1), &n);
                    assert_eq!(plain, fixed::<N>(&((&ae * scale) % &n)));
                }
                let bytes = {
                    let v = a.to_bytes_be();
                    let mut o = vec![0u8; 8 * N];
                    o[8 * N - v.len()..].copy_from_slice(&v);
                    o
                };
                assert_eq!(limbs_of_be_exact::<N>(&bytes), al);
                assert!(be_bytes_below(&bytes, &m.n));
            }
            let n_bytes = be_bytes(&g.n, N, 8 * N);
            assert!(!be_bytes_below(&n_bytes, &m.n));
            assert!(!be_bytes_below(&vec![0xff; 8 * N], &m.n));
        }
    }

    #[test]
    fn fixed_length_arithmetic_matches_the_generic_product_and_biguint() {
        fixed_length_arithmetic_matches::<16>();
        fixed_length_arithmetic_matches::<32>();
        fixed_length_arithmetic_matches::<64>();
    }

    /// A squaring of a value below R but not below n (a faulty device
    /// result before its range check) returns, without overflow.
    #[test]
    fn out_of_range_operands_do_not_panic() {
        let n = modulus::<16>(&mut rand_core::OsRng);
        let m = MontN::<16>::of(&Mont::new(&n).unwrap()).unwrap();
        let big = [u64::MAX; 16];
        let _ = m.sqr(&big);
        let _ = m.mul(&big, &big);
        let _ = m.pow_public(&big, &[1, 0, 1]);
    }
}
