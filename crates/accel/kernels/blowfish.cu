// blowfish.cu -- Blowfish (16 rounds) in CTR mode, and raw ECB.
//
// Kernels (extern "C", grid-stride, any grid size is correct):
//   blowfish_ctr(pbox, sbox, data, segs, nsegs, total_units)
//       S-boxes replicated 32x in 128 KiB of dynamic shared memory (one copy
//       per bank, lane l reads copy l: conflict-free); block 1024; needs the
//       131072-byte dynamic shared memory opt-in.
//   blowfish_ctr_v2(pbox, sbox, data, segs, nsegs, total_units)
//       one 4 KiB copy of the S-boxes in static shared memory (the seed
//       paper's layout; lookups conflict at random); block 256. Same output.
//   blowfish_encrypt_blocks(pbox, sbox, data, nblocks)
//       raw Blowfish on 8-byte blocks in place, L/R = big-endian words.
// pbox: 18 words P1..P18; sbox: 1024 words, S0[256] then S1, S2, S3; both
// from the host's (real) Blowfish key schedule. CTR: 8-byte units; unit j of
// a segment is XORed with BE32(L) || BE32(R) = Blowfish(c >> 32, c & 0xffffffff),
// c = start + j (mod 2^64), start = big-endian u64 of iv[0..8] (iv[8..16]
// ignored). A partial last unit only touches bytes < len. gpu/launch.rs
// declares the same parameter lists (a test compares them). See README.md.
//
// Constant time: NO (secret-indexed S-box lookups in shared memory; the
// replicated layout removes bank conflicts, not the data-dependent addresses).

#include "ctr_common.cuh"

extern __shared__ __align__(16) unsigned char gv_smem[];

// GV_BF_X32_BYTES (131072: 4 boxes x 256 x 32 copies x 4 bytes) and the
// units per thread GV_BF_K, GV_BF_V2_K (independent Feistel chains for ILP)
// come from abi.cuh.
#define GV_BF_X1_BYTES 4096u
static_assert(GV_BF_X32_BYTES == 4u * 256u * 32u * 4u, "the x32 layout fills the dynamic shared memory");

// Layouts (SH = log2 of the entry stride in bytes):
//   SH = 7: word (box*256 + x)*32 + c holds S_box[x] for copy c (x32);
//   SH = 2: word box*256 + x (x1).
template <int SH>
__device__ __forceinline__ void gv_bf_fill(unsigned int* tab, const unsigned int* __restrict__ sbox) {
    const unsigned int words = 1024u << (SH - 2);
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) tab[i] = __ldg(sbox + (i >> (SH - 2)));
}

// F(x) = ((S0[x>>24] + S1[x>>16 & 255]) ^ S2[x>>8 & 255]) + S3[x & 255].
template <int SH>
__device__ __forceinline__ unsigned int gv_bf_f(const unsigned char* tb, unsigned int lb, unsigned int x) {
    const unsigned int a = __umulhi(x, 256u), b = __byte_perm(x, 0u, 0x4442u);
    const unsigned int c = __byte_perm(x, 0u, 0x4441u), d = __byte_perm(x, 0u, 0x4440u);
    const unsigned int box = 256u << SH;
    // offsets as 32-bit values first: lets the compiler form one IMAD per
    // index and put the box offset in the LDS immediate
    const unsigned int oa = a * (1u << SH) + lb, ob = b * (1u << SH) + lb;
    const unsigned int oc = c * (1u << SH) + lb, od = d * (1u << SH) + lb;
    const unsigned int sa = *(const unsigned int*)(tb + oa);
    const unsigned int sb = *(const unsigned int*)(tb + box + ob);
    const unsigned int sc = *(const unsigned int*)(tb + 2 * box + oc);
    const unsigned int sd = *(const unsigned int*)(tb + 3 * box + od);
    return ((sa + sb) ^ sc) + sd;
}

// K blocks side by side. Two rounds per step so L and R never swap.
template <int SH, int K>
__device__ __forceinline__ void gv_bf_encrypt(const unsigned char* tb, unsigned int lb, const unsigned int (&P)[18],
                                              unsigned int (&L)[K], unsigned int (&R)[K]) {
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
#pragma unroll
        for (int b = 0; b < K; ++b) {
            L[b] ^= P[i];
            R[b] ^= gv_bf_f<SH>(tb, lb, L[b]);
            R[b] ^= P[i + 1];
            L[b] ^= gv_bf_f<SH>(tb, lb, R[b]);
        }
    }
