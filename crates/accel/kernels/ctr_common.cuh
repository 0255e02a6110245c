// ctr_common.cuh -- what the CTR kernels share: the segment descriptor, the
// segment search, byte swaps, and the job-wide CTR walks over 16-byte units
// (AES, GCM) and 8-byte units (TEA, Blowfish), each generic over its cipher.
//
// Not a kernel file: aes_core.cuh, tea.cu and blowfish.cu include it;
// gpu/kernels.rs puts its text in place of the #include.
//
// The walks. Work is split into chunks of K consecutive units (job-wide
// numbering); a thread takes one chunk per grid-stride step, finds the
// segment of the chunk's first unit by binary search over first_unit, and
// walks forward across segment boundaries (and empty segments) for the rest
// of the chunk. Unit j of a segment is read at data + offset + unit * j; a
// partial last unit only touches bytes < len.

#ifndef GV_CTR_COMMON_CUH
#define GV_CTR_COMMON_CUH

#include "abi.cuh"

// A segment of a CTR job (gpu/abi.rs CipherSeg; the layout is checked below).
struct CipherSeg {
    unsigned long long offset;      // byte offset in data, multiple of 16
    unsigned long long len;         // bytes in the segment (any, may be 0)
    unsigned long long first_unit;  // job-wide index of the segment's first unit
    unsigned char iv[16];           // counter block of unit 0; 8-byte ciphers: iv[0..8], big-endian
};
GV_CHECK_LAYOUT(CipherSeg);

__device__ __forceinline__ unsigned int gv_bswap32(unsigned int x) { return __byte_perm(x, 0u, 0x0123u); }

// Hide the known bits of x from the compiler. Used on the lane offset of
// the replicated tables: when the compiler can prove the table index and
// the lane offset disjoint it turns the index add into SHF + LOP3 (two
// ALU-pipe ops); kept opaque, it becomes one IMAD on the otherwise idle FMA
// pipe.
__device__ __forceinline__ unsigned int gv_opaque(unsigned int x) {
#ifdef __CUDA_ARCH__
    asm("mov.u32 %0, %0;" : "+r"(x));
#endif
    return x;
}

// Index of the last segment whose first_unit <= u (segs[0].first_unit is 0).
// Empty segments share first_unit with their successor, so the search lands
// on the non-empty one that holds u.
template <class Seg>
__device__ __forceinline__ unsigned int gv_find_seg(const Seg* __restrict__ segs, unsigned int nsegs,
                                                    unsigned long long u) {
    unsigned int lo = 0, hi = nsegs;
    while (hi - lo > 1u) {
        const unsigned int mid = (lo + hi) >> 1;
        if (__ldg(&segs[mid].first_unit) <= u) lo = mid; else hi = mid;
    }
    return lo;
}

// ---------------------------------------------------------------------------
// 16-byte units. Tr supplies the segment type (Tr::Seg) and the counter
// block of unit j of a segment (Tr::counter, big-endian column words); enc
// encrypts K blocks in place (enc(st), st[K][4]: big-endian column words in,
// little-endian words out, ready to XOR onto uint4 data).

// out[b] = in[b] ^ keystream byte b for the first n (< 16) bytes (in and
// out may be the same); bytes at and past n are never touched.
__device__ __forceinline__ void gv_xor_tail16(const unsigned char* in, unsigned char* out, unsigned int n,
                                              const unsigned int (&ks)[4]) {
#pragma unroll
    for (int b = 0; b < 16; ++b)
        if ((unsigned int)b < n) out[b] = in[b] ^ (unsigned char)(ks[b >> 2] >> (8 * (b & 3)));
}

