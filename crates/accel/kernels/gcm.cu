// gcm.cu -- AES-256-GCM (NIST SP 800-38D, 96-bit nonces) over a batch of segments.
//
// Kernels (all extern "C"; see README.md for the exact launch recipe):
//   aes256_gcm_ctr(rk, data, segs, nsegs, total_units)      CTR part, x32x4 tables
//   aes256_gcm_ctr_v2(rk, data, segs, nsegs, total_units)   same, x32 tables + rotations
//   gcm_setup(rk, segs, nsegs, piece_blocks, work)          H, GHASH tables, piece index
//   gcm_ghash(segs, nsegs, data, aad, piece_blocks, work)   parallel GHASH of A || C
//   gcm_finalize(rk, segs, nsegs, work, tags_out)           length block, E(J0), tags
// Seal: aes256_gcm_ctr, gcm_setup, gcm_ghash, gcm_finalize.
// Open: gcm_setup, gcm_ghash, gcm_finalize, aes256_gcm_ctr (GHASH must read
// the ciphertext before the in-place CTR pass overwrites it). The host
// compares tags_out with the expected tags.
// gpu/launch.rs declares the same parameter lists (a test compares them).
//
// Constant time: NO. AES uses secret-indexed shared-memory tables, and GHASH
// uses 4-bit tables of multiples of H indexed by (ciphertext-dependent)
// nibbles of the running hash; both are conflict-free by layout, but the
// addresses depend on secret data.
//
// GHASH parallel scheme. A segment's blocks X_0..X_{n-1} (AAD blocks, then
// ciphertext blocks, each zero-padded) give S = sum_i X_i * H^(n-i), and the
// tag is ((S ^ L) * H) ^ E(J0), L the length block. The n blocks are left-
// padded with zero blocks to np*P (P = piece_blocks, np = ceil(n/P)) and cut
// into np pieces of P. One thread runs Horner over its piece (y = (y^X)*H,
// using H tables in shared memory) and multiplies the result by
// G^(np-1-k), G = H^P, k the piece index, taking the exponent nibble by
// nibble from a table of G^(d*16^l). The per-piece products are XOR-summed
// into the segment's accumulator (warp and block segmented reductions, then
// atomicXor), so any mix of segment sizes is one flat launch.
//
// Bit order. GCM's field element of a 16-byte block b has coefficient of x^i
// = bit (7 - i%8) of byte i/8 (SP 800-38D 6.3, "reflected"). Two in-register
// forms are used:
//   bytes form: the block as 4 little-endian words (what a uint4 load gives);
//   poly form:  word w bit j = coefficient of x^(32w+j), i.e. an ordinary
//               polynomial, so carry-less multiplication applies directly.
// Bytes <-> poly is "reverse the bits of every byte": brev(bswap(w)).

#include "aes_core.cuh"

// gpu/abi.rs GcmSeg (the layout is checked below).
struct GcmSeg {
    unsigned long long offset;      // data offset (multiple of 16)
    unsigned long long len;         // plaintext/ciphertext bytes
    unsigned long long first_unit;  // job-wide index of the segment's first 16-byte data block
    unsigned long long aad_offset;  // offset of its AAD in the aad buffer (any; 16-aligned is faster)
    unsigned long long aad_len;     // AAD bytes (may be 0)
    unsigned char nonce[12];
    unsigned int reserved;          // 0
};
GV_CHECK_LAYOUT(GcmSeg);

extern __shared__ __align__(16) unsigned char gv_smem[];

// ---------------------------------------------------------------------------
// work buffer layout (bytes; the buffer must be 16-byte aligned):
//   [0, 8192)       htab: 512 x 16 B, bytes form; entry 16*t + v is
//                   (nibble v at nibble position t of the block) * H, where
//                   position t = 8*w + m means bits 4m..4m+3 of little-endian word w
//   [8192, 12288)   hpow: 16 levels x 16 x 16 B, poly form; [l][d] = G^(d*16^l), G = H^P
//   [12288, 12304)  H in poly form
//   [16384, ...)    piece_first: u64 x (nsegs+1), exclusive prefix of pieces per segment
//   [acc_off, +16*nsegs) acc: GHASH accumulators (poly form), acc_off =
//                   16384 + round_up(8*(nsegs+1), 16)
#define GV_GCM_W_HTAB 0u
#define GV_GCM_W_HPOW 8192u
#define GV_GCM_W_HPOLY 12288u
// GV_GCM_W_PIECES (16384) comes from abi.cuh: the host sizes the buffer.
#define GV_GCM_LEVELS 16

__device__ __forceinline__ unsigned long long gv_gcm_acc_off(unsigned int nsegs) {
    return GV_GCM_W_PIECES + ((8ull * (nsegs + 1ull) + 15ull) & ~15ull);
}

