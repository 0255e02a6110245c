// serial.cu -- SHA-256, MD5, CRC-32 and CRC-32C: one thread per segment
// piece. These hashes are sequential within a message, so the GPU's
// parallelism comes from many segments; a segment longer than one piece is
// hashed piece after piece, the state carried in `state` between launches.
//
// Kernels (extern "C", grid-stride, any grid size is correct):
//   sha256_pieces(data, pieces, npieces, state, digests)
//   md5_pieces(data, pieces, npieces, state, digests)
//   crc32_pieces(data, pieces, npieces, state, digests)    (IEEE, reflected 0xEDB88320)
//   crc32c_pieces(data, pieces, npieces, state, digests)   (Castagnoli, reflected 0x82F63B78)
// state: 8 words per segment; digests: 32 bytes per segment (SHA-256: 32
// bytes; MD5: 16; CRCs: the u32 value as a little-endian word). gpu/launch.rs
// declares the same parameter list (a test compares them). See README.md.
//
// Constant time: YES (no secret inputs; lookups are by public data only).

#include "abi.cuh"

// gpu/abi.rs SerialPiece (the layout is checked below).
struct SerialPiece {
    unsigned long long offset;     // byte address: data + offset
    unsigned long long len;        // multiple of 64 unless the piece is the segment's last
    unsigned long long total_len;  // the whole segment's length (for padding)
    unsigned int seg;              // state / digests slot
    unsigned int flags;            // SP_FIRST: first piece of its segment, SP_LAST: last piece (abi.cuh)
};
GV_CHECK_LAYOUT(SerialPiece);

__device__ __forceinline__ unsigned int sp_bswap(unsigned int x) { return __byte_perm(x, 0u, 0x0123u); }
__device__ __forceinline__ unsigned int sp_rotr(unsigned int x, unsigned int n) { return __funnelshift_r(x, x, n); }
__device__ __forceinline__ unsigned int sp_rotl(unsigned int x, unsigned int n) { return __funnelshift_l(x, x, n); }

// 16 little-endian words of a full 64-byte block.
__device__ __forceinline__ void sp_load_le(const unsigned char* p, unsigned int m[16]) {
    if (((unsigned long long)p & 15ull) == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 v = ((const uint4*)p)[i];
            m[4 * i] = v.x; m[4 * i + 1] = v.y; m[4 * i + 2] = v.z; m[4 * i + 3] = v.w;
        }
    } else if (((unsigned long long)p & 3ull) == 0) {
#pragma unroll
        for (int i = 0; i < 16; ++i) m[i] = ((const unsigned int*)p)[i];
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i)
            m[i] = (unsigned int)p[4 * i] | ((unsigned int)p[4 * i + 1] << 8) | ((unsigned int)p[4 * i + 2] << 16) |
                   ((unsigned int)p[4 * i + 3] << 24);
    }
}

// The final 1 or 2 blocks of a Merkle-Damgard hash: `rem` (< 64) tail
// bytes, 0x80, zeros, the bit length (big- or little-endian). Calls
// `block(m)` with little-endian words.
template <class F>
__device__ __forceinline__ void sp_pad(const unsigned char* tail, unsigned int rem, unsigned long long total,
                                       bool big_endian_len, F block) {
    unsigned int m[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) m[i] = 0;
    for (unsigned int i = 0; i < rem; ++i) m[i >> 2] |= (unsigned int)tail[i] << (8 * (i & 3));
    m[rem >> 2] |= 0x80u << (8 * (rem & 3));
    if (rem >= 56) {
        block(m);
#pragma unroll
        for (int i = 0; i < 16; ++i) m[i] = 0;
    }
    const unsigned long long bits = total * 8ull;
    if (big_endian_len) {
        m[14] = sp_bswap((unsigned int)(bits >> 32));
        m[15] = sp_bswap((unsigned int)bits);
    } else {
        m[14] = (unsigned int)bits;
        m[15] = (unsigned int)(bits >> 32);
    }
    block(m);
}

