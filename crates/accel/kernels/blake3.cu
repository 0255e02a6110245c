// blake3.cu -- BLAKE3 (plain and keyed, 32-byte output) over many segments.
//
// Two kernels (extern "C", grid-stride, any grid size is correct):
//   blake3_chunks(key, flags, data, pieces, npieces, total_chunks, cvs, digests)
//       one thread per 1 KiB chunk, job-wide; writes each chunk's chaining
//       value to cvs[first_chunk + j], or, for a segment that is a single
//       chunk (0..=1024 bytes), its root output to digests[seg].
//   blake3_reduce(key, flags, levels, nlevels, total_groups, cvs_in, cvs_out, digests)
//       one thread per group of up to 16 chaining values of one segment at one
//       tree level: merges them pairwise (the last odd one rises unchanged,
//       which is BLAKE3's left-balanced tree) into cvs_out[first_out + k], or,
//       when the group is the segment's whole level, into its root digest.
// key: 8 little-endian words (the IV for plain hashing); flags: 0 or
// KEYED_HASH (16). See README.md.
//
// Constant time: YES for the key (register arithmetic only).

struct B3Piece {
    unsigned long long offset;       // byte address of the piece: data + offset
    unsigned long long len;          // bytes (0 only for an empty segment)
    unsigned long long first_chunk;  // job-wide index of the piece's first chunk (cvs slot)
    unsigned long long counter;      // chunk counter of that chunk within its segment
    unsigned int seg;                // segment index (digests slot)
    unsigned int root;               // 1: the segment is this single chunk
};

struct B3Level {
    unsigned long long first_in;     // index in cvs_in of the segment's first CV at this level
    unsigned long long count;        // CVs of the segment at this level (>= 2)
    unsigned long long first_out;    // job-wide index of the segment's first group
    unsigned int seg;
    unsigned int pad;
};

#define B3_CHUNK_START 1u
#define B3_CHUNK_END 2u
#define B3_PARENT 4u
#define B3_ROOT 8u

__device__ __forceinline__ unsigned int b3_rotr(unsigned int x, unsigned int n) { return __funnelshift_r(x, x, n); }

#define B3_G(a, b, c, d, x, y)                 \
    a = a + b + x; d = b3_rotr(d ^ a, 16);     \
    c = c + d;     b = b3_rotr(b ^ c, 12);     \
    a = a + b + y; d = b3_rotr(d ^ a, 8);      \
    c = c + d;     b = b3_rotr(b ^ c, 7);

// The compression function; out[0..8] = the new chaining value
// (state[i] ^ state[i + 8]), all that a 32-byte output needs.
__device__ __forceinline__ void b3_compress(const unsigned int cv[8], const unsigned int m[16],
                                            unsigned long long counter, unsigned int block_len,
                                            unsigned int flags, unsigned int out[8]) {
    unsigned int s0 = cv[0], s1 = cv[1], s2 = cv[2], s3 = cv[3], s4 = cv[4], s5 = cv[5], s6 = cv[6], s7 = cv[7];
    unsigned int s8 = 0x6A09E667u, s9 = 0xBB67AE85u, s10 = 0x3C6EF372u, s11 = 0xA54FF53Au;
    unsigned int s12 = (unsigned int)counter, s13 = (unsigned int)(counter >> 32), s14 = block_len, s15 = flags;
    unsigned int w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = m[i];
#pragma unroll
    for (int r = 0; r < 7; ++r) {
        B3_G(s0, s4, s8, s12, w[0], w[1]);
        B3_G(s1, s5, s9, s13, w[2], w[3]);
        B3_G(s2, s6, s10, s14, w[4], w[5]);
        B3_G(s3, s7, s11, s15, w[6], w[7]);
        B3_G(s0, s5, s10, s15, w[8], w[9]);
        B3_G(s1, s6, s11, s12, w[10], w[11]);
        B3_G(s2, s7, s8, s13, w[12], w[13]);
        B3_G(s3, s4, s9, s14, w[14], w[15]);
        if (r < 6) {   // message permutation 2,6,3,10,7,0,4,13,1,11,12,5,9,14,15,8
            unsigned int t[16];
            t[0] = w[2]; t[1] = w[6]; t[2] = w[3]; t[3] = w[10]; t[4] = w[7]; t[5] = w[0]; t[6] = w[4]; t[7] = w[13];
            t[8] = w[1]; t[9] = w[11]; t[10] = w[12]; t[11] = w[5]; t[12] = w[9]; t[13] = w[14]; t[14] = w[15]; t[15] = w[8];
#pragma unroll
            for (int i = 0; i < 16; ++i) w[i] = t[i];
        }
    }
    out[0] = s0 ^ s8; out[1] = s1 ^ s9; out[2] = s2 ^ s10; out[3] = s3 ^ s11;
    out[4] = s4 ^ s12; out[5] = s5 ^ s13; out[6] = s6 ^ s14; out[7] = s7 ^ s15;
}

