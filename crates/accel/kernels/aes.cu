// aes.cu -- AES-256 in CTR mode over a batch of segments, and raw ECB.
//
// Kernels (all extern "C", grid-stride, any grid size is correct):
//   aes256_ctr(rk, data, segs, nsegs, total_units, out_delta)
//       T-tables Te0..Te3 x 32 copies in 128 KiB of dynamic shared memory;
//       block 1024 threads; needs the 131072-byte dynamic shared memory opt-in.
//   aes256_ctr_v2(rk, data, segs, nsegs, total_units, out_delta)
//       Te0 x 32 copies (32 KiB static shared) plus rotations; block 256;
//       same ABI and output, for measuring against aes256_ctr.
//   aes256_ecb_encrypt_blocks(rk, input, output, nblocks)
//       raw single-block encryption; input may equal output.
// rk is the 60-word FIPS-197 AES-256 key schedule, word i = big-endian bytes
// 4i..4i+3. Unit j of a segment is XORed with AES(rk, iv + j), the counter
// being the 16-byte iv read as one big-endian 128-bit integer, wrapping mod
// 2^128 (OpenSSL's CTR). A partial last unit only touches bytes < len.
// Results go out_delta bytes after their input (0: in place).
// gpu/launch.rs declares the same parameter lists (a test compares them).
// See README.md.
//
// Constant time: NO (secret-indexed shared-memory table lookups; the
// replicated layouts avoid bank conflicts, which removes the conflict timing
// channel, but not the data-dependent addressing itself).

#include "aes_core.cuh"

extern __shared__ __align__(16) unsigned char gv_smem[];

// Counter block of unit j: iv + j as a big-endian 128-bit integer.
struct GvAesCtrCounter {
    typedef CipherSeg Seg;
    static __device__ __forceinline__ void counter(const CipherSeg* g, unsigned long long j,
                                                   unsigned int (&st)[4]) {
        // iv sits at byte 24 of the struct, so 8-byte loads are aligned
        const unsigned long long* iv = (const unsigned long long*)g->iv;
        const unsigned long long a = __ldg(iv), b = __ldg(iv + 1);
        const unsigned long long hi = ((unsigned long long)gv_bswap32((unsigned int)a) << 32) |
                                      gv_bswap32((unsigned int)(a >> 32));
        const unsigned long long lo = ((unsigned long long)gv_bswap32((unsigned int)b) << 32) |
                                      gv_bswap32((unsigned int)(b >> 32));
        const unsigned long long lo2 = lo + j;
        const unsigned long long hi2 = hi + (lo2 < lo ? 1ull : 0ull);   // carry into the upper half
        st[0] = (unsigned int)(hi2 >> 32);
        st[1] = (unsigned int)hi2;
        st[2] = (unsigned int)(lo2 >> 32);
        st[3] = (unsigned int)lo2;
    }
};

// Units per thread: GV_AES_CTR_K and GV_AES_CTR_V2_K (abi.cuh; 2 keeps the
// 1024-thread variant within its 64-register budget while giving two
// independent block chains per thread).

// 1024 threads x 1 block per SM: the 128 KiB table allows one block per SM,
// so the block itself must carry the occupancy (32 warps).
extern "C" __global__ void __launch_bounds__(1024, 1)
aes256_ctr(const unsigned int* __restrict__ rk, unsigned char* __restrict__ data,
           const CipherSeg* __restrict__ segs, unsigned int nsegs, unsigned long long total_units,
           long long out_delta) {
    __shared__ __align__(16) unsigned int rks[60];
    unsigned int* tab = (unsigned int*)gv_smem;   // GV_AES_TAB_X32X4_BYTES dynamic
    if (!gv_ctr16_prologue<4, 7, GV_AES_CTR_K>(tab, rks, rk, nsegs, total_units)) return;
    gv_ctr16_run<GvAesCtrCounter, GV_AES_CTR_K>(GvAesEnc<4, 7>{(const unsigned char*)tab, gv_aes_lane_offset<7>(), rks},
                                                data, segs, nsegs, total_units, out_delta);
}

extern "C" __global__ void __launch_bounds__(256)
aes256_ctr_v2(const unsigned int* __restrict__ rk, unsigned char* __restrict__ data,
              const CipherSeg* __restrict__ segs, unsigned int nsegs, unsigned long long total_units,
              long long out_delta) {
    __shared__ __align__(16) unsigned int rks[60];
    __shared__ __align__(16) unsigned int tab[GV_AES_TAB_X32_BYTES / 4];
    if (!gv_ctr16_prologue<1, 7, GV_AES_CTR_V2_K>(tab, rks, rk, nsegs, total_units)) return;
    gv_ctr16_run<GvAesCtrCounter, GV_AES_CTR_V2_K>(GvAesEnc<1, 7>{(const unsigned char*)tab, gv_aes_lane_offset<7>(), rks},
                                                   data, segs, nsegs, total_units, out_delta);
}

// input and output must be 16-byte aligned; input == output is allowed (each
// thread reads its block before writing it).
extern "C" __global__ void __launch_bounds__(256)
aes256_ecb_encrypt_blocks(const unsigned int* __restrict__ rk, const unsigned char* input, unsigned char* output,
                          unsigned long long nblocks) {
    __shared__ __align__(16) unsigned int rks[60];
    __shared__ __align__(16) unsigned int tab[GV_AES_TAB_X32_BYTES / 4];
    if ((unsigned long long)blockIdx.x * blockDim.x >= nblocks) return;
    gv_aes_fill<1, 7>(tab);
    gv_aes_load_rk(rks, rk);
    __syncthreads();
    const unsigned int lb = gv_aes_lane_offset<7>();
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks;
         i += stride) {
        const uint4 v = ((const uint4*)input)[i];
        unsigned int st[1][4] = {{gv_bswap32(v.x), gv_bswap32(v.y), gv_bswap32(v.z), gv_bswap32(v.w)}};
        gv_aes_encrypt<1, 7, 1>((const unsigned char*)tab, lb, rks, st);
        ((uint4*)output)[i] = make_uint4(st[0][0], st[0][1], st[0][2], st[0][3]);
    }
}
