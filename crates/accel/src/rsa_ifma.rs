//! Eight-lane Montgomery arithmetic with AVX-512 IFMA for the batch host
//! path (unblinding and public-exponent checks, blinding): eight
//! independent values (lanes: eight messages of one key) under one
//! shared modulus of `N` 64-bit limbs (16, 32, 64: RSA-1024, 2048, 4096).
//!
//! Values go in and out as `[[u64; N]; 8]` (little-endian 64-bit limbs,
//! as [`MontN`]). Inside, a value is `L = ceil(64N / 52)` limbs of 52 bits
//! (radix 2^52; L = 20, 40, 79), limb k of all eight lanes in one 512-bit
//! vector, and the products are `vpmadd52luq` / `vpmadd52huq` (the low
//! and high 52 bits of 52 x 52-bit products added to 64-bit
//! accumulators, so carries wait until the end of a product). A product
//! is the 2L-limb product (a squaring: the cross products once, doubled,
//! plus the squares) and then its Montgomery reduction, each four rows
//! a pass: every accumulator is loaded and stored once for eight
//! products, which is what bounds the speed here (about 5 of the 7.5
//! products a nanosecond the core can issue).
//!
//! The Montgomery radix is R = 2^(52L), which leaves d = 52L - 64N >= 12
//! spare bits over n; that makes the products "almost Montgomery": for
//! operands below 2n the result is below 2n (4n <= R) and needs no
//! subtraction, and only results that leave the module are reduced
//! below n (a masked subtraction). Operands may be any value below
//! 2^(64N) (a faulty device result): the results are still right mod n.
//!
//! Constant-time: every product, squaring, conversion and the final
//! reduction run the same instructions and touch the same addresses for
//! any operand value (carries by shifts and masks, the final subtraction
//! by a masked blend; loops and conditions on limb positions only). Not
//! constant-time: the powers branch on the bits of the exponent, which is
//! public. Intermediate values on the stack are not wiped (as in
//! `MontN`).
//!
//! An [`Ifma`] exists only on a CPU with AVX-512F and AVX-512 IFMA
//! ([`Ifma::new`] checks once per process); elsewhere (another CPU, or not
//! x86_64) the caller keeps the scalar [`MontN`].

use crate::rsa_mont::MontN;

/// Values per vector: eight 64-bit lanes.
pub(crate) const LANES: usize = 8;

/// Eight values of `N` 64-bit limbs each.
pub(crate) type Lanes<const N: usize> = [[u64; N]; LANES];

/// Most 52-bit limbs of a modulus (4096 bits: 79).
const MAX_L: usize = 79;

const MASK52: u64 = (1 << 52) - 1;

/// 52-bit limbs for a modulus of `n` 64-bit limbs.
const fn limbs52(n: usize) -> usize {
    (64 * n).div_ceil(52)
}

/// Whether this CPU runs the eight-lane arithmetic (AVX-512F and AVX-512
/// IFMA), detected once per process.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512ifma")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The constants of one modulus for the eight-lane arithmetic. Holding
/// one means the CPU has the features (see [`available`]).
#[derive(Clone)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Ifma<const N: usize> {
    /// n, 52-bit limbs (the first L used).
    n: [u64; MAX_L],
    /// -n^-1 mod 2^52.
    k0: u64,
    /// R^2 mod n: a product with it turns x R^-1 into x.
    rr: [u64; MAX_L],
    /// 2^d R mod n: a product with it turns x R^-1 into x 2^(-64N), the
    /// scaling of `MontN`'s product.
    r64: [u64; MAX_L],
    /// 2^(64N) mod n: a product with it turns x R into MontN's x 2^(64N).
    r64n: [u64; MAX_L],
    /// 2^d R^2 mod n: a product with it turns x 2^-d R^-1 into x R.
    rr_d: [u64; MAX_L],
}

/// The second factor of a [`Op::Mul`]: what the product is scaled by.
#[cfg(test)]
#[derive(Clone, Copy)]
enum Scale {
    /// a b mod n.
    Plain,
    /// a b 2^(-64N) mod n (MontN's product).
    Mont64,
}