// Loads up to 64 bytes (zero padded) as 16 little-endian words.
__device__ __forceinline__ void b3_load_block(const unsigned char* p, unsigned int n, unsigned int m[16]) {
    if (n == 64u && ((unsigned long long)p & 15ull) == 0) {
        const uint4* q = (const uint4*)p;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 v = q[i];
            m[4 * i] = v.x; m[4 * i + 1] = v.y; m[4 * i + 2] = v.z; m[4 * i + 3] = v.w;
        }
    } else if (n == 64u && ((unsigned long long)p & 3ull) == 0) {
#pragma unroll
        for (int i = 0; i < 16; ++i) m[i] = ((const unsigned int*)p)[i];
    } else if (n == 64u) {
        // A full block at an unaligned address (content-defined chunks):
        // 17 aligned words, funnel-shifted. The last word holds the block's
        // last byte, so it lies inside the allocation (allocations are
        // whole aligned words; at most 3 bytes past the block are read).
        const unsigned int sh = (unsigned int)((unsigned long long)p & 3ull) * 8u;
        const unsigned int* q = (const unsigned int*)((unsigned long long)p & ~3ull);
        unsigned int prev = q[0];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const unsigned int next = q[i + 1];
            m[i] = __funnelshift_r(prev, next, sh);
            prev = next;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) m[i] = 0;
        for (unsigned int i = 0; i < n; ++i) m[i >> 2] |= (unsigned int)p[i] << (8 * (i & 3));
    }
}

// Hashes one chunk of 0..=1024 bytes; returns its CV, or the root output
// when `root` (a segment of one chunk).
__device__ __forceinline__ void b3_chunk(const unsigned int key[8], unsigned int flags, const unsigned char* p,
                                         unsigned int len, unsigned long long counter, bool root,
                                         unsigned int cv[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) cv[i] = key[i];
    const unsigned int nblocks = len == 0 ? 1u : (len + 63u) >> 6;
    unsigned int m[16];
    for (unsigned int b = 0; b < nblocks; ++b) {
        const unsigned int n = b + 1 < nblocks ? 64u : len - 64u * b;
        b3_load_block(p + 64u * b, n, m);
        unsigned int f = flags;
        if (b == 0) f |= B3_CHUNK_START;
        if (b + 1 == nblocks) f |= B3_CHUNK_END | (root ? B3_ROOT : 0u);
        b3_compress(cv, m, counter, n, f, cv);
    }
}

__device__ __forceinline__ void b3_parent(const unsigned int key[8], unsigned int flags, const unsigned int l[8],
                                          const unsigned int r[8], bool root, unsigned int out[8]) {
    unsigned int m[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) { m[i] = l[i]; m[8 + i] = r[i]; }
    b3_compress(key, m, 0ull, 64u, flags | B3_PARENT | (root ? B3_ROOT : 0u), out);
}