// ---------------------------------------------------------------------------
// CTR part: data block j of a segment uses E(nonce || BE32(2 + j)).
struct GvGcmCounter {
    typedef GcmSeg Seg;
    static __device__ __forceinline__ void counter(const GcmSeg* g, unsigned long long j,
                                                   unsigned int (&st)[4]) {
        // nonce sits at byte 40 (8-aligned) of the struct
        const unsigned long long a = __ldg((const unsigned long long*)g->nonce);
        const unsigned int b = __ldg((const unsigned int*)(g->nonce + 8));
        st[0] = gv_bswap32((unsigned int)a);
        st[1] = gv_bswap32((unsigned int)(a >> 32));
        st[2] = gv_bswap32(b);
        st[3] = 2u + (unsigned int)j;   // inc32: wraps mod 2^32
    }
};

// Units per thread: the same as the AES CTR kernel of the same tables
// (the host sizes both grids alike).

extern "C" __global__ void __launch_bounds__(1024, 1)
aes256_gcm_ctr(const unsigned int* __restrict__ rk, unsigned char* __restrict__ data,
               const GcmSeg* __restrict__ segs, unsigned int nsegs, unsigned long long total_units) {
    __shared__ __align__(16) unsigned int rks[60];
    unsigned int* tab = (unsigned int*)gv_smem;   // GV_AES_TAB_X32X4_BYTES dynamic
    if (!gv_ctr16_prologue<4, 7, GV_AES_CTR_K>(tab, rks, rk, nsegs, total_units)) return;
    gv_ctr16_run<GvGcmCounter, GV_AES_CTR_K>(GvAesEnc<4, 7>{(const unsigned char*)tab, gv_aes_lane_offset<7>(), rks},
                                             data, segs, nsegs, total_units, 0ll);
}

extern "C" __global__ void __launch_bounds__(256)
aes256_gcm_ctr_v2(const unsigned int* __restrict__ rk, unsigned char* __restrict__ data,
                  const GcmSeg* __restrict__ segs, unsigned int nsegs, unsigned long long total_units) {
    __shared__ __align__(16) unsigned int rks[60];
    __shared__ __align__(16) unsigned int tab[GV_AES_TAB_X32_BYTES / 4];
    if (!gv_ctr16_prologue<1, 7, GV_AES_CTR_V2_K>(tab, rks, rk, nsegs, total_units)) return;
    gv_ctr16_run<GvGcmCounter, GV_AES_CTR_V2_K>(GvAesEnc<1, 7>{(const unsigned char*)tab, gv_aes_lane_offset<7>(), rks},
                                                data, segs, nsegs, total_units, 0ll);
}

// ---------------------------------------------------------------------------
// GF(2^128) arithmetic in poly form (uint4 .x = coefficients x^0..x^31).
// Generic products use carry-less multiplication built from integer
// multiplies: with operands masked to every 4th bit, each integer product
// has at most 8 terms per output bit (< 16), so no carry reaches the next bit
// of the same residue class (the BearSSL "ctmul32" trick). 9 such 32x32
// products via two levels of Karatsuba make a 128x128 product.

__device__ __forceinline__ unsigned long long gv_clmul32(unsigned int x, unsigned int y) {
    const unsigned int x0 = x & 0x11111111u, x1 = x & 0x22222222u, x2 = x & 0x44444444u, x3 = x & 0x88888888u;
    const unsigned int y0 = y & 0x11111111u, y1 = y & 0x22222222u, y2 = y & 0x44444444u, y3 = y & 0x88888888u;
#define GV_M(a, b) ((unsigned long long)(a) * (unsigned long long)(b))
    const unsigned long long z0 = GV_M(x0, y0) ^ GV_M(x1, y3) ^ GV_M(x2, y2) ^ GV_M(x3, y1);
    const unsigned long long z1 = GV_M(x0, y1) ^ GV_M(x1, y0) ^ GV_M(x2, y3) ^ GV_M(x3, y2);
    const unsigned long long z2 = GV_M(x0, y2) ^ GV_M(x1, y1) ^ GV_M(x2, y0) ^ GV_M(x3, y3);
    const unsigned long long z3 = GV_M(x0, y3) ^ GV_M(x1, y2) ^ GV_M(x2, y1) ^ GV_M(x3, y0);
#undef GV_M
    return (z0 & 0x1111111111111111ull) | (z1 & 0x2222222222222222ull) | (z2 & 0x4444444444444444ull) |
           (z3 & 0x8888888888888888ull);
}

__device__ __forceinline__ void gv_clmul64(unsigned long long a, unsigned long long b, unsigned long long& lo,
                                           unsigned long long& hi) {
    const unsigned int a0 = (unsigned int)a, a1 = (unsigned int)(a >> 32);
    const unsigned int b0 = (unsigned int)b, b1 = (unsigned int)(b >> 32);
    const unsigned long long l = gv_clmul32(a0, b0), h = gv_clmul32(a1, b1);
    const unsigned long long m = gv_clmul32(a0 ^ a1, b0 ^ b1) ^ l ^ h;
    lo = l ^ (m << 32);
    hi = h ^ (m >> 32);
}