#pragma unroll
    for (int b = 0; b < K; ++b) {
        const unsigned int l = L[b] ^ P[16], r = R[b] ^ P[17];
        L[b] = r;   // final swap
        R[b] = l;
    }
}

// The cipher of gv_ctr8_run (ctr_common.cuh): table layout SH at tb, lane
// offset lb, P-array in registers.
template <int SH>
struct GvBfEnc {
    const unsigned char* tb;
    unsigned int lb;
    unsigned int P[18];
    template <int K>
    __device__ __forceinline__ void operator()(unsigned int (&L)[K], unsigned int (&R)[K]) const {
        gv_bf_encrypt<SH, K>(tb, lb, P, L, R);
    }
};

// The CTR kernels' body once the table is filled.
template <int SH, int K>
__device__ __forceinline__ void gv_bf_ctr_run(const unsigned char* tb, unsigned int lb,
                                              const unsigned int* __restrict__ pbox, unsigned char* __restrict__ data,
                                              const CipherSeg* __restrict__ segs, unsigned int nsegs,
                                              unsigned long long total_units) {
    GvBfEnc<SH> enc;
    enc.tb = tb;
    enc.lb = lb;
#pragma unroll
    for (int i = 0; i < 18; ++i) enc.P[i] = __ldg(pbox + i);
    gv_ctr8_run<K>(enc, data, segs, nsegs, total_units);
}

// 128 KiB table: one block per SM, so the block carries the occupancy.
extern "C" __global__ void __launch_bounds__(1024, 1)
blowfish_ctr(const unsigned int* __restrict__ pbox, const unsigned int* __restrict__ sbox,
             unsigned char* __restrict__ data, const CipherSeg* __restrict__ segs, unsigned int nsegs,
             unsigned long long total_units) {
    if (nsegs == 0 || (unsigned long long)blockIdx.x * blockDim.x * GV_BF_K >= total_units) return;   // uniform per block
    unsigned int* tab = (unsigned int*)gv_smem;   // GV_BF_X32_BYTES dynamic
    gv_bf_fill<7>(tab, sbox);
    __syncthreads();
    gv_bf_ctr_run<7, GV_BF_K>((const unsigned char*)tab, gv_opaque(4u * (threadIdx.x & 31u)), pbox, data, segs,
                              nsegs, total_units);
}

extern "C" __global__ void __launch_bounds__(256)
blowfish_ctr_v2(const unsigned int* __restrict__ pbox, const unsigned int* __restrict__ sbox,
                unsigned char* __restrict__ data, const CipherSeg* __restrict__ segs, unsigned int nsegs,
                unsigned long long total_units) {
    __shared__ __align__(16) unsigned int tab[GV_BF_X1_BYTES / 4];
    if (nsegs == 0 || (unsigned long long)blockIdx.x * blockDim.x * GV_BF_V2_K >= total_units) return;
    gv_bf_fill<2>(tab, sbox);
    __syncthreads();
    gv_bf_ctr_run<2, GV_BF_V2_K>((const unsigned char*)tab, 0u, pbox, data, segs, nsegs, total_units);
}

// data must be 8-byte aligned.
extern "C" __global__ void __launch_bounds__(256)
blowfish_encrypt_blocks(const unsigned int* __restrict__ pbox, const unsigned int* __restrict__ sbox,
                        unsigned char* __restrict__ data, unsigned long long nblocks) {
    __shared__ __align__(16) unsigned int tab[GV_BF_X1_BYTES / 4];
    if ((unsigned long long)blockIdx.x * blockDim.x >= nblocks) return;
    gv_bf_fill<2>(tab, sbox);
    __syncthreads();
    unsigned int P[18];
#pragma unroll
    for (int i = 0; i < 18; ++i) P[i] = __ldg(pbox + i);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks; i += stride) {
        const uint2 w = ((const uint2*)data)[i];
        unsigned int L[1] = {gv_bswap32(w.x)}, R[1] = {gv_bswap32(w.y)};
        gv_bf_encrypt<2, 1>((const unsigned char*)tab, 0u, P, L, R);
        ((uint2*)data)[i] = make_uint2(gv_bswap32(L[0]), gv_bswap32(R[0]));
    }
}