__device__ __forceinline__ void b3_store8(unsigned int* dst, const unsigned int v[8]) {
    uint4* q = (uint4*)dst;
    q[0] = make_uint4(v[0], v[1], v[2], v[3]);
    q[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ void b3_load8(const unsigned int* src, unsigned int v[8]) {
    const uint4* q = (const uint4*)src;
    const uint4 a = q[0], b = q[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

__device__ __forceinline__ unsigned long long b3_chunks_of(unsigned long long len) {
    return len == 0 ? 1ull : (len + 1023ull) >> 10;
}

extern "C" __global__ void __launch_bounds__(256)
blake3_chunks(const unsigned int* __restrict__ key_in, unsigned int flags, const unsigned char* __restrict__ data,
              const B3Piece* __restrict__ pieces, unsigned int npieces, unsigned long long total_chunks,
              unsigned int* __restrict__ cvs, unsigned int* __restrict__ digests) {
    if (npieces == 0) return;
    unsigned int key[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) key[i] = __ldg(key_in + i);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; c < total_chunks;
         c += stride) {
        unsigned int lo = 0, hi = npieces;   // last piece with first_chunk <= c
        while (hi - lo > 1u) {
            const unsigned int mid = (lo + hi) >> 1;
            if (__ldg(&pieces[mid].first_chunk) <= c) lo = mid; else hi = mid;
        }
        const B3Piece* pc = pieces + lo;
        const unsigned long long j = c - __ldg(&pc->first_chunk), len = __ldg(&pc->len);
        if (j >= b3_chunks_of(len)) continue;   // inconsistent descriptors: touch nothing
        const unsigned int n = (unsigned int)(len - 1024ull * j < 1024ull ? len - 1024ull * j : 1024ull);
        const bool root = __ldg(&pc->root) != 0u;
        unsigned int cv[8];
        b3_chunk(key, flags, data + __ldg(&pc->offset) + 1024ull * j, n, __ldg(&pc->counter) + j, root, cv);
        if (root) b3_store8(digests + 8ull * __ldg(&pc->seg), cv);
        else b3_store8(cvs + 8ull * c, cv);
    }
}

#define B3_GROUP 16

extern "C" __global__ void __launch_bounds__(128)
blake3_reduce(const unsigned int* __restrict__ key_in, unsigned int flags, const B3Level* __restrict__ levels,
              unsigned int nlevels, unsigned long long total_groups, const unsigned int* __restrict__ cvs_in,
              unsigned int* __restrict__ cvs_out, unsigned int* __restrict__ digests) {
    if (nlevels == 0) return;
    unsigned int key[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) key[i] = __ldg(key_in + i);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; g < total_groups;
         g += stride) {
        unsigned int lo = 0, hi = nlevels;
        while (hi - lo > 1u) {
            const unsigned int mid = (lo + hi) >> 1;
            if (__ldg(&levels[mid].first_out) <= g) lo = mid; else hi = mid;
        }
        const B3Level* lv = levels + lo;
        const unsigned long long k = g - __ldg(&lv->first_out), count = __ldg(&lv->count);
        if (16ull * k >= count) continue;
        const unsigned long long left = count - 16ull * k;
        unsigned int n = left < B3_GROUP ? (unsigned int)left : B3_GROUP;
        const bool whole = count <= B3_GROUP;   // this group reduces to the root
        unsigned int cv[B3_GROUP][8];
        for (unsigned int i = 0; i < n; ++i) b3_load8(cvs_in + 8ull * (__ldg(&lv->first_in) + 16ull * k + i), cv[i]);
        while (n > 1u) {
            const unsigned int half = n >> 1;
            for (unsigned int i = 0; i < half; ++i)
                b3_parent(key, flags, cv[2 * i], cv[2 * i + 1], whole && n == 2u, cv[i]);
            if (n & 1u) {
#pragma unroll
                for (int w = 0; w < 8; ++w) cv[half][w] = cv[n - 1][w];
            }
            n = (n + 1u) >> 1;
        }
        if (whole) b3_store8(digests + 8ull * __ldg(&lv->seg), cv[0]);
        else b3_store8(cvs_out + 8ull * g, cv[0]);
    }
}