// Reduce r3:r2:r1:r0 (256-bit product) modulo g = x^128 + x^7 + x^2 + x + 1.
// The upper half D contributes D*(1 + x + x^2 + x^7); the (at most 7) bits
// that shift past x^127 fold back once more, which is done by XORing them
// into D first (they are too few to overflow again).
__device__ __forceinline__ uint4 gv_gf_reduce(unsigned long long r0, unsigned long long r1, unsigned long long r2,
                                              unsigned long long r3) {
    r2 ^= (r3 >> 63) ^ (r3 >> 62) ^ (r3 >> 57);
    const unsigned long long lo = r0 ^ r2 ^ (r2 << 1) ^ (r2 << 2) ^ (r2 << 7);
    const unsigned long long hi = r1 ^ r3 ^ ((r3 << 1) | (r2 >> 63)) ^ ((r3 << 2) | (r2 >> 62)) ^
                                  ((r3 << 7) | (r2 >> 57));
    return make_uint4((unsigned int)lo, (unsigned int)(lo >> 32), (unsigned int)hi, (unsigned int)(hi >> 32));
}

__device__ __forceinline__ uint4 gv_gf_mul(const uint4 a, const uint4 b) {
    const unsigned long long a0 = a.x | ((unsigned long long)a.y << 32), a1 = a.z | ((unsigned long long)a.w << 32);
    const unsigned long long b0 = b.x | ((unsigned long long)b.y << 32), b1 = b.z | ((unsigned long long)b.w << 32);
    unsigned long long l0, l1, h0, h1, m0, m1;
    gv_clmul64(a0, b0, l0, l1);
    gv_clmul64(a1, b1, h0, h1);
    gv_clmul64(a0 ^ a1, b0 ^ b1, m0, m1);
    m0 ^= l0 ^ h0;
    m1 ^= l1 ^ h1;
    return gv_gf_reduce(l0, l1 ^ m0, h0 ^ m1, h1);
}

// Squaring is linear in GF(2)[x]: spread the bits apart, then reduce.
__device__ __forceinline__ unsigned long long gv_spread32(unsigned int x) {
    unsigned long long v = x;
    v = (v | (v << 16)) & 0x0000ffff0000ffffull;
    v = (v | (v << 8)) & 0x00ff00ff00ff00ffull;
    v = (v | (v << 4)) & 0x0f0f0f0f0f0f0f0full;
    v = (v | (v << 2)) & 0x3333333333333333ull;
    v = (v | (v << 1)) & 0x5555555555555555ull;
    return v;
}

__device__ __forceinline__ uint4 gv_gf_sqr(const uint4 a) {
    return gv_gf_reduce(gv_spread32(a.x), gv_spread32(a.y), gv_spread32(a.z), gv_spread32(a.w));
}

// a^e for e >= 1 (left-to-right square and multiply).
__device__ __forceinline__ uint4 gv_gf_pow(const uint4 a, unsigned int e) {
    uint4 r = a;
    for (int bit = 30 - __clz(e); bit >= 0; --bit) {
        r = gv_gf_sqr(r);
        if ((e >> bit) & 1u) r = gv_gf_mul(r, a);
    }
    return r;
}

// bytes form <-> poly form (an involution).
__device__ __forceinline__ unsigned int gv_bitrev_bytes(unsigned int w) { return __brev(gv_bswap32(w)); }
__device__ __forceinline__ uint4 gv_swap_form(const uint4 v) {
    return make_uint4(gv_bitrev_bytes(v.x), gv_bitrev_bytes(v.y), gv_bitrev_bytes(v.z), gv_bitrev_bytes(v.w));
}

__device__ __forceinline__ uint4 gv_xor4(const uint4 a, const uint4 b) {
    return make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
}