/// What [`Ifma::run`] computes: one entry point into the feature-gated
/// code, so that one `unsafe` call covers every operation.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Op<'o, const N: usize> {
    #[cfg(test)]
    Mul {
        a: &'o Lanes<N>,
        b: &'o Lanes<N>,
        scale: Scale,
    },
    #[cfg(test)]
    Pow { x: &'o Lanes<N>, e: &'o [u8] },
    /// See [`Ifma::unblind_and_pow`].
    Check {
        blinded: &'o Lanes<N>,
        ai: &'o Lanes<N>,
        e: &'o [u8],
        m: &'o mut Lanes<N>,
    },
    /// See [`Ifma::blind_run`].
    BlindRun {
        r: &'o Lanes<N>,
        e: &'o [u8],
        ai: &'o Lanes<N>,
        c: &'o [Lanes<N>],
        blinded: &'o mut [Lanes<N>],
        ai_out: &'o mut [Lanes<N>],
    },
}

impl<const N: usize> Ifma<N> {
    /// The constants for `mont`'s modulus; None when this CPU lacks the
    /// features, or N is not 16, 32 or 64.
    pub(crate) fn new(mont: &MontN<N>) -> Option<Ifma<N>> {
        if !available() || !matches!(N, 16 | 32 | 64) {
            return None;
        }
        let l = limbs52(N);
        let d = 52 * l - 64 * N;
        debug_assert!((2..=32).contains(&d));
        // R = 2^d * R64 (R64 = 2^(64N), MontN's radix): 2^d R = to_mont(2^2d),
        // R^2 = to_mont(to_mont(2^2d)). 2^2d < n: n has its top bit set.
        let mut p = [0u64; N];
        p[2 * d / 64] = 1 << (2 * d % 64);
        let r64 = mont.to_mont(&p);
        let rr = mont.to_mont(&r64);
        let mut p3 = [0u64; N];
        p3[3 * d / 64] = 1 << (3 * d % 64);
        let rr_d = mont.to_mont(&mont.to_mont(&p3));
        let mut inv: u64 = 1;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(mont.n[0].wrapping_mul(inv)));
        }
        Some(Ifma {
            n: split52(&mont.n),
            k0: inv.wrapping_neg() & MASK52,
            rr: split52(&rr),
            r64: split52(&r64),
            r64n: split52(&mont.to_mont(&crate::rsa_mont::one())),
            rr_d: split52(&rr_d),
        })
    }

    /// a * b mod n, lane by lane, for any a, b < 2^(64N); fully reduced.
    /// (The tests' plain product; the batch path uses `mont_mul`.)
    #[cfg(test)]
    pub(crate) fn mul(&self, a: &Lanes<N>, b: &Lanes<N>) -> Lanes<N> {
        self.run(Op::Mul {
            a,
            b,
            scale: Scale::Plain,
        })
    }

    /// a * b * 2^(-64N) mod n, lane by lane (MontN's product: for `b` in
    /// MontN's Montgomery form, the plain a * b), for any a, b < 2^(64N);
    /// fully reduced.
    #[cfg(test)]
    pub(crate) fn mont_mul(&self, a: &Lanes<N>, b: &Lanes<N>) -> Lanes<N> {
        self.run(Op::Mul {
            a,
            b,
            scale: Scale::Mont64,
        })
    }

    /// x^e mod n, lane by lane, for any x < 2^(64N) and the public
    /// exponent `e` (little-endian bytes); fully reduced. Left to right
    /// over the bits of `e`: branches on `e` only. (The tests' power; the
    /// batch path's are inside `unblind_and_pow` and `blind_run`.)
    #[cfg(test)]
    pub(crate) fn pow_public(&self, x: &Lanes<N>, e: &[u8]) -> Lanes<N> {
        self.run(Op::Pow { x, e })
    }

    /// The unblinding and public-exponent power of eight results: m =
    /// `blinded` * `ai` * 2^(-64N) mod n (MontN's product: for ai = r^-1
    /// in MontN's form, blinded * r^-1) and m^e mod n, both fully reduced,
    /// for any blinded, ai < 2^(64N). Branches on `e` only.
    pub(crate) fn unblind_and_pow(
        &self,
        blinded: &Lanes<N>,
        ai: &Lanes<N>,
        e: &[u8],
    ) -> (Lanes<N>, Lanes<N>) {
        let mut m = [[0; N]; LANES];
        let m_e = self.run(Op::Check {
            blinded,
            ai,
            e,
            m: &mut m,
        });
        (m, m_e)
    }

    /// The blinding of up to eight runs of messages at once (lane k: one
    /// run), for `c.len()` steps: with A_0 = `r[k]`^e and ai_0 = `ai[k]`
    /// (in MontN's Montgomery form, below n), and each the square of the
    /// one before, step s writes `blinded[s][k]` = `c[s][k]` A_s mod n and
    /// `ai_out[s][k]` = ai_s (MontN's form), fully reduced: what MontN's
    /// `mul(c, a)` and chains of `sqr` give for a = `pow_public(r R64, e)`.
    pub(crate) fn blind_run(
        &self,
        r: &Lanes<N>,
        e: &[u8],
        ai: &Lanes<N>,
        c: &[Lanes<N>],
        blinded: &mut [Lanes<N>],
        ai_out: &mut [Lanes<N>],
    ) {
        assert!(blinded.len() == c.len() && ai_out.len() == c.len());
        let _ = self.run(Op::BlindRun {
            r,
            e,
            ai,
            c,
            blinded,
            ai_out,
        });
    }

    fn run(&self, op: Op<'_, N>) -> Lanes<N> {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: an `Ifma` is only made by `new`, after `available()`
            // found AVX-512F and AVX-512 IFMA on this CPU: the features
            // `x86::run` and everything it calls are compiled for.
            unsafe { x86::run(self, op) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = op;
            unreachable!("no Ifma is made off x86_64")
        }
    }
}

