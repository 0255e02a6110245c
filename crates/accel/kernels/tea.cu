// tea.cu -- TEA (Wheeler & Needham, 32 cycles) in CTR mode, and raw ECB.
//
// Kernels (extern "C", grid-stride, any grid size is correct):
//   tea_ctr(key, data, segs, nsegs, total_units)
//       8-byte units; unit j of a segment is XORed with
//       BE32(v0) || BE32(v1) = TEA_k(c >> 32, c & 0xffffffff), c = start + j
//       (mod 2^64), start = big-endian u64 of iv[0..8] (iv[8..16] ignored).
//       A partial last unit only touches bytes < len.
//   tea_encrypt_blocks(key, data, nblocks)
//       raw TEA on 8-byte blocks in place, v0/v1 = big-endian words of the block.
// key: 4 words k0..k3, already parsed by the host as big-endian words of the
// 16-byte key. See README.md.
//
// Constant time: YES. Only adds, shifts and XORs on registers; no
// data-dependent branches or memory addresses. (The segment walk depends on
// public lengths only.)

// Rust: #[repr(C)], 40 bytes.
struct CipherSeg {
    unsigned long long offset;      // byte offset in data, multiple of 16
    unsigned long long len;         // bytes in the segment (any, may be 0)
    unsigned long long first_unit;  // job-wide index of the segment's first 8-byte unit
    unsigned char iv[16];           // iv[0..8]: big-endian start counter
};

#define GV_TEA_DELTA 0x9E3779B9u
// Units per thread: four independent TEA chains hide the add/xor latency.
#define GV_TEA_K 4

__device__ __forceinline__ unsigned int gv_bswap32(unsigned int x) { return __byte_perm(x, 0u, 0x0123u); }

// K blocks side by side; sum is a compile-time constant in every cycle.
template <int K>
__device__ __forceinline__ void gv_tea_encrypt(unsigned int (&v0)[K], unsigned int (&v1)[K], const unsigned int k0,
                                               const unsigned int k1, const unsigned int k2, const unsigned int k3) {
#pragma unroll
    for (unsigned int i = 1; i <= 32; ++i) {
        const unsigned int sum = i * GV_TEA_DELTA;
#pragma unroll
        for (int b = 0; b < K; ++b) {
            v0[b] += ((v1[b] << 4) + k0) ^ (v1[b] + sum) ^ ((v1[b] >> 5) + k1);
            v1[b] += ((v0[b] << 4) + k2) ^ (v0[b] + sum) ^ ((v0[b] >> 5) + k3);
        }
    }
}

// Last segment whose first_unit <= u (empty segments resolve to the next one).
__device__ __forceinline__ unsigned int gv_find_seg(const CipherSeg* __restrict__ segs, unsigned int nsegs,
                                                    unsigned long long u) {
    unsigned int lo = 0, hi = nsegs;
    while (hi - lo > 1u) {
        const unsigned int mid = (lo + hi) >> 1;
        if (__ldg(&segs[mid].first_unit) <= u) lo = mid; else hi = mid;
    }
    return lo;
}

extern "C" __global__ void __launch_bounds__(256)
tea_ctr(const unsigned int* __restrict__ key, unsigned char* __restrict__ data, const CipherSeg* __restrict__ segs,
        unsigned int nsegs, unsigned long long total_units) {
    if (nsegs == 0) return;
    const unsigned int k0 = __ldg(key), k1 = __ldg(key + 1), k2 = __ldg(key + 2), k3 = __ldg(key + 3);
    const unsigned long long nchunks = (total_units + (GV_TEA_K - 1)) / GV_TEA_K;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; c < nchunks;
         c += stride) {
        const unsigned long long u0 = c * GV_TEA_K;
        unsigned int s = gv_find_seg(segs, nsegs, u0);
        unsigned int v0[GV_TEA_K], v1[GV_TEA_K], nb[GV_TEA_K];
        unsigned char* p[GV_TEA_K];
        uint2 d[GV_TEA_K];
#pragma unroll
        for (int k = 0; k < GV_TEA_K; ++k) {
            const unsigned long long u = u0 + k;
            nb[k] = 0; p[k] = data; v0[k] = v1[k] = 0; d[k] = make_uint2(0u, 0u);
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
                    v0[k] = (unsigned int)(ctr >> 32);
                    v1[k] = (unsigned int)ctr;
                    if (nb[k] == 8u) d[k] = *(const uint2*)p[k];   // load early, hide latency under TEA
                }
            }
        }
        gv_tea_encrypt<GV_TEA_K>(v0, v1, k0, k1, k2, k3);
#pragma unroll
        for (int k = 0; k < GV_TEA_K; ++k) {
            const unsigned int e0 = gv_bswap32(v0[k]), e1 = gv_bswap32(v1[k]);   // keystream bytes BE32(v0) || BE32(v1)
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

// data must be 8-byte aligned.
extern "C" __global__ void __launch_bounds__(256)
tea_encrypt_blocks(const unsigned int* __restrict__ key, unsigned char* __restrict__ data,
                   unsigned long long nblocks) {
    const unsigned int k0 = __ldg(key), k1 = __ldg(key + 1), k2 = __ldg(key + 2), k3 = __ldg(key + 3);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks; i += stride) {
        const uint2 w = ((const uint2*)data)[i];
        unsigned int v0[1] = {gv_bswap32(w.x)}, v1[1] = {gv_bswap32(w.y)};
        gv_tea_encrypt<1>(v0, v1, k0, k1, k2, k3);
        ((uint2*)data)[i] = make_uint2(gv_bswap32(v0[0]), gv_bswap32(v1[0]));
    }
}