// ---------------------------------------------------------------------------
// gcm_setup: one block (1024 threads recommended; any multiple of 32 >= 64).
//   H = E(0); work.htab (4-bit tables of H); work.hpow (nibble powers of
//   G = H^P, only as many levels as the largest segment needs);
//   work.piece_first (prefix sum of pieces per segment); zeroes work.acc.
// STEP = 1: tables of H, pieces of P = piece_blocks blocks (gcm_ghash).
// STEP = 32: tables of H^32, warp pieces of P = 32 * piece_blocks blocks
// (gcm_ghash_wide, where lane l takes every 32nd block of a warp piece).
template <unsigned int STEP>
__device__ __forceinline__ void gv_gcm_setup(const unsigned int* __restrict__ rk, const GcmSeg* __restrict__ segs,
                                             unsigned int nsegs, unsigned int piece_blocks,
                                             unsigned char* __restrict__ work) {
    __shared__ __align__(16) unsigned int rks[60];
    __shared__ __align__(16) unsigned int te[256];
    __shared__ __align__(16) uint4 hpoly;
    __shared__ __align__(16) uint4 basis[128];            // H * x^e, poly form
    __shared__ __align__(16) uint4 pw[GV_GCM_LEVELS][16];
    __shared__ unsigned long long part[1024];
    __shared__ unsigned long long maxnp;

    const unsigned int tid = threadIdx.x, nt = blockDim.x;
    const unsigned long long P = STEP * (unsigned long long)(piece_blocks ? piece_blocks : 1u);
    __shared__ __align__(16) uint4 hstep;   // H^STEP, poly form: what the tables multiply by

    // -- H = E_K(0^128) ------------------------------------------------------
    gv_aes_fill<1, 2>(te);
    gv_aes_load_rk(rks, rk);
    if (tid == 0) maxnp = 0;
    __syncthreads();
    if (tid == 0) {
        unsigned int st[1][4] = {{0u, 0u, 0u, 0u}};
        gv_aes_encrypt<1, 2, 1>((const unsigned char*)te, 0u, rks, st);
        hpoly = gv_swap_form(make_uint4(st[0][0], st[0][1], st[0][2], st[0][3]));
        *(uint4*)(work + GV_GCM_W_HPOLY) = hpoly;
        hstep = STEP == 1 ? hpoly : gv_gf_pow(hpoly, STEP);
    }

    // -- pieces per segment: chunked exclusive scan --------------------------
    // Thread t owns segments [t*C, (t+1)*C): sequential sums inside a chunk,
    // one block-wide scan across chunks.
    unsigned long long* piece_first = (unsigned long long*)(work + GV_GCM_W_PIECES);
    uint4* acc = (uint4*)(work + gv_gcm_acc_off(nsegs));
    const unsigned int C = (nsegs + nt - 1) / nt;
    const unsigned int s_begin = min(tid * C, nsegs), s_end = min(s_begin + C, nsegs);
    unsigned long long mine = 0, mymax = 0;
    for (unsigned int s = s_begin; s < s_end; ++s) {
        const unsigned long long n = ((__ldg(&segs[s].aad_len) + 15) >> 4) + ((__ldg(&segs[s].len) + 15) >> 4);
        const unsigned long long np = (n + P - 1) / P;
        mine += np;
        mymax = np > mymax ? np : mymax;
    }
    part[tid] = mine;
    atomicMax(&maxnp, mymax);
    __syncthreads();
    for (unsigned int off = 1; off < nt; off <<= 1) {
        const unsigned long long v = tid >= off ? part[tid - off] : 0ull;
        __syncthreads();
        part[tid] += v;
        __syncthreads();
    }
    {
        unsigned long long run = part[tid] - mine;
        for (unsigned int s = s_begin; s < s_end; ++s) {
            piece_first[s] = run;
            const unsigned long long n = ((__ldg(&segs[s].aad_len) + 15) >> 4) + ((__ldg(&segs[s].len) + 15) >> 4);
            run += (n + P - 1) / P;
        }
        if (tid == nt - 1) piece_first[nsegs] = part[tid];
    }
    for (unsigned int s = tid; s < nsegs; s += nt) acc[s] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();   // hpoly and maxnp visible

    // -- basis (all warps but the last) || power chains (last warp) ----------
    // levels: nibbles needed for exponents up to maxnp - 1
    unsigned int levels = 0;
    for (unsigned long long e = maxnp > 0 ? maxnp - 1 : 0; e; e >>= 4) ++levels;
    const unsigned int nbasis = nt - 32;
    if (tid < nbasis) {
        for (unsigned int e = tid; e < 128; e += nbasis) {
            uint4 xe = make_uint4(0u, 0u, 0u, 0u);
            if (e < 32) xe.x = 1u << e; else if (e < 64) xe.y = 1u << (e - 32);
            else if (e < 96) xe.z = 1u << (e - 64); else xe.w = 1u << (e - 96);
            basis[e] = gv_gf_mul(hstep, xe);
        }
    } else {
        const unsigned int l = tid - nbasis;
        if (l < levels) {
            // G^(16^l) = (H^P)^(2^(4l)); the chains are sequential squarings,
            // one level per lane so they run side by side
            uint4 g = gv_gf_pow(hpoly, (unsigned int)P);
            for (unsigned int i = 0; i < 4 * l; ++i) g = gv_gf_sqr(g);
            pw[l][1] = g;
        }
    }
    __syncthreads();

    // -- H tables (bytes form) and the other nibble powers -------------------
    uint4* htab = (uint4*)(work + GV_GCM_W_HTAB);
    for (unsigned int idx = tid; idx < 512; idx += nt) {
        const unsigned int t = idx >> 4, v = idx & 15u, w = t >> 3, m = t & 7u;
        uint4 a = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            if ((v >> b) & 1u) {
                // bit q of little-endian word w is bit (q%8) of byte 4w+q/8,
                // the coefficient of x^(8*(4w+q/8) + 7 - q%8)
                const unsigned int q = 4 * m + b;
                a = gv_xor4(a, basis[8 * (4 * w + q / 8) + 7 - (q % 8)]);
            }
        }
        htab[idx] = gv_swap_form(a);
    }
    uint4* hpow = (uint4*)(work + GV_GCM_W_HPOW);
    for (unsigned int idx = tid; idx < GV_GCM_LEVELS * 16; idx += nt) {
        const unsigned int l = idx >> 4, d = idx & 15u;
        uint4 r = make_uint4(d == 0 ? 1u : 0u, 0u, 0u, 0u);   // d = 0: the unit, never used
        if (l < levels && d >= 1) r = d == 1 ? pw[l][1] : gv_gf_pow(pw[l][1], d);
        hpow[idx] = r;
    }
}

