// rsa.cu -- the RSA private-key operation with CRT (seed 004) for 1024,
// 2048 and 4096-bit moduli: m = c^d mod n as m1 = c^dp mod p,
// m2 = c^dq mod q, recombined by Garner: m = m2 + q * ((m1 - m2) * qinv mod p).
//
// Kernels (extern "C"; grid-stride, any grid size is correct):
//   rsa_crt_t1024 / rsa_crt_t2048 / rsa_crt_t4096(keys, msg_key, input, output, nmsgs)
//     "thread" variant: one thread per half exponentiation (thread 2k: the
//     p half of message k, thread 2k+1: its q half, in the same warp); the
//     p thread then recombines.
//
// Data (32-bit little-endian limbs; N = limbs of p and q = bits / 64):
//   keys:    RSA_KEY_WORDS(N) words per key (layout: rsa_abi.cuh, written by
//            gpu/rsa.rs from rsa_key.rs's CRT plan): p, q, dp, dq, R mod p,
//            R mod q, R^2 mod p, R^2 mod q, R^3 mod p, R^3 mod q,
//            qinv * R mod p, then -p^-1 and -q^-1 mod 2^32. p > q.
//   msg_key: the key index of each message.
//   input:   2N words per message, c < n (the host checks).
//   output:  2N words per message, m < n.
// The host blinds c before and unblinds and verifies (m^e == c mod n)
// after; a wrong result never leaves the host side as a result.
//
// Montgomery products are CIOS (Koc, Acar, Kaliski 1996) with R = 2^(32N);
// exponentiation is a fixed window of RSA_WIN(N) bits over all 32N bits of
// the exponent: the same sequence of products for every exponent and key of
// a size, and the window's table entry is read by a masked select over
// the whole table.
//
// Constant time (within a kernel launch, for keys of one size):
//   YES: the sequence of instructions and of memory addresses does not
//   depend on c, dp, dq, p, q or qinv: no branch and no table index on a
//   secret (the final subtraction of each product and the CRT subtraction
//   are masked selects; the window entry is selected by masks).
//   NOT covered: which key a message uses (msg_key picks the key record:
//   the address depends on the key index, which is public to the host but
//   visible in the access pattern); the key size (a different kernel);
//   timing of the batch as a whole (message count). The compiler is
//   trusted to turn `x == y` mask building into predicated selects (it
//   does at -O3 for these patterns; no data-dependent branch is written).

#include "rsa_abi.cuh"

typedef unsigned int u32;
typedef unsigned long long u64;

// Offsets of a key record's parts, in words.
#define RSA_P(N) 0
#define RSA_DP(N, h) ((2 + (h)) * (N))
#define RSA_MOD(N, h) ((h) * (N))
#define RSA_R1(N, h) ((4 + (h)) * (N))
#define RSA_R2(N, h) ((6 + (h)) * (N))
#define RSA_R3(N, h) ((8 + (h)) * (N))
#define RSA_QINV(N) (10 * (N))
#define RSA_MINV(N, h) (11 * (N) + (h))

// r = a * b * R^-1 mod m (CIOS), fully reduced when a < R and b < m
// (then the pre-subtraction value is below 2m). r may alias a or b.
// a is read at compile-time indices (registers), b at run-time ones.
template <int N>
__device__ __forceinline__ void rsa_mont_mul(u32* r, const u32* a, const u32* b, const u32* __restrict__ m,
                                             u32 minv) {
    u32 t[N + 2];
#pragma unroll
    for (int j = 0; j < N + 2; ++j) t[j] = 0;
#pragma unroll 1
    for (int i = 0; i < N; ++i) {
        const u32 bi = b[i];
        u64 c = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const u64 s = (u64)a[j] * bi + t[j] + c;
            t[j] = (u32)s;
            c = s >> 32;
        }
        u64 s = (u64)t[N] + c;
        t[N] = (u32)s;
        t[N + 1] = (u32)(s >> 32);
        const u32 q = t[0] * minv;
        s = (u64)q * m[0] + t[0];
        c = s >> 32;
#pragma unroll
        for (int j = 1; j < N; ++j) {
            s = (u64)q * m[j] + t[j] + c;
            t[j - 1] = (u32)s;
            c = s >> 32;
        }
        s = (u64)t[N] + c;
        t[N - 1] = (u32)s;
        t[N] = t[N + 1] + (u32)(s >> 32);
    }
    // t - m, taken when t >= m (t[N] set, or no borrow): a masked select.
    u32 d[N];
    u32 borrow = 0;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const u64 x = (u64)t[j] - m[j] - borrow;
        d[j] = (u32)x;
        borrow = (u32)(x >> 32) & 1u;
    }
    const u32 take = 0u - (t[N] | (borrow ^ 1u));