__constant__ unsigned int SP_K256[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

// One SHA-256 block; `m` holds little-endian loads of the block's bytes.
__device__ __forceinline__ void sha256_block(unsigned int h[8], const unsigned int m[16]) {
    unsigned int w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = sp_bswap(m[i]);
    unsigned int a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        if (i >= 16) {
            const unsigned int x = w[(i - 15) & 15], y = w[(i - 2) & 15];
            const unsigned int s0 = sp_rotr(x, 7) ^ sp_rotr(x, 18) ^ (x >> 3);
            const unsigned int s1 = sp_rotr(y, 17) ^ sp_rotr(y, 19) ^ (y >> 10);
            w[i & 15] += s0 + w[(i - 7) & 15] + s1;
        }
        const unsigned int t1 = hh + (sp_rotr(e, 6) ^ sp_rotr(e, 11) ^ sp_rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                                SP_K256[i] + w[i & 15];
        const unsigned int t2 = (sp_rotr(a, 2) ^ sp_rotr(a, 13) ^ sp_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

__device__ __forceinline__ void md5_block(unsigned int h[4], const unsigned int m[16]) {
    const unsigned int S[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};
    unsigned int a = h[0], b = h[1], c = h[2], d = h[3];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        unsigned int f, g;
        if (i < 16) { f = (b & c) | (~b & d); g = i; }
        else if (i < 32) { f = (d & b) | (~d & c); g = (5 * i + 1) & 15; }
        else if (i < 48) { f = b ^ c ^ d; g = (3 * i + 5) & 15; }
        else { f = c ^ (b | ~d); g = (7 * i) & 15; }
        // K[i] = floor(2^32 * |sin(i + 1)|), tabulated by the compiler below.
        const unsigned int k[64] = {
            0xd76aa478u, 0xe8c7b756u, 0x242070dbu, 0xc1bdceeeu, 0xf57c0fafu, 0x4787c62au, 0xa8304613u, 0xfd469501u,
            0x698098d8u, 0x8b44f7afu, 0xffff5bb1u, 0x895cd7beu, 0x6b901122u, 0xfd987193u, 0xa679438eu, 0x49b40821u,
            0xf61e2562u, 0xc040b340u, 0x265e5a51u, 0xe9b6c7aau, 0xd62f105du, 0x02441453u, 0xd8a1e681u, 0xe7d3fbc8u,
            0x21e1cde6u, 0xc33707d6u, 0xf4d50d87u, 0x455a14edu, 0xa9e3e905u, 0xfcefa3f8u, 0x676f02d9u, 0x8d2a4c8au,
            0xfffa3942u, 0x8771f681u, 0x6d9d6122u, 0xfde5380cu, 0xa4beea44u, 0x4bdecfa9u, 0xf6bb4b60u, 0xbebfbc70u,
            0x289b7ec6u, 0xeaa127fau, 0xd4ef3085u, 0x04881d05u, 0xd9d4d039u, 0xe6db99e5u, 0x1fa27cf8u, 0xc4ac5665u,
            0xf4292244u, 0x432aff97u, 0xab9423a7u, 0xfc93a039u, 0x655b59c3u, 0x8f0ccc92u, 0xffeff47du, 0x85845dd1u,
            0x6fa87e4fu, 0xfe2ce6e0u, 0xa3014314u, 0x4e0811a1u, 0xf7537e82u, 0xbd3af235u, 0x2ad7d2bbu, 0xeb86d391u};
        const unsigned int t = d;
        d = c; c = b;
        b = b + sp_rotl(a + f + k[i] + m[g], S[i >> 4][i & 3]);
        a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
}


// The common walk: initialise or reload the state, run whole blocks, and on
// the segment's last piece pad and write the digest.
#define SP_WALK(NAME, WORDS, INIT, BLOCK, BIG_LEN, OUT)                                                         \
    extern "C" __global__ void __launch_bounds__(128)                                                           \
    NAME(const unsigned char* __restrict__ data, const SerialPiece* __restrict__ pieces, unsigned int npieces,  \
         unsigned int* __restrict__ state, unsigned int* __restrict__ digests) {                                \
        const unsigned int stride = gridDim.x * blockDim.x;                                                     \
        for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x; t < npieces; t += stride) {               \
            const SerialPiece pc = pieces[t];                                                                   \
            unsigned int h[WORDS];                                                                              \
            if (pc.flags & SP_FIRST) { INIT; }                                                                  \
            else {                                                                                              \
                _Pragma("unroll") for (int i = 0; i < WORDS; ++i) h[i] = state[8ull * pc.seg + i];              \
            }                                                                                                   \
            const unsigned char* p = data + pc.offset;                                                          \
            const unsigned long long full = pc.len & ~63ull;                                                    \
            /* the next block's loads are issued before this block's rounds:                                 \
               with few warps per SM nothing else hides their latency */                                        \
            unsigned int m[16];                                                                                 \
            if (full) sp_load_le(p, m);                                                                         \
            for (unsigned long long o = 0; o < full; o += 64) {                                                 \
                unsigned int nx[16];                                                                            \
                const bool more = o + 64 < full;                                                                \
                if (more) sp_load_le(p + o + 64, nx);                                                           \
                BLOCK(h, m);                                                                                    \
                if (more) { _Pragma("unroll") for (int i = 0; i < 16; ++i) m[i] = nx[i]; }                      \
            }                                                                                                   \
            if (pc.flags & SP_LAST) {                                                                           \
                sp_pad(p + full, (unsigned int)(pc.len - full), pc.total_len, BIG_LEN,                          \
                       [&](const unsigned int* mm) { BLOCK(h, mm); });                                          \
                _Pragma("unroll") for (int i = 0; i < WORDS; ++i) digests[8ull * pc.seg + i] = OUT(h[i]);       \
            } else {                                                                                            \
                _Pragma("unroll") for (int i = 0; i < WORDS; ++i) state[8ull * pc.seg + i] = h[i];              \
            }                                                                                                   \
        }                                                                                                       \
    }

#define SP_SHA_INIT                                                                     \
    h[0] = 0x6a09e667u; h[1] = 0xbb67ae85u; h[2] = 0x3c6ef372u; h[3] = 0xa54ff53au;     \
    h[4] = 0x510e527fu; h[5] = 0x9b05688cu; h[6] = 0x1f83d9abu; h[7] = 0x5be0cd19u;
#define SP_MD5_INIT h[0] = 0x67452301u; h[1] = 0xefcdab89u; h[2] = 0x98badcfeu; h[3] = 0x10325476u;
#define SP_ID(x) (x)

SP_WALK(sha256_pieces, 8, SP_SHA_INIT, sha256_block, true, sp_bswap)
SP_WALK(md5_pieces, 4, SP_MD5_INIT, md5_block, false, SP_ID)

// CRC: slice-by-4 tables in shared memory, built per block.
__device__ __forceinline__ void crc_tables(unsigned int (*tbl)[256], unsigned int poly) {
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) {
        unsigned int c = i;
#pragma unroll
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (poly & (0u - (c & 1u)));
        tbl[0][i] = c;
    }
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) {
        unsigned int c = tbl[0][i];
        for (int t = 1; t < 4; ++t) { c = (c >> 8) ^ tbl[0][c & 255u]; tbl[t][i] = c; }
    }
    __syncthreads();
}

__device__ __forceinline__ unsigned int crc_run(unsigned int (*tbl)[256], unsigned int c, const unsigned char* p,
                                                unsigned long long n) {
    unsigned long long i = 0;
    while (i < n && ((unsigned long long)(p + i) & 3ull)) c = (c >> 8) ^ tbl[0][(c ^ p[i++]) & 255u];
    for (; i + 4 <= n; i += 4) {
        c ^= *(const unsigned int*)(p + i);
        c = tbl[3][c & 255u] ^ tbl[2][(c >> 8) & 255u] ^ tbl[1][(c >> 16) & 255u] ^ tbl[0][c >> 24];
    }
    for (; i < n; ++i) c = (c >> 8) ^ tbl[0][(c ^ p[i]) & 255u];
    return c;
}

#define CRC_KERNEL(NAME, POLY)                                                                                  \
    extern "C" __global__ void __launch_bounds__(128)                                                           \
    NAME(const unsigned char* __restrict__ data, const SerialPiece* __restrict__ pieces, unsigned int npieces,  \
         unsigned int* __restrict__ state, unsigned int* __restrict__ digests) {                                \
        __shared__ unsigned int tbl[4][256];                                                                    \
        if ((unsigned long long)blockIdx.x * blockDim.x >= npieces) return;                                     \
        crc_tables(tbl, POLY);                                                                                  \
        const unsigned int stride = gridDim.x * blockDim.x;                                                     \
        for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x; t < npieces; t += stride) {               \
            const SerialPiece pc = pieces[t];                                                                   \
            unsigned int c = (pc.flags & SP_FIRST) ? 0xFFFFFFFFu : state[8ull * pc.seg];                        \
            c = crc_run(tbl, c, data + pc.offset, pc.len);                                                      \
            if (pc.flags & SP_LAST) digests[8ull * pc.seg] = c ^ 0xFFFFFFFFu;                                   \
            else state[8ull * pc.seg] = c;                                                                      \
        }                                                                                                       \
    }

CRC_KERNEL(crc32_pieces, 0xEDB88320u)
CRC_KERNEL(crc32c_pieces, 0x82F63B78u)