extern "C" __global__ void __launch_bounds__(1024)
gcm_setup(const unsigned int* __restrict__ rk, const GcmSeg* __restrict__ segs, unsigned int nsegs,
          unsigned int piece_blocks, unsigned char* __restrict__ work) {
    gv_gcm_setup<1>(rk, segs, nsegs, piece_blocks, work);
}

extern "C" __global__ void __launch_bounds__(1024)
gcm_setup_wide(const unsigned int* __restrict__ rk, const GcmSeg* __restrict__ segs, unsigned int nsegs,
               unsigned int piece_blocks, unsigned char* __restrict__ work) {
    gv_gcm_setup<32>(rk, segs, nsegs, piece_blocks, work);
}

// ---------------------------------------------------------------------------
// gcm_ghash helpers.

// Multiply a bytes-form block by H: XOR of 32 table entries, one per nibble.
// ht: shared table, 32 positions x 16 values x 8 copies x 16 B
// (GV_GCM_GHASH_SMEM_BYTES of dynamic shared memory, abi.cuh);
// cb: this lane's copy offset, 16 * (lane & 7). A quarter-warp (8 lanes) then
// reads 8 different 16-byte bank groups whatever the nibbles: no conflicts.
static_assert(32 * 16 * 8 * 16 == GV_GCM_GHASH_SMEM_BYTES, "the H table fills the dynamic shared memory");
__device__ __forceinline__ uint4 gv_ghash_mulh(const unsigned char* ht, unsigned int cb, const uint4 x) {
    const unsigned int w[4] = {x.x, x.y, x.z, x.w};
    uint4 a = make_uint4(0u, 0u, 0u, 0u), b = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int m = 0; m < 8; ++m) {
            const unsigned int off = (((w[i] >> (4 * m)) & 15u) << 7) | cb;
            const uint4 e = *(const uint4*)(ht + (8 * i + m) * 2048 + off);
            // two accumulators halve the XOR dependency chain
            if (m & 1) b = gv_xor4(b, e); else a = gv_xor4(a, e);
        }
    }
    return gv_xor4(a, b);
}

// Load a 16-byte block of which only n (1..16) bytes exist; the rest reads as 0.
__device__ __forceinline__ uint4 gv_load_block(const unsigned char* p, unsigned long long n, bool aligned) {
    if (n >= 16 && aligned) return *(const uint4*)p;
    unsigned int w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int b = 0; b < 16; ++b)
        if ((unsigned long long)b < n) w[b >> 2] |= (unsigned int)p[b] << (8 * (b & 3));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Horner over blocks [i0, i1) of the segment's A || C block sequence.
__device__ __forceinline__ uint4 gv_ghash_range(const unsigned char* ht, unsigned int cb,
                                                const unsigned char* __restrict__ data,
                                                const unsigned char* __restrict__ aad, const GcmSeg* g,
                                                unsigned long long i0, unsigned long long i1) {
    const unsigned long long aad_len = __ldg(&g->aad_len), len = __ldg(&g->len);
    const unsigned long long na = (aad_len + 15) >> 4;
    uint4 y = make_uint4(0u, 0u, 0u, 0u);
    unsigned long long i = i0;
    if (i < na) {
        const unsigned long long aoff = __ldg(&g->aad_offset);
        const unsigned char* ap = aad + aoff;
        const bool aligned = (aoff & 15u) == 0;
        const unsigned long long ie = i1 < na ? i1 : na;
        for (; i < ie; ++i) y = gv_ghash_mulh(ht, cb, gv_xor4(y, gv_load_block(ap + 16 * i, aad_len - 16 * i, aligned)));
    }
    if (i < i1) {
        const unsigned char* dp = data + __ldg(&g->offset);   // dp + 16*j is data block j = i - na
        // full ciphertext blocks: four loads in flight ahead of the multiplies
        const unsigned long long j1 = i1 - na, jfull = (len >> 4) < j1 ? (len >> 4) : j1;
        unsigned long long j = i - na;
        for (; j + 4 <= jfull; j += 4) {
            const uint4* q = (const uint4*)(dp + 16 * j);
            const uint4 x0 = q[0], x1 = q[1], x2 = q[2], x3 = q[3];
            y = gv_ghash_mulh(ht, cb, gv_xor4(y, x0));
            y = gv_ghash_mulh(ht, cb, gv_xor4(y, x1));
            y = gv_ghash_mulh(ht, cb, gv_xor4(y, x2));
            y = gv_ghash_mulh(ht, cb, gv_xor4(y, x3));
        }
        for (; j < jfull; ++j) y = gv_ghash_mulh(ht, cb, gv_xor4(y, *(const uint4*)(dp + 16 * j)));
        if (j < j1)   // the partial last block
            y = gv_ghash_mulh(ht, cb, gv_xor4(y, gv_load_block(dp + 16 * j, len - 16 * j, true)));
    }
    return y;
}