#pragma unroll
    for (int j = 0; j < N; ++j) r[j] = (d[j] & take) | (t[j] & ~take);
}

// The W-bit window of `e` (32N bits) starting at bit `pos` (a public
// position; bits beyond 32N read as zero).
template <int N, int W>
__device__ __forceinline__ u32 rsa_window(const u32* __restrict__ e, int pos) {
    const int limb = pos >> 5, off = pos & 31;
    u32 v = e[limb] >> off;
    if (off + W > 32 && limb + 1 < N) v |= e[limb + 1] << (32 - off);
    return v & ((1u << W) - 1u);
}

// res = c^exp mod m for half h (0: p, 1: q) of the key record `rec`, c the
// 2N-word message; res fully reduced.
template <int N, int W>
__device__ __forceinline__ void rsa_half_exp(u32* res, const u32* __restrict__ rec, int h,
                                             const u32* __restrict__ c) {
    const u32* m = rec + RSA_MOD(N, h);
    const u32* e = rec + RSA_DP(N, h);
    const u32 minv = rec[RSA_MINV(N, h)];
    u32 lo[N], hi[N], x[N], y[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        lo[j] = c[j];
        hi[j] = c[N + j];
    }
    // Montgomery form of c mod m: c_lo * R + c_hi * R^2 (mod m), each
    // product with an operand below R and one below m.
    rsa_mont_mul<N>(x, lo, rec + RSA_R2(N, h), m, minv);
    rsa_mont_mul<N>(y, hi, rec + RSA_R3(N, h), m, minv);
    {
        u32 s[N], d[N];
        u32 carry = 0, borrow = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const u64 a = (u64)x[j] + y[j] + carry;
            s[j] = (u32)a;
            carry = (u32)(a >> 32);
        }
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const u64 a = (u64)s[j] - m[j] - borrow;
            d[j] = (u32)a;
            borrow = (u32)(a >> 32) & 1u;
        }
        const u32 take = 0u - (carry | (borrow ^ 1u));
#pragma unroll
        for (int j = 0; j < N; ++j) x[j] = (d[j] & take) | (s[j] & ~take);
    }
    // The window table: tab[k] = x^k in Montgomery form (tab[0] = R mod m).
    u32 tab[1 << W][N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        tab[0][j] = rec[RSA_R1(N, h) + j];
        tab[1][j] = x[j];
    }
#pragma unroll 1
    for (int k = 2; k < (1 << W); ++k) {
        u32 prev[N];
#pragma unroll
        for (int j = 0; j < N; ++j) prev[j] = tab[k - 1][j];
        rsa_mont_mul<N>(y, prev, x, m, minv);
#pragma unroll
        for (int j = 0; j < N; ++j) tab[k][j] = y[j];
    }
    constexpr int BITS = 32 * N;
    constexpr int NWIN = (BITS + W - 1) / W;
    u32 acc[N];
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] = tab[0][j];
#pragma unroll 1
    for (int w = NWIN - 1; w >= 0; --w) {
        if (w != NWIN - 1) {  // public: the loop position
#pragma unroll 1
            for (int s = 0; s < W; ++s) rsa_mont_mul<N>(acc, acc, acc, m, minv);
        }
        const u32 idx = rsa_window<N, W>(e, w * W);
        u32 sel[N];
#pragma unroll
        for (int j = 0; j < N; ++j) sel[j] = 0;
#pragma unroll 1
        for (int k = 0; k < (1 << W); ++k) {
            const u32 mask = 0u - (u32)((u32)k == idx);
#pragma unroll
            for (int j = 0; j < N; ++j) sel[j] |= tab[k][j] & mask;
        }
        rsa_mont_mul<N>(acc, acc, sel, m, minv);
    }
    // Out of Montgomery form: acc * 1 * R^-1.
    u32 one[N];
#pragma unroll
    for (int j = 0; j < N; ++j) one[j] = j == 0 ? 1u : 0u;
    rsa_mont_mul<N>(res, acc, one, m, minv);
}