/// `x` (64-bit limbs) as `L` limbs of 52 bits. Indices depend on the
/// sizes only.
fn split52<const N: usize, const L: usize>(x: &[u64; N]) -> [u64; L] {
    let mut out = [0u64; L];
    for (k, o) in out.iter_mut().enumerate() {
        let bit = 52 * k;
        let (w, s) = (bit / 64, bit % 64);
        if w >= N {
            break;
        }
        let mut v = x[w] >> s;
        if s > 12 && w + 1 < N {
            v |= x[w + 1] << (64 - s);
        }
        *o = v & MASK52;
    }
    out
}

/// `L` limbs of 52 bits as `N` 64-bit limbs (bits above 64N dropped).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn join52<const N: usize>(x: &[u64]) -> [u64; N] {
    let mut out = [0u64; N];
    let mut acc: u128 = 0;
    let mut bits = 0;
    let mut w = 0;
    for &limb in x {
        acc |= ((limb & MASK52) as u128) << bits;
        bits += 52;
        if bits >= 64 {
            if w < N {
                out[w] = acc as u64;
            }
            w += 1;
            acc >>= 64;
            bits -= 64;
        }
    }
    if w < N {
        out[w] = acc as u64;
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[cfg(test)]
    use super::Scale;
    use super::{join52, limbs52, split52, Ifma, Lanes, Op, LANES, MASK52};

    type V = __m512i;

    /// The operation with the L of `N` (20, 40 or 79 limbs of 52 bits).
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) fn run<const N: usize>(m: &Ifma<N>, op: Op<'_, N>) -> Lanes<N> {
        match N {
            16 => run_l::<N, { limbs52(16) }>(m, op),
            32 => run_l::<N, { limbs52(32) }>(m, op),
            64 => run_l::<N, { limbs52(64) }>(m, op),
            _ => unreachable!("Ifma::new takes 16, 32 or 64 limbs"),
        }
    }

    /// The modulus's constants as `L`-limb arrays.
    /// (See [`Ifma`]'s fields.)
    struct Consts<const L: usize> {
        /// n's limbs, each in all lanes.
        nv: [V; L],
        k0: V,
        rr: [V; L],
        r64: [V; L],
        r64n: [V; L],
        rr_d: [V; L],
        one: [V; L],
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    fn run_l<const N: usize, const L: usize>(m: &Ifma<N>, op: Op<'_, N>) -> Lanes<N> {
        let k = Consts::<L> {
            nv: broadcast(&m.n),
            k0: _mm512_set1_epi64(m.k0 as i64),
            rr: broadcast(&m.rr),
            r64: broadcast(&m.r64),
            r64n: broadcast(&m.r64n),
            rr_d: broadcast(&m.rr_d),
            one: {
                let mut one = [_mm512_setzero_si512(); L];
                one[0] = _mm512_set1_epi64(1);
                one
            },
        };
        match op {
            #[cfg(test)]
            Op::Mul { a, b, scale } => {
                let f = match scale {
                    Scale::Plain => &k.rr,
                    Scale::Mont64 => &k.r64,
                };
                let t = amm(&to_vectors::<N, L>(a), &to_vectors::<N, L>(b), &k);
                out_of_vectors(&reduce(&amm(&t, f, &k), &k))
            }
            #[cfg(test)]
            Op::Pow { x, e } => {
                let xm = amm(&to_vectors::<N, L>(x), &k.rr, &k);
                out_of_vectors(&reduce(&redc(&pow(&xm, e, &k), &k), &k))
            }
            Op::Check { blinded, ai, e, m } => {
                // blinded ai = m R64 (mod n): t = m R64 / R = m 2^-d, then
                // m R = t (2^d R^2) / R.
                let t = amm(&to_vectors::<N, L>(blinded), &to_vectors::<N, L>(ai), &k);
                let mm = amm(&t, &k.rr_d, &k);
                *m = out_of_vectors(&reduce(&redc(&mm, &k), &k));
                out_of_vectors(&reduce(&redc(&pow(&mm, e, &k), &k), &k))
            }
            Op::BlindRun {
                r,
                e,
                ai,
                c,
                blinded,
                ai_out,
            } => {
                let mut a = pow(&amm(&to_vectors::<N, L>(r), &k.rr, &k), e, &k);
                // MontN's form x R64 to this module's: x R64 (2^d R) / R = x R.
                let mut ai = amm(&to_vectors::<N, L>(ai), &k.r64, &k);
                let steps = c.len();
                for (s, (c, (b, i))) in c.iter().zip(blinded.iter_mut().zip(ai_out)).enumerate() {
                    // c (A R) / R = c A; (x R) R64 / R = x R64.
                    *b = out_of_vectors(&reduce(&amm(&to_vectors::<N, L>(c), &a, &k), &k));
                    *i = out_of_vectors(&reduce(&amm(&ai, &k.r64n, &k), &k));
                    if s + 1 < steps {
                        a = ams(&a, &k);
                        ai = ams(&ai, &k);
                    }
                }
                [[0; N]; LANES]
            }
        }
    }

    /// xm^e for xm = x R (below 2n): x^e R, below 2n. Left to right over
    /// the bits of the public `e` (little-endian bytes; trailing zero
    /// bytes ignored); for e = 0, R mod n.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn pow<const L: usize>(xm: &[V; L], e: &[u8], k: &Consts<L>) -> [V; L] {
        let e = &e[..e.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)];
        let Some(&last) = e.last() else {
            return amm(&k.one, &k.rr, k);
        };
        let bits = 8 * e.len() - last.leading_zeros() as usize;
        let mut acc = *xm;
        for i in (0..bits - 1).rev() {
            acc = ams(&acc, k);
            if (e[i / 8] >> (i % 8)) & 1 == 1 {
                acc = amm(&acc, xm, k);
            }
        }
        acc
    }

    /// Loads a row of eight lanes.
    #[target_feature(enable = "avx512f")]
    fn load(row: &[u64; LANES]) -> V {
        // SAFETY: `row` is 64 readable bytes; the unaligned load has no
        // alignment requirement.
        unsafe { _mm512_loadu_si512(row.as_ptr().cast()) }
    }

    /// Stores a vector into a row of eight lanes.
    #[target_feature(enable = "avx512f")]
    fn store(row: &mut [u64; LANES], v: V) {
        // SAFETY: `row` is 64 writable bytes, borrowed mutably; the
        // unaligned store has no alignment requirement.
        unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), v) }
    }

    /// Every limb of `x` in all eight lanes.
    #[target_feature(enable = "avx512f")]
    fn broadcast<const L: usize>(x: &[u64]) -> [V; L] {
        let mut out = [_mm512_setzero_si512(); L];
        for (o, &l) in out.iter_mut().zip(x) {
            *o = _mm512_set1_epi64(l as i64);
        }
        out
    }

    /// Eight values as L vectors of 52-bit limbs (limb k of lane j in
    /// lane j of vector k).
    #[target_feature(enable = "avx512f")]
    fn to_vectors<const N: usize, const L: usize>(x: &Lanes<N>) -> [V; L] {
        let mut rows = [[0u64; LANES]; L];
        for (j, lane) in x.iter().enumerate() {
            let limbs: [u64; L] = split52(lane);
            for (row, &l) in rows.iter_mut().zip(&limbs) {
                row[j] = l;
            }
        }
        let mut out = [_mm512_setzero_si512(); L];
        for (o, row) in out.iter_mut().zip(&rows) {
            *o = load(row);
        }
        out
    }

    /// The inverse of [`to_vectors`] for normalized limbs.
    #[target_feature(enable = "avx512f")]
    fn out_of_vectors<const N: usize, const L: usize>(v: &[V; L]) -> Lanes<N> {
        let mut rows = [[0u64; LANES]; L];
        for (row, &x) in rows.iter_mut().zip(v) {
            store(row, x);
        }
        let mut out = [[0u64; N]; LANES];
        let mut limbs = [0u64; L];
        for (j, o) in out.iter_mut().enumerate() {
            for (l, row) in limbs.iter_mut().zip(&rows) {
                *l = row[j];
            }
            *o = join52(&limbs);
        }
        out
    }

    /// Carries the 2L accumulators' upper half (each below 2^64, the
    /// value below 2^(52L)) into 52-bit limbs.
    #[target_feature(enable = "avx512f")]
    fn normalize<const L: usize>(t: &[V]) -> [V; L] {
        let mask = _mm512_set1_epi64(MASK52 as i64);
        let mut out = [_mm512_setzero_si512(); L];
        let mut carry = _mm512_setzero_si512();
        for (o, &x) in out.iter_mut().zip(&t[L..]) {
            let v = _mm512_add_epi64(x, carry);
            carry = _mm512_srli_epi64::<52>(v);
            *o = _mm512_and_si512(v, mask);
        }
        out
    }

    /// Rows a pass of the products and the reduction (more rows a pass
    /// would share each accumulator's load and store among more products,
    /// but their longer chains measured slower).
    const R: usize = 4;

    /// t[p] += lo(x_(p-m) r_m) + hi(x_(p-m-1) r_m) over m < R, for the p
    /// where the indices fall in x (at least R limbs): the products x r_m,
    /// row m shifted by m limbs, added to t[0 .. x.len() + R], each
    /// accumulator loaded and stored once for its 2R products. The loops
    /// and conditions depend on positions only.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn add_rows(t: &mut [V], x: &[V], r: &[V; R]) {
        let len = x.len();
        assert!(len >= R && t.len() >= len + R);
        for p in 0..R {
            let mut v = t[p];
            for m in 0..=p {
                v = _mm512_madd52lo_epu64(v, x[p - m], r[m]);
                if m < p {
                    v = _mm512_madd52hi_epu64(v, x[p - m - 1], r[m]);
                }
            }
            t[p] = v;
        }
        // w[m] = x_(p-1-m), carried from one position to the next.
        let mut w: [V; R] = std::array::from_fn(|m| x[R - 1 - m]);
        for (v, &x0) in t[R..len].iter_mut().zip(&x[R..]) {
            let mut a = _mm512_madd52lo_epu64(*v, x0, r[0]);
            for m in 0..R {
                a = _mm512_madd52hi_epu64(a, w[m], r[m]);
                if m + 1 < R {
                    a = _mm512_madd52lo_epu64(a, w[m], r[m + 1]);
                }
            }
            *v = a;
            for m in (1..R).rev() {
                w[m] = w[m - 1];
            }
            w[0] = x0;
        }
        let top = &x[len - R..];
        for q in 0..R {
            // Position len + q: lo(x_(len+q-m)) for m > q, hi(x_(len+q-m-1))
            // for m >= q; top[j] = x_(len-R+j).
            let mut v = t[len + q];
            for m in q..R {
                v = _mm512_madd52hi_epu64(v, top[R + q - m - 1], r[m]);
                if m > q {
                    v = _mm512_madd52lo_epu64(v, top[R + q - m], r[m]);
                }
            }
            t[len + q] = v;
        }
    }

    /// t[p] += lo(x_p r) + hi(x_(p-1) r): one row.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn add_row(t: &mut [V], x: &[V], r: V) {
        let len = x.len();
        t[0] = _mm512_madd52lo_epu64(t[0], x[0], r);
        for (v, w) in t[1..len].iter_mut().zip(x.windows(2)) {
            *v = _mm512_madd52hi_epu64(_mm512_madd52lo_epu64(*v, w[1], r), w[0], r);
        }
        t[len] = _mm512_madd52hi_epu64(t[len], x[len - 1], r);
    }

    /// t += a * b[i..i+R] shifted by i limbs, from row `i`; the next row.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul_rows<const L: usize>(t: &mut [V], a: &[V; L], b: &[V; L]) -> usize {
        let mut i = 0;
        while i + R <= L {
            let r: &[V; R] = b[i..i + R].try_into().expect("R limbs");
            add_rows(&mut t[i..], a, r);
            i += R;
        }
        i
    }

    /// a b R^-1 mod n, below 2n for a < 2^(64N) (or < 2n) and b < 2n
    /// (almost Montgomery: no final subtraction): the 2L-limb product,
    /// four rows a pass (then one), then its reduction.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn amm<const L: usize>(a: &[V; L], b: &[V; L], k: &Consts<L>) -> [V; L] {
        let mut wide = [[_mm512_setzero_si512(); L]; 2];
        let t = wide.as_flattened_mut();
        let i = mul_rows(t, a, b);
        for (i, &bi) in b.iter().enumerate().skip(i) {
            add_row(&mut t[i..], a, bi);
        }
        montgomery_reduce(t, k)
    }

    /// The cross products a_i a_j (i < j) of rows i.. in passes of R rows
    /// while at least R limbs lie above a pass: the pass's products among
    /// themselves, then with every limb above (the rows a_i+m, the long
    /// operand a[i+R..], at 2i+R). Returns the next row.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn sqr_rows<const L: usize>(t: &mut [V], a: &[V; L]) -> usize {
        let mut i = 0;
        while i + 2 * R <= L {
            for m in 0..R {
                for m2 in m + 1..R {
                    let p = 2 * i + m + m2;
                    t[p] = _mm512_madd52lo_epu64(t[p], a[i + m], a[i + m2]);
                    t[p + 1] = _mm512_madd52hi_epu64(t[p + 1], a[i + m], a[i + m2]);
                }
            }
            let r: &[V; R] = a[i..i + R].try_into().expect("R limbs");
            add_rows(&mut t[2 * i + R..], &a[i + R..], r);
            i += R;
        }
        i
    }

    /// a^2 R^-1 mod n, below 2n for a < 2n: the cross products once,
    /// doubled, plus the squares, then the reduction.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn ams<const L: usize>(a: &[V; L], k: &Consts<L>) -> [V; L] {
        let mut wide = [[_mm512_setzero_si512(); L]; 2];
        let t = wide.as_flattened_mut();
        let i = sqr_rows(t, a);
        for i in i..L - 1 {
            add_row(&mut t[2 * i + 1..], &a[i + 1..], a[i]);
        }
        for x in t.iter_mut() {
            *x = _mm512_slli_epi64::<1>(*x);
        }
        for i in 0..L {
            t[2 * i] = _mm512_madd52lo_epu64(t[2 * i], a[i], a[i]);
            t[2 * i + 1] = _mm512_madd52hi_epu64(t[2 * i + 1], a[i], a[i]);
        }
        montgomery_reduce(t, k)
    }

    /// x R^-1 mod n, in [0, n], for x below 2^(52L): the reduction alone
    /// (x times 1).
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn redc<const L: usize>(x: &[V; L], k: &Consts<L>) -> [V; L] {
        let mut wide = [*x, [_mm512_setzero_si512(); L]];
        montgomery_reduce(wide.as_flattened_mut(), k)
    }

    /// Montgomery reduction of rows i.. in passes of R rows: the R
    /// multipliers in order (y_m from position i + m, with the earlier
    /// rows' products there and the carry below), then all products y n
    /// (again at i .. i+R, whose low 52 bits become 0), then those limbs'
    /// carries into i + R. Returns the next row.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn reduce_rows<const L: usize>(t: &mut [V], k: &Consts<L>) -> usize {
        let mut i = 0;
        let zero = _mm512_setzero_si512();
        let n = &k.nv;
        while i + R <= L {
            let mut y = [zero; R];
            let mut carry = zero;
            for m in 0..R {
                let mut x = _mm512_add_epi64(t[i + m], carry);
                for (m2, &ym2) in y[..m].iter().enumerate() {
                    x = _mm512_madd52lo_epu64(x, n[m - m2], ym2);
                    x = _mm512_madd52hi_epu64(x, n[m - m2 - 1], ym2);
                }
                y[m] = _mm512_madd52lo_epu64(zero, x, k.k0);
                carry = _mm512_srli_epi64::<52>(_mm512_madd52lo_epu64(x, n[0], y[m]));
            }
            add_rows(&mut t[i..], n, &y);
            let mut carry = zero;
            for x in &t[i..i + R] {
                carry = _mm512_srli_epi64::<52>(_mm512_add_epi64(*x, carry));
            }
            t[i + R] = _mm512_add_epi64(t[i + R], carry);
            i += R;
        }
        i
    }

    /// t R^-1 for the 2L accumulators t (t below n R): y n added for
    /// each low limb so that it becomes a multiple of 2^52 and carries
    /// up (four rows a pass, then one); the upper half
    /// normalized.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn montgomery_reduce<const L: usize>(t: &mut [V], k: &Consts<L>) -> [V; L] {
        let zero = _mm512_setzero_si512();
        let n = &k.nv;
        let i = reduce_rows(t, k);
        for i in i..L {
            let y = _mm512_madd52lo_epu64(zero, t[i], k.k0);
            let c = _mm512_srli_epi64::<52>(_mm512_madd52lo_epu64(t[i], n[0], y));
            add_row(&mut t[i + 1..], &n[1..], y);
            // n_0's high half (n[1..] starts at position i + 1).
            t[i + 1] = _mm512_add_epi64(_mm512_madd52hi_epu64(t[i + 1], n[0], y), c);
        }
        normalize(t)
    }

    /// x - n where that is not negative, else x, lane by lane (x below
    /// 2n, normalized): a borrow chain and a masked blend.
    #[target_feature(enable = "avx512f")]
    fn reduce<const L: usize>(x: &[V; L], k: &Consts<L>) -> [V; L] {
        let mask = _mm512_set1_epi64(MASK52 as i64);
        let mut d = [_mm512_setzero_si512(); L];
        let mut borrow = _mm512_setzero_si512();
        for ((o, &xi), &ni) in d.iter_mut().zip(x).zip(&k.nv) {
            let v = _mm512_sub_epi64(_mm512_sub_epi64(xi, ni), borrow);
            borrow = _mm512_srli_epi64::<63>(v);
            *o = _mm512_and_si512(v, mask);
        }
        // Lanes without a final borrow (x >= n) take x - n.
        let keep = _mm512_test_epi64_mask(borrow, borrow);
        let mut out = [_mm512_setzero_si512(); L];
        for ((o, &xi), &di) in out.iter_mut().zip(x).zip(&d) {
            *o = _mm512_mask_blend_epi64(keep, di, xi);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use num_bigint_dig::BigUint;
    use rand::{Rng, RngCore, SeedableRng};

    use super::*;
    use crate::rsa_mont::tests::{fixed, modulus};
    use crate::rsa_mont::Mont;

    fn big(v: &[u64]) -> BigUint {
        BigUint::from_bytes_le(&v.iter().flat_map(|l| l.to_le_bytes()).collect::<Vec<u8>>())
    }

    #[test]
    fn limb_conversions_round_trip() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        fn round<const N: usize, const L: usize>(rng: &mut impl RngCore) {
            for top in [0u64, 1, u64::MAX] {
                let mut x = [0u64; N];
                x.iter_mut().for_each(|l| *l = rng.next_u64());
                x[N - 1] = top;
                let s: [u64; L] = split52(&x);
                assert!(s.iter().all(|&l| l <= MASK52));
                assert_eq!(join52::<N>(&s), x);
                let v = big(&x);
                let from52 = s
                    .iter()
                    .rev()
                    .fold(BigUint::from(0u32), |acc, &l| (acc << 52usize) + l);
                assert_eq!(from52, v);
            }
        }
        round::<16, 20>(&mut rng);
        round::<32, 40>(&mut rng);
        round::<64, 79>(&mut rng);
    }

    /// Eight lanes of values for the modulus n: random values below n,
    /// the edges 0, 1, n - 1, and values at and near 2^(64N) - 1 (not
    /// below n: unreduced inputs such as a faulty device result).
    fn lane_sets<const N: usize>(n: &BigUint, rng: &mut impl RngCore) -> Vec<Lanes<N>> {
        let one = BigUint::from(1u32);
        let top = (BigUint::from(1u32) << (64 * N)) - &one;
        let random = |rng: &mut dyn RngCore| {
            let mut b = vec![0u8; 8 * N];
            rng.fill_bytes(&mut b);
            BigUint::from_bytes_be(&b) % n
        };
        let edges = [
            BigUint::from(0u32),
            one.clone(),
            n - &one,
            n - BigUint::from(2u32),
            top.clone(),
            &top - BigUint::from(12345u32),
            n.clone(),
            n + &one,
        ];
        let mut sets = Vec::new();
        sets.push(std::array::from_fn(|j| fixed::<N>(&edges[j])));
        sets.push(std::array::from_fn(|j| {
            fixed::<N>(&edges[(j * 3 + 1) % edges.len()])
        }));
        for _ in 0..3 {
            sets.push(std::array::from_fn(|_| fixed::<N>(&random(rng))));
        }
        // Mixed: edges in some lanes, random values in the others.
        sets.push(std::array::from_fn(|j| {
            if j % 2 == 0 {
                fixed::<N>(&edges[j])
            } else {
                fixed::<N>(&random(rng))
            }
        }));
        sets
    }

    fn arithmetic_matches<const N: usize>(seed: u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..2 {
            let n = modulus::<N>(&mut rng);
            let g = Mont::new(&n).unwrap();
            let m = MontN::<N>::of(&g).unwrap();
            let Some(v) = Ifma::<N>::new(&m) else {
                assert!(!available());
                eprintln!("no AVX-512 IFMA here: only the scalar path is checked");
                for a in lane_sets::<N>(&n, &mut rng).iter().flatten() {
                    let a_big = big(a) % &n;
                    let ar = fixed::<N>(&a_big);
                    let sq = m.out_of_mont(&m.mul(&m.to_mont(&ar), &m.to_mont(&ar)));
                    assert_eq!(sq, fixed::<N>(&(&a_big * &a_big % &n)));
                }
                return;
            };
            let r64_inv = {
                use num_bigint_dig::ModInverse;
                (BigUint::from(1u32) << (64 * N))
                    .mod_inverse(&n)
                    .unwrap()
                    .to_biguint()
                    .unwrap()
            };
            let mut odd = [0u8; 3];
            rng.fill(&mut odd[..]);
            odd[0] |= 1;
            odd[2] |= 0x80;
            let exps: Vec<Vec<u8>> = vec![
                BigUint::from(65537u32).to_bytes_le(),
                vec![3],
                odd.to_vec(),
                vec![1],
                vec![2],
                vec![],
                vec![3, 0, 0], // trailing zero bytes: the same exponent 3
            ];
            let sets = lane_sets::<N>(&n, &mut rng);
            for a in &sets {
                for b in &sets {
                    let p = v.mul(a, b);
                    let q = v.mont_mul(a, b);
                    let (um, um_e) = v.unblind_and_pow(a, b, &exps[0]);
                    assert_eq!(um, q);
                    assert_eq!(um_e, v.pow_public(&q, &exps[0]));
                    for j in 0..LANES {
                        let (x, y) = (big(&a[j]), big(&b[j]));
                        assert_eq!(p[j], fixed::<N>(&(&x * &y % &n)), "mul lane {j}");
                        assert_eq!(q[j], fixed::<N>(&(&x * &y * &r64_inv % &n)));
                        if x < n {
                            assert_eq!(q[j], m.mul(&a[j], &b[j]), "MontN lane {j}");
                        }
                    }
                }
                for e in &exps {
                    let p = v.pow_public(a, e);
                    let eb = BigUint::from_bytes_le(e);
                    for j in 0..LANES {
                        let x = big(&a[j]);
                        assert_eq!(p[j], fixed::<N>(&x.modpow(&eb, &n)), "pow lane {j}");
                        if x < n && e.last() != Some(&0) && !e.is_empty() {
                            // MontN: (x R64)^e in its form, out of it.
                            let pm = m.out_of_mont(&m.pow_public(&m.to_mont(&a[j]), e));
                            assert_eq!(p[j], pm);
                        }
                    }
                }
            }
            // The blinding chain against MontN's.
            let reduced: Vec<Lanes<N>> = sets
                .iter()
                .map(|s| s.map(|x| fixed::<N>(&(big(&x) % &n))))
                .collect();
            let (r, ai) = (&reduced[2], &reduced[3]);
            let c: Vec<Lanes<N>> = (0..5).map(|s| reduced[s % reduced.len()]).collect();
            for e in &exps[..3] {
                let mut blinded = vec![[[0u64; N]; LANES]; c.len()];
                let mut ai_out = blinded.clone();
                v.blind_run(r, e, ai, &c, &mut blinded, &mut ai_out);
                for j in 0..LANES {
                    let mut x = m.pow_public(&m.to_mont(&r[j]), e);
                    let mut xi = ai[j];
                    for s in 0..c.len() {
                        assert_eq!(blinded[s][j], m.mul(&c[s][j], &x), "step {s} lane {j}");
                        assert_eq!(ai_out[s][j], xi, "step {s} lane {j}");
                        x = m.sqr(&x);
                        xi = m.sqr(&xi);
                    }
                }
            }
        }
    }

    #[test]
    fn eight_lanes_match_biguint_and_montn_1024() {
        arithmetic_matches::<16>(16);
    }

    #[test]
    fn eight_lanes_match_biguint_and_montn_2048() {
        arithmetic_matches::<32>(32);
    }

    #[test]
    fn eight_lanes_match_biguint_and_montn_4096() {
        arithmetic_matches::<64>(64);
    }
}