// Warp-wide segmented XOR: afterwards the first lane of every run of equal
// sg holds the XOR of v over the run (runs are contiguous since pieces are
// ordered by segment). Returns true on those run heads.
__device__ __forceinline__ bool gv_seg_xor_warp(unsigned int sg, uint4& v) {
    const unsigned int lane = threadIdx.x & 31u;
#pragma unroll
    for (unsigned int d = 1; d < 32; d <<= 1) {
        const unsigned int os = __shfl_down_sync(0xffffffffu, sg, d);
        uint4 o;
        o.x = __shfl_down_sync(0xffffffffu, v.x, d);
        o.y = __shfl_down_sync(0xffffffffu, v.y, d);
        o.z = __shfl_down_sync(0xffffffffu, v.z, d);
        o.w = __shfl_down_sync(0xffffffffu, v.w, d);
        if (lane + d < 32u && os == sg) v = gv_xor4(v, o);
    }
    const unsigned int prev = __shfl_up_sync(0xffffffffu, sg, 1);
    return lane == 0 || prev != sg;
}

__device__ __forceinline__ void gv_acc_xor(uint4* acc, unsigned int sg, const uint4 v) {
    unsigned int* a = (unsigned int*)(acc + sg);
    atomicXor(a + 0, v.x);
    atomicXor(a + 1, v.y);
    atomicXor(a + 2, v.z);
    atomicXor(a + 3, v.w);
}

#define GV_NO_SEG 0xffffffffu

// A piece's Horner sum v (poly form) times G^e, nibble by nibble from the
// power table pw[16 * level + digit].
__device__ __forceinline__ uint4 gv_weight_piece(uint4 v, unsigned long long e, const uint4* pw) {
    for (unsigned int l = 0; e; ++l, e >>= 4) {
        const unsigned int d = (unsigned int)(e & 15u);
        if (d) v = gv_gf_mul(v, pw[16 * l + d]);
    }
    return v;
}

// Warp, then block, segmented XOR of every thread's (sg, v); run heads add
// into the accumulator. Every thread of the block calls it (two barriers).
__device__ __forceinline__ void gv_ghash_reduce(uint4* acc, unsigned int sg, uint4 v, unsigned int* ws, uint4* wv) {
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const bool head = gv_seg_xor_warp(sg, v);
    if (head && lane != 0 && sg != GV_NO_SEG) gv_acc_xor(acc, sg, v);
    if (lane == 0) { ws[warp] = sg; wv[warp] = v; }
    __syncthreads();
    if (warp == 0) {
        unsigned int s2 = lane < nwarps ? ws[lane] : GV_NO_SEG;
        uint4 v2 = lane < nwarps ? wv[lane] : make_uint4(0u, 0u, 0u, 0u);
        const bool h2 = gv_seg_xor_warp(s2, v2);
        if (h2 && s2 != GV_NO_SEG) gv_acc_xor(acc, s2, v2);
    }
    __syncthreads();
}

// gcm_ghash: block 256 (any multiple of 32 up to 256), grid any (3 per SM
// fill an H100: 3 x 69 KiB of shared memory), dynamic shared memory
// GV_GCM_GHASH_SMEM_BYTES. Reads A and C, XORs every piece's weighted Horner sum into work.acc.
// The kernel is bound by shared-memory bandwidth (32 conflict-free 16-byte
// lookups per block), so the ALU work of the per-piece powers overlaps it.
extern "C" __global__ void __launch_bounds__(256)
gcm_ghash(const GcmSeg* __restrict__ segs, unsigned int nsegs, const unsigned char* __restrict__ data,
          const unsigned char* __restrict__ aad, unsigned int piece_blocks, unsigned char* __restrict__ work) {
    __shared__ __align__(16) uint4 pw[GV_GCM_LEVELS * 16];
    __shared__ __align__(16) uint4 wv[32];
    __shared__ unsigned int ws[32];
    unsigned char* ht = gv_smem;   // GV_GCM_GHASH_SMEM_BYTES dynamic

    const unsigned long long* piece_first = (const unsigned long long*)(work + GV_GCM_W_PIECES);
    uint4* acc = (uint4*)(work + gv_gcm_acc_off(nsegs));
    const unsigned long long total = nsegs ? piece_first[nsegs] : 0ull;
    if ((unsigned long long)blockIdx.x * blockDim.x >= total) return;   // uniform per block
    const unsigned long long P = piece_blocks ? piece_blocks : 1u;

    {
        const uint4* src = (const uint4*)(work + GV_GCM_W_HTAB);
        uint4* dst = (uint4*)ht;
        for (unsigned int i = threadIdx.x; i < 512u * 8u; i += blockDim.x) dst[i] = src[i >> 3];
        const uint4* hp = (const uint4*)(work + GV_GCM_W_HPOW);
        for (unsigned int i = threadIdx.x; i < GV_GCM_LEVELS * 16u; i += blockDim.x) pw[i] = hp[i];
    }
    __syncthreads();
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const unsigned int cb = gv_opaque(16u * (lane & 7u));   // opaque: table offsets then go to the LDS immediate

    // Uniform trip count per block: the reductions below need every thread.
    for (unsigned long long tile = blockIdx.x; tile * blockDim.x < total; tile += gridDim.x) {
        const unsigned long long piece = tile * blockDim.x + threadIdx.x;
        unsigned int sg = GV_NO_SEG;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (piece < total) {
            // last segment whose first piece <= piece (skips empty segments)
            unsigned int lo = 0, hi = nsegs;
            while (hi - lo > 1u) {
                const unsigned int mid = (lo + hi) >> 1;
                if (piece_first[mid] <= piece) lo = mid; else hi = mid;
            }
            sg = lo;
            const GcmSeg* g = segs + sg;
            const unsigned long long pf = piece_first[sg];
            const unsigned long long np = piece_first[sg + 1] - pf, k = piece - pf;
            const unsigned long long n = ((__ldg(&g->aad_len) + 15) >> 4) + ((__ldg(&g->len) + 15) >> 4);
            const unsigned long long pad = np * P - n;               // < P zero blocks in front
            const unsigned long long i0 = k * P > pad ? k * P - pad : 0ull;
            const unsigned long long i1 = (k + 1) * P - pad;
            const uint4 y = gv_ghash_range(ht, cb, data, aad, g, i0, i1);
            // weight the piece by G^(np-1-k), nibble by nibble
            v = gv_weight_piece(gv_swap_form(y), np - 1 - k, pw);
        }
        gv_ghash_reduce(acc, sg, v, ws, wv);
    }
}