// Garner: out (2N words) = m2 + q * ((m1 - m2) * qinv mod p), with
// m1 < p, m2 < q < p.
template <int N>
__device__ __forceinline__ void rsa_garner(u32* __restrict__ out, const u32* m1, const u32* m2,
                                           const u32* __restrict__ rec) {
    const u32* p = rec + RSA_MOD(N, 0);
    const u32* q = rec + RSA_MOD(N, 1);
    u32 d[N], s[N];
    u32 borrow = 0, carry = 0;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const u64 a = (u64)m1[j] - m2[j] - borrow;
        d[j] = (u32)a;
        borrow = (u32)(a >> 32) & 1u;
    }
    const u32 fix = 0u - borrow;  // m1 < m2: add p back (masked)
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const u64 a = (u64)d[j] + (p[j] & fix) + carry;
        s[j] = (u32)a;
        carry = (u32)(a >> 32);
    }
    u32 h[N];
    rsa_mont_mul<N>(h, s, rec + RSA_QINV(N), p, rec[RSA_MINV(N, 0)]);
    // h * q (schoolbook, 2N words), then + m2 with a full-length carry chain.
    u32 acc[2 * N];
#pragma unroll
    for (int j = 0; j < 2 * N; ++j) acc[j] = 0;
#pragma unroll 1
    for (int i = 0; i < N; ++i) {
        const u32 qi = q[i];
        u64 c = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const u64 a = (u64)h[j] * qi + acc[i + j] + c;
            acc[i + j] = (u32)a;
            c = a >> 32;
        }
        acc[i + N] = (u32)c;
    }
    carry = 0;
#pragma unroll
    for (int j = 0; j < 2 * N; ++j) {
        const u64 a = (u64)acc[j] + (j < N ? m2[j] : 0u) + carry;
        acc[j] = (u32)a;
        carry = (u32)(a >> 32);
    }
#pragma unroll
    for (int j = 0; j < 2 * N; ++j) out[j] = acc[j];
}

// The thread variant: thread 2k (p) and 2k+1 (q) of message k. Every lane
// of a warp reaches the __syncwarp (inactive lanes included).
template <int N, int W>
__device__ __forceinline__ void rsa_crt_thread(const u32* __restrict__ keys, const u32* __restrict__ msg_key,
                                               const u32* __restrict__ input, u32* output, u32 nmsgs) {
    const u64 total = 2ull * nmsgs;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 base = (u64)blockIdx.x * blockDim.x; base < total; base += stride) {
        const u64 gid = base + threadIdx.x;
        const bool active = gid < total;
        const u64 msg = gid >> 1;
        const int h = (int)(gid & 1);
        const u32* rec = 0;
        if (active) {
            rec = keys + (u64)msg_key[msg] * RSA_KEY_WORDS(N);
            u32 res[N];
            rsa_half_exp<N, W>(res, rec, h, input + msg * 2 * N);
            u32* half = output + msg * 2 * N + (u64)h * N;
#pragma unroll
            for (int j = 0; j < N; ++j) half[j] = res[j];
        }
        __syncwarp();
        if (active && h == 0) {
            u32 m1[N], m2[N];
            const u32* o = output + msg * 2 * N;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                m1[j] = o[j];
                m2[j] = o[N + j];
            }
            rsa_garner<N>(output + msg * 2 * N, m1, m2, rec);
        }
        __syncwarp();
    }
}

extern "C" __global__ void rsa_crt_t1024(const unsigned int* __restrict__ keys,
                                         const unsigned int* __restrict__ msg_key,
                                         const unsigned int* __restrict__ input, unsigned int* output,
                                         unsigned int nmsgs) {
    rsa_crt_thread<16, RSA_WIN_1024>(keys, msg_key, input, output, nmsgs);
}

extern "C" __global__ void rsa_crt_t2048(const unsigned int* __restrict__ keys,
                                         const unsigned int* __restrict__ msg_key,
                                         const unsigned int* __restrict__ input, unsigned int* output,
                                         unsigned int nmsgs) {
    rsa_crt_thread<32, RSA_WIN_2048>(keys, msg_key, input, output, nmsgs);
}

extern "C" __global__ void rsa_crt_t4096(const unsigned int* __restrict__ keys,
                                         const unsigned int* __restrict__ msg_key,
                                         const unsigned int* __restrict__ input, unsigned int* output,
                                         unsigned int nmsgs) {
    rsa_crt_thread<64, RSA_WIN_4096>(keys, msg_key, input, output, nmsgs);
}