// Each result is written out_delta bytes after its input (0: in place; GCM
// open on host data reads the ciphertext from the buffer its GHASH pass
// reads and writes the plaintext into the staging slot, so no
// device-to-device copy is needed).
template <class Tr, int K, class Enc>
__device__ __forceinline__ void gv_ctr16_run(const Enc& enc, unsigned char* __restrict__ data,
                                             const typename Tr::Seg* __restrict__ segs, unsigned int nsegs,
                                             unsigned long long total_units, long long out_delta) {
    const unsigned long long nchunks = (total_units + (K - 1)) / K;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; c < nchunks;
         c += stride) {
        const unsigned long long u0 = c * K;
        unsigned int s = gv_find_seg(segs, nsegs, u0);
        unsigned int st[K][4];
        uint4 d[K];
        unsigned char* p[K];
        unsigned int nb[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned long long u = u0 + k;
            nb[k] = 0;
            p[k] = data;
            st[k][0] = st[k][1] = st[k][2] = st[k][3] = 0;
            d[k] = make_uint4(0, 0, 0, 0);
            if (u < total_units) {
                while (s + 1 < nsegs && __ldg(&segs[s + 1].first_unit) <= u) ++s;
                const typename Tr::Seg* g = segs + s;
                const unsigned long long j = u - __ldg(&g->first_unit);
                const unsigned long long len = __ldg(&g->len);
                if (j < (len + 15) >> 4) {   // guards against inconsistent first_unit/total_units
                    const unsigned long long rem = len - 16 * j;
                    nb[k] = rem >= 16 ? 16u : (unsigned int)rem;
                    p[k] = data + __ldg(&g->offset) + 16 * j;
                    Tr::counter(g, j, st[k]);
                    // issue the data loads before the cipher so their latency hides under it
                    if (nb[k] == 16u) d[k] = *(const uint4*)p[k];
                }
            }
        }
        enc(st);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (nb[k] == 16u) {
                *(uint4*)(p[k] + out_delta) = make_uint4(d[k].x ^ st[k][0], d[k].y ^ st[k][1],
                                                         d[k].z ^ st[k][2], d[k].w ^ st[k][3]);
            } else if (nb[k] != 0u) {
                gv_xor_tail16(p[k], p[k] + out_delta, nb[k], st[k]);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 8-byte units, in place. Unit j of a segment is XORed with BE32(l) ||
// BE32(r) = E(c >> 32, c & 0xffffffff), c = start + j (mod 2^64), start =
// the big-endian u64 of iv[0..8] (iv[8..16] ignored); enc(l, r) encrypts K
// blocks in place (l[K], r[K]: the blocks' big-endian halves).
template <int K, class Enc>
__device__ __forceinline__ void gv_ctr8_run(const Enc& enc, unsigned char* __restrict__ data,
                                            const CipherSeg* __restrict__ segs, unsigned int nsegs,
                                            unsigned long long total_units) {
    const unsigned long long nchunks = (total_units + (K - 1)) / K;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; c < nchunks;
         c += stride) {
        const unsigned long long u0 = c * K;
        unsigned int s = gv_find_seg(segs, nsegs, u0);
        unsigned int l[K], r[K], nb[K];
        unsigned char* p[K];
        uint2 d[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned long long u = u0 + k;
            nb[k] = 0; p[k] = data; l[k] = r[k] = 0; d[k] = make_uint2(0u, 0u);
            if (u < total_units) {
                while (s + 1 < nsegs && __ldg(&segs[s + 1].first_unit) <= u) ++s;
                const CipherSeg* g = segs + s;
                const unsigned long long j = u - __ldg(&g->first_unit), len = __ldg(&g->len);
                if (j < (len + 7) >> 3) {   // guards against inconsistent first_unit/total_units
                    const unsigned long long rem = len - 8 * j;
                    nb[k] = rem >= 8 ? 8u : (unsigned int)rem;
                    p[k] = data + __ldg(&g->offset) + 8 * j;
                    // iv sits at byte 24 of the struct: an aligned 8-byte load
                    const unsigned long long iv = __ldg((const unsigned long long*)g->iv);
                    const unsigned long long ctr =
                        (((unsigned long long)gv_bswap32((unsigned int)iv) << 32) | gv_bswap32((unsigned int)(iv >> 32))) + j;
                    l[k] = (unsigned int)(ctr >> 32);
                    r[k] = (unsigned int)ctr;
                    if (nb[k] == 8u) d[k] = *(const uint2*)p[k];   // load early, hide latency under the cipher
                }
            }
        }
        enc(l, r);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned int e0 = gv_bswap32(l[k]), e1 = gv_bswap32(r[k]);   // keystream BE32(l) || BE32(r)
            if (nb[k] == 8u) {
                *(uint2*)p[k] = make_uint2(d[k].x ^ e0, d[k].y ^ e1);
            } else if (nb[k] != 0u) {
#pragma unroll
                for (int b = 0; b < 7; ++b)
                    if ((unsigned int)b < nb[k]) p[k][b] ^= (unsigned char)((b < 4 ? e0 : e1) >> (8 * (b & 3)));
            }
        }
    }
}

#endif  // GV_CTR_COMMON_CUH