// Block i (0-based, may be negative: left padding) of a segment's A || C
// sequence, zero outside it; partial blocks read as zero-padded.
__device__ __forceinline__ uint4 gv_ghash_block(const unsigned char* __restrict__ data,
                                                const unsigned char* __restrict__ aad, const GcmSeg* g,
                                                long long i) {
    if (i < 0) return make_uint4(0u, 0u, 0u, 0u);
    const unsigned long long aad_len = __ldg(&g->aad_len), na = (aad_len + 15) >> 4;
    const unsigned long long u = (unsigned long long)i;
    if (u < na) {
        const unsigned long long aoff = __ldg(&g->aad_offset);
        return gv_load_block(aad + aoff + 16 * u, aad_len - 16 * u, (aoff & 15u) == 0);
    }
    const unsigned long long j = u - na, len = __ldg(&g->len);
    return gv_load_block(data + __ldg(&g->offset) + 16 * j, len - 16 * j, true);
}

// gcm_ghash_wide: as gcm_ghash (same launch: block 256, grid up to 3 per SM,
// 65536 bytes dynamic shared memory), with the tables and pieces that
// gcm_setup_wide wrote for the same piece_blocks P. A warp piece is 32 P
// blocks; lane l takes blocks l, l + 32, ... of it, so each step of the
// warp reads 512 consecutive bytes: one coalesced load where gcm_ghash's
// lanes (each on its own piece) touch 32 lines a load. Those per-lane lines
// cost L1 wavefronts on the same data path as the 32 table lookups (about
// 32 of 160 wavefronts a block, the gap between gcm_ghash's ~780 GB/s and
// its ~930 GB/s lookup bound). Lane l runs Horner with H^32 and weights its
// sum by H^(32 - l) and the piece by G^(np - 1 - k), G = H^(32 P).
// Segments of fewer than 32 P blocks leave most of a warp's steps as
// padding (skipped) but pay 32 lanes' weighting: use it for long segments.
extern "C" __global__ void __launch_bounds__(256)
gcm_ghash_wide(const GcmSeg* __restrict__ segs, unsigned int nsegs, const unsigned char* __restrict__ data,
               const unsigned char* __restrict__ aad, unsigned int piece_blocks, unsigned char* __restrict__ work) {
    __shared__ __align__(16) uint4 pw[GV_GCM_LEVELS * 16];
    __shared__ __align__(16) uint4 wv[32];
    __shared__ unsigned int ws[32];
    unsigned char* ht = gv_smem;   // GV_GCM_GHASH_SMEM_BYTES dynamic

    const unsigned long long* piece_first = (const unsigned long long*)(work + GV_GCM_W_PIECES);
    uint4* acc = (uint4*)(work + gv_gcm_acc_off(nsegs));
    const unsigned long long total = nsegs ? piece_first[nsegs] : 0ull;
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if ((unsigned long long)blockIdx.x * nwarps >= total) return;   // uniform per block
    const unsigned long long P = piece_blocks ? piece_blocks : 1u, W = 32ull * P;

    {
        const uint4* src = (const uint4*)(work + GV_GCM_W_HTAB);
        uint4* dst = (uint4*)ht;
        for (unsigned int i = threadIdx.x; i < 512u * 8u; i += blockDim.x) dst[i] = src[i >> 3];
        const uint4* hp = (const uint4*)(work + GV_GCM_W_HPOW);
        for (unsigned int i = threadIdx.x; i < GV_GCM_LEVELS * 16u; i += blockDim.x) pw[i] = hp[i];
    }
    // this lane's weight H^(32 - lane)
    const uint4 lane_w = gv_gf_pow(*(const uint4*)(work + GV_GCM_W_HPOLY), 32u - lane);
    __syncthreads();
    const unsigned int cb = gv_opaque(16u * (lane & 7u));

    for (unsigned long long tile = blockIdx.x; tile * nwarps < total; tile += gridDim.x) {
        const unsigned long long piece = tile * nwarps + warp;
        unsigned int sg = GV_NO_SEG;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (piece < total) {   // uniform per warp
            unsigned int lo = 0, hi = nsegs;
            while (hi - lo > 1u) {
                const unsigned int mid = (lo + hi) >> 1;
                if (piece_first[mid] <= piece) lo = mid; else hi = mid;
            }
            sg = lo;
            const GcmSeg* g = segs + sg;
            const unsigned long long pf = piece_first[sg];
            const unsigned long long np = piece_first[sg + 1] - pf, k = piece - pf;
            const unsigned long long na = (__ldg(&g->aad_len) + 15) >> 4, len = __ldg(&g->len);
            const unsigned long long n = na + ((len + 15) >> 4);
            const unsigned long long pad = np * W - n;   // < W zero blocks in front
            // block index of step m for this lane: k W + 32 m + lane - pad
            const long long base = (long long)(k * W + lane) - (long long)pad;
            // steps wholly in the padding leave y = 0: start after them
            unsigned long long m = base >= 0 ? 0ull : (unsigned long long)((-base + 31) >> 5);
            uint4 y = make_uint4(0u, 0u, 0u, 0u);
            // fast path: the warp's blocks from step m on are whole ciphertext blocks
            const long long first = (long long)(k * W) - (long long)pad;   // lane 0, step 0
            const bool plain = first >= (long long)na && (unsigned long long)(first + (long long)W) <= na + (len >> 4);
            if (plain) {
                const uint4* q = (const uint4*)(data + __ldg(&g->offset)) + (base - (long long)na);
                for (; m + 4 <= P; m += 4) {
                    const uint4 x0 = q[32 * m], x1 = q[32 * m + 32], x2 = q[32 * m + 64], x3 = q[32 * m + 96];
                    y = gv_xor4(gv_ghash_mulh(ht, cb, y), x0);
                    y = gv_xor4(gv_ghash_mulh(ht, cb, y), x1);
                    y = gv_xor4(gv_ghash_mulh(ht, cb, y), x2);
                    y = gv_xor4(gv_ghash_mulh(ht, cb, y), x3);
                }
                for (; m < P; ++m) y = gv_xor4(gv_ghash_mulh(ht, cb, y), q[32 * m]);
            } else {
                for (; m < P; ++m)
                    y = gv_xor4(gv_ghash_mulh(ht, cb, y), gv_ghash_block(data, aad, g, base + 32ll * (long long)m));
            }
            // y = sum over steps of X_m H^(32 (P - 1 - m)) (multiply, then add:
            // the first step multiplies 0). Block kW + 32m + lane needs the
            // exponent 32 (P - m) - lane plus W (np - 1 - k) in the segment
            // sum: hence the weights H^(32 - lane) and G^(np - 1 - k).
            v = gv_weight_piece(gv_gf_mul(gv_swap_form(y), lane_w), np - 1 - k, pw);
        }
        gv_ghash_reduce(acc, sg, v, ws, wv);
    }
}

