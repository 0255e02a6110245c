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
// 16-byte key. gpu/launch.rs declares the same parameter lists (a test
// compares them). See README.md.
//
// Constant time: YES. Only adds, shifts and XORs on registers; no
// data-dependent branches or memory addresses. (The segment walk depends on
// public lengths only.)

#include "ctr_common.cuh"

#define GV_TEA_DELTA 0x9E3779B9u
// Units per thread: GV_TEA_K (abi.cuh); four independent TEA chains hide
// the add/xor latency.

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

// The cipher of gv_ctr8_run (ctr_common.cuh).
struct GvTeaEnc {
    unsigned int k0, k1, k2, k3;
    template <int K>
    __device__ __forceinline__ void operator()(unsigned int (&v0)[K], unsigned int (&v1)[K]) const {
        gv_tea_encrypt<K>(v0, v1, k0, k1, k2, k3);
    }
};

extern "C" __global__ void __launch_bounds__(256)
tea_ctr(const unsigned int* __restrict__ key, unsigned char* __restrict__ data, const CipherSeg* __restrict__ segs,
        unsigned int nsegs, unsigned long long total_units) {
    if (nsegs == 0) return;
    const GvTeaEnc enc{__ldg(key), __ldg(key + 1), __ldg(key + 2), __ldg(key + 3)};
    gv_ctr8_run<GV_TEA_K>(enc, data, segs, nsegs, total_units);
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