// ---------------------------------------------------------------------------
// gcm_finalize: block 256, grid ceil(nsegs / 256) (any grid works).
// tag = ((acc ^ L) * H) ^ E(J0), L = BE64(8*aad_len) || BE64(8*len),
// J0 = nonce || BE32(1). tags_out: 16 bytes per segment, 16-byte aligned.
extern "C" __global__ void __launch_bounds__(256)
gcm_finalize(const unsigned int* __restrict__ rk, const GcmSeg* __restrict__ segs, unsigned int nsegs,
             const unsigned char* __restrict__ work, unsigned char* __restrict__ tags_out) {
    __shared__ __align__(16) unsigned int rks[60];
    __shared__ __align__(16) unsigned int te[256];
    if ((unsigned long long)blockIdx.x * blockDim.x >= nsegs) return;
    gv_aes_fill<1, 2>(te);
    gv_aes_load_rk(rks, rk);
    __syncthreads();
    const uint4 hpoly = *(const uint4*)(work + GV_GCM_W_HPOLY);
    const uint4* acc = (const uint4*)(work + gv_gcm_acc_off(nsegs));
    for (unsigned int s = blockIdx.x * blockDim.x + threadIdx.x; s < nsegs; s += gridDim.x * blockDim.x) {
        const GcmSeg* g = segs + s;
        const unsigned long long abits = __ldg(&g->aad_len) * 8ull, cbits = __ldg(&g->len) * 8ull;
        const uint4 lblk = make_uint4(gv_bswap32((unsigned int)(abits >> 32)), gv_bswap32((unsigned int)abits),
                                      gv_bswap32((unsigned int)(cbits >> 32)), gv_bswap32((unsigned int)cbits));
        const uint4 sp = gv_gf_mul(gv_xor4(acc[s], gv_swap_form(lblk)), hpoly);
        unsigned int st[1][4];
        GvGcmCounter::counter(g, 0, st[0]);
        st[0][3] = 1u;   // J0
        gv_aes_encrypt<1, 2, 1>((const unsigned char*)te, 0u, rks, st);
        const uint4 tag = gv_xor4(gv_swap_form(sp), make_uint4(st[0][0], st[0][1], st[0][2], st[0][3]));
        *(uint4*)(tags_out + 16ull * s) = tag;
    }
}
