// blake3.cu -- BLAKE3 (plain and keyed, 32-byte output) over many segments.
//
// Kernels (extern "C", grid-stride, any grid size is correct): the two
// below and their _crc32c variants, which also compute each segment's
// CRC-32C from the same loads (see README.md):
//   blake3_chunks(key, flags, data, pieces, npieces, total_chunks, cvs, digests)
//       one thread per 1 KiB chunk, job-wide; writes each chunk's chaining
//       value to cvs[first_chunk + j], or, for a segment that is a single
//       chunk (0..=1024 bytes), its root output to digests[seg].
//   blake3_reduce(key, flags, levels, nlevels, total_groups, cvs_in, cvs_out, digests)
//       one thread per group of up to 16 chaining values of one segment at one
//       tree level: merges them pairwise (the last odd one rises unchanged,
//       which is BLAKE3's left-balanced tree) into cvs_out[first_out + k], or,
//       when the group is the segment's whole level, into its root digest.
//   blake3_chunks_crc32c(..., digests, crcs, crc_out)
//       and its table schemes blake3_chunks_crc32c_rep2 / _rep4 (same
//       arguments; blocks of 512 / 1024 threads, 64 / 128 KiB of dynamic
//       shared memory; README.md "Fused CRC-32C: table schemes")
//   blake3_reduce_crc32c(..., digests, crc_in, crc_out, crc_final)
// key: 8 little-endian words (the IV for plain hashing); flags: 0 or
// KEYED_HASH (16). gpu/launch.rs declares the same parameter lists (a test
// compares them). See README.md.
//
// Constant time: YES for the key (register arithmetic only).

#include "abi.cuh"

// gpu/abi.rs B3Piece and B3Level (the layouts are checked below).
struct B3Piece {
    unsigned long long offset;       // byte address of the piece: data + offset
    unsigned long long len;          // bytes (0 only for an empty segment)
    unsigned long long first_chunk;  // job-wide index of the piece's first chunk (cvs slot)
    unsigned long long counter;      // chunk counter of that chunk within its segment
    unsigned int seg;                // segment index (digests slot)
    unsigned int root;               // 1: the segment is this single chunk
};
GV_CHECK_LAYOUT(B3Piece);

struct B3Level {
    unsigned long long first_in;     // index in cvs_in of the segment's first CV at this level
    unsigned long long count;        // CVs of the segment at this level (>= 2)
    unsigned long long first_out;    // job-wide index of the segment's first group
    unsigned int seg;
    unsigned int crc_full;           // CRC-32C x^(8 |node|) of a full node at this level (_crc32c only)
    unsigned int crc_last;           // the same for the segment's last node at this level
    unsigned int pad;
};
GV_CHECK_LAYOUT(B3Level);

// Dynamic shared memory: the replicated CRC-32C tables (_crc32c_rep* only).
extern __shared__ __align__(16) unsigned char gv_smem[];

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

// Loads a partial block of n < 64 bytes (zero padded) as 16 little-endian
// words: once per chunk at most, so byte loads are fine. Every index into m
// is a constant after unrolling: a byte loop writing m[i >> 2] would put m
// in local memory for the whole chunk loop.
__device__ __forceinline__ void b3_load_partial(const unsigned char* p, unsigned int n, unsigned int m[16]) {
#pragma unroll
    for (unsigned int i = 0; i < 16; ++i) {
        unsigned int w = 0;
#pragma unroll
        for (unsigned int k = 0; k < 4; ++k)
            if (4u * i + k < n) w |= (unsigned int)p[4u * i + k] << (8u * k);
        m[i] = w;
    }
}

// Reads the full 64-byte blocks of one chunk with 16-byte loads at any
// alignment. Content-defined chunks start anywhere; 4-byte loads there
// (17 per block) cost 4x the L1 wavefronts of 16-byte ones, because the
// threads of a warp read 1 KiB apart and every warp-wide load touches 32
// lines. A block at byte offset sh (1..15) in its 16-byte word spans 5
// aligned words; the 5th is the next block's 1st, so it is carried: 4 loads
// per block either way. The words read hold block bytes only at their
// ends: an aligned 16-byte word never crosses a page, so it is mapped when
// the byte it holds is (up to 15 bytes past the block are read).
struct B3Reader {
    const uint4* q;
    unsigned int sh;
    uint4 carry;
};

__device__ __forceinline__ void b3_reader_init(B3Reader& r, const unsigned char* p) {
    r.q = (const uint4*)((unsigned long long)p & ~15ull);
    r.sh = (unsigned int)((unsigned long long)p & 15ull);
    if (r.sh) r.carry = r.q[0];
}

// m[i] = bytes 4i+sh .. 4i+sh+4 of the 20 words w, for a constant word shift K.
template <int K>
__device__ __forceinline__ void b3_extract(const unsigned int w[20], unsigned int bits, unsigned int m[16]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) m[i] = __funnelshift_r(w[i + K], w[i + K + 1], bits);
}

__device__ __forceinline__ void b3_reader_next(B3Reader& r, unsigned int m[16]) {
    if (r.sh == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 v = r.q[i];
            m[4 * i] = v.x; m[4 * i + 1] = v.y; m[4 * i + 2] = v.z; m[4 * i + 3] = v.w;
        }
        r.q += 4;
        return;
    }
    unsigned int w[20];
    w[0] = r.carry.x; w[1] = r.carry.y; w[2] = r.carry.z; w[3] = r.carry.w;
#pragma unroll
    for (int i = 1; i < 5; ++i) {
        const uint4 v = r.q[i];
        w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        if (i == 4) r.carry = v;
    }
    r.q += 4;
    // sh is the same for every block of the chunk and, in the fused job,
    // for every thread of a warp inside one content-defined chunk, so the
    // switch rarely diverges.
    const unsigned int bits = (r.sh & 3u) * 8u;
    switch (r.sh >> 2) {
        case 0: b3_extract<0>(w, bits, m); break;
        case 1: b3_extract<1>(w, bits, m); break;
        case 2: b3_extract<2>(w, bits, m); break;
        default: b3_extract<3>(w, bits, m); break;
    }
}

// CRC-32C (Castagnoli, reflected 0x82F63B78) tables for slicing by 8:
// t[k][b] = the register change of byte b followed by k zero bytes. 8 KiB
// of shared memory, built once per block; only the _crc32c kernels use them.
#define B3_CRC_POLY 0x82F63B78u
__device__ __forceinline__ void b3_crc_tables(unsigned int (*t)[256]) {
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) {
        unsigned int c = i;
#pragma unroll
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (B3_CRC_POLY & (0u - (c & 1u)));
        t[0][i] = c;
    }
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) {
        unsigned int c = t[0][i];
        for (int k = 1; k < 8; ++k) { c = (c >> 8) ^ t[0][c & 255u]; t[k][i] = c; }
    }
    __syncthreads();
}

// The CRC register over the 64 bytes of m (words already loaded for BLAKE3):
// 8 slicing-by-8 steps, 8 table lookups and ~12 ALU ops per 8 bytes.
__device__ __forceinline__ unsigned int b3_crc_block(const unsigned int (*t)[256], unsigned int c,
                                                     const unsigned int m[16]) {
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
        const unsigned int a = c ^ m[i], b = m[i + 1];
        c = t[7][a & 255u] ^ t[6][(a >> 8) & 255u] ^ t[5][(a >> 16) & 255u] ^ t[4][a >> 24] ^
            t[3][b & 255u] ^ t[2][(b >> 8) & 255u] ^ t[1][(b >> 16) & 255u] ^ t[0][b >> 24];
    }
    return c;
}

// The CRC register over the first n < 64 bytes of m.
__device__ __forceinline__ unsigned int b3_crc_partial(const unsigned int (*t)[256], unsigned int c,
                                                       const unsigned int m[16], unsigned int n) {
#pragma unroll
    for (unsigned int i = 0; i < 16; ++i) {
        if (4u * i + 4u <= n) {
            const unsigned int a = c ^ m[i];
            c = t[3][a & 255u] ^ t[2][(a >> 8) & 255u] ^ t[1][(a >> 16) & 255u] ^ t[0][a >> 24];
        } else if (4u * i < n) {
            for (unsigned int k = 0; k < n - 4u * i; ++k) c = (c >> 8) ^ t[0][(c ^ (m[i] >> (8u * k))) & 255u];
        }
    }
    return c;
}

// CRC schemes for b3_chunk: block(c, m) runs the raw register c over the
// 64 bytes of m, partial(c, m, n) over its first n < 64 bytes.
struct B3CrcNone {   // blake3_chunks: no CRC, no code
    static constexpr bool on = false;
    __device__ __forceinline__ unsigned int block(unsigned int c, const unsigned int*) const { return c; }
    __device__ __forceinline__ unsigned int partial(unsigned int c, const unsigned int*, unsigned int) const { return c; }
};

struct B3CrcSlice8 {   // slicing by 8 over the 8 KiB tables above (bank conflicts: see README.md)
    static constexpr bool on = true;
    const unsigned int (*t)[256];
    __device__ __forceinline__ unsigned int block(unsigned int c, const unsigned int m[16]) const {
        return b3_crc_block(t, c, m);
    }
    __device__ __forceinline__ unsigned int partial(unsigned int c, const unsigned int m[16], unsigned int n) const {
        return b3_crc_partial(t, c, m, n);
    }
};

// Replicated tables, conflict-free: every lane reads its own copy of each
// table, in its own bank. Table k (byte b then k zero bytes, as t[k] above)
// of TABLES = 2 or 4 lives in 64 KiB pair k / 2, entry e of lane l's copy at
// byte (k / 2) * 65536 + e * 256 + (k % 2) * 128 + l * 4, i.e. bank l. That
// offset is one PRMT of the data word and lane * 4 (byte e moved to bits
// 8..15, lane * 4 in bits 0..7), the rest an LDS immediate: one ALU op and
// one conflict-free LDS per byte, where slice8 spends two ops (shift, mask)
// and a ~3.5-way conflicted LDS.
// B3_CRC_REP_PAIR_BYTES (65536) comes from abi.cuh: the launch passes it.
static_assert(B3_CRC_REP_PAIR_BYTES == 2u * 32u * 1024u, "a pair: 2 tables x 256 entries x 32 lanes x 4 bytes");
template <int TABLES>
__device__ __forceinline__ void b3_crc_rep_tables(unsigned int* rep, unsigned int (*base)[256]) {
    for (unsigned int i = threadIdx.x; i < 256u * TABLES; i += blockDim.x) {
        unsigned int c = i & 255u;
        for (unsigned int k = 0; k < 8u * ((i >> 8) + 1u); ++k) c = (c >> 1) ^ (B3_CRC_POLY & (0u - (c & 1u)));
        base[i >> 8][i & 255u] = c;
    }
    __syncthreads();
    // Consecutive threads write consecutive words (no conflicts) and a warp
    // reads one base word (a broadcast).
    for (unsigned int i = threadIdx.x; i < 8192u * TABLES; i += blockDim.x)
        rep[i] = base[((i >> 14) << 1) | ((i >> 5) & 1u)][(i >> 6) & 255u];
    __syncthreads();
}

template <int TABLES>
struct B3CrcRep {
    static constexpr bool on = true;
    const unsigned char* tab;   // shared memory, B3_CRC_REP_PAIR_BYTES * TABLES / 2
    unsigned int lane4;         // (lane & 31) * 4

    // Table K's entry for byte J of a.
    template <unsigned int K, unsigned int J>
    __device__ __forceinline__ unsigned int look(unsigned int a) const {
        const unsigned int off = __byte_perm(a, lane4, 0x5504u | (J << 4));
        return *(const unsigned int*)(tab + (K >> 1) * B3_CRC_REP_PAIR_BYTES + (K & 1u) * 128u + off);
    }
    __device__ __forceinline__ unsigned int word(unsigned int c, unsigned int w) const {
        const unsigned int a = c ^ w;
        if (TABLES == 4) return look<3, 0>(a) ^ look<2, 1>(a) ^ look<1, 2>(a) ^ look<0, 3>(a);
        const unsigned int h = (a >> 16) ^ look<1, 0>(a) ^ look<0, 1>(a);
        return (h >> 16) ^ look<1, 0>(h) ^ look<0, 1>(h);
    }
    __device__ __forceinline__ unsigned int block(unsigned int c, const unsigned int m[16]) const {
#pragma unroll
        for (int i = 0; i < 16; ++i) c = word(c, m[i]);
        return c;
    }
    __device__ __forceinline__ unsigned int partial(unsigned int c, const unsigned int m[16], unsigned int n) const {
#pragma unroll
        for (unsigned int i = 0; i < 16; ++i) {
            if (4u * i + 4u <= n) {
                c = word(c, m[i]);
            } else if (4u * i < n) {
                for (unsigned int k = 0; k < n - 4u * i; ++k) c = (c >> 8) ^ look<0, 0>(c ^ (m[i] >> (8u * k)));
            }
        }
        return c;
    }
};

// Hashes one chunk of 0..=1024 bytes; returns its CV, or the root output
// when `root` (a segment of one chunk). With CRC, also runs the CRC-32C
// register `crc` over the same bytes as they are loaded.
template <class Crc>
__device__ __forceinline__ void b3_chunk(const unsigned int key[8], unsigned int flags, const unsigned char* p,
                                         unsigned int len, unsigned long long counter, bool root,
                                         unsigned int cv[8], const Crc& crc_scheme, unsigned int& crc) {
#pragma unroll
    for (int i = 0; i < 8; ++i) cv[i] = key[i];
    const unsigned int nblocks = len == 0 ? 1u : (len + 63u) >> 6;
    B3Reader reader;
    if (len >= 64u) b3_reader_init(reader, p);
    unsigned int m[16];
    for (unsigned int b = 0; b < nblocks; ++b) {
        const unsigned int n = b + 1 < nblocks ? 64u : len - 64u * b;
        if (n == 64u) b3_reader_next(reader, m);
        else b3_load_partial(p + 64u * b, n, m);
        if (Crc::on) crc = n == 64u ? crc_scheme.block(crc, m) : crc_scheme.partial(crc, m, n);
        unsigned int f = flags;
        if (b == 0) f |= B3_CHUNK_START;
        if (b + 1 == nblocks) f |= B3_CHUNK_END | (root ? B3_ROOT : 0u);
        b3_compress(cv, m, counter, n, f, cv);
    }
}

// a * b modulo the CRC-32C polynomial, reflected (x^0 is bit 31), as zlib's
// multmodp: ~32 steps. crc(A || B) = b3_crc_mul(x^(8 |B|), crc(A)) ^ crc(B)
// for raw registers (no final xor).
__device__ __forceinline__ unsigned int b3_crc_mul(unsigned int a, unsigned int b) {
    unsigned int p = 0;
    for (unsigned int m = 1u << 31; m != 0u; m >>= 1) {
        if (a & m) p ^= b;
        b = (b >> 1) ^ (B3_CRC_POLY & (0u - (b & 1u)));
    }
    return p;
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

// The piece of chunk base + lane, for every lane of a warp at once (the
// warp's chunks are base .. base + 32; all lanes must call it). A 32-way
// search over the pieces' first chunks finds the piece of `base` in
// log32(npieces) rounds (2 for 1 K pieces, 4 for 1 M) instead of a binary
// search's log2 dependent loads per thread; the up to 31 pieces that start
// inside the window are then one load per lane and a warp-wide OR. Returns
// a piece index < npieces; inconsistent descriptors give a wrong piece,
// which the caller's range check catches, never an out-of-range index.
__device__ __forceinline__ unsigned int b3_find_piece(const B3Piece* __restrict__ pieces, unsigned int npieces,
                                                      unsigned long long base) {
    const unsigned int lane = threadIdx.x & 31u;
    unsigned int lo = 0, hi = npieces;   // invariant: the piece of base is in [lo, hi)
    while (hi - lo > 1u) {
        const unsigned int step = (hi - lo + 31u) >> 5;
        const unsigned int probe = lo + lane * step;
        const bool le = probe < hi && __ldg(&pieces[probe].first_chunk) <= base;
        const unsigned int below = __popc(__ballot_sync(0xFFFFFFFFu, le));
        lo += (below > 0u ? below - 1u : 0u) * step;
        hi = lo + step < hi ? lo + step : hi;
    }
    unsigned int starts = 0;   // bit k: a piece after lo starts at base + k
    const unsigned int next = lo + 1u + lane;
    if (next < npieces) {
        const unsigned long long fc = __ldg(&pieces[next].first_chunk);
        if (fc > base && fc - base < 32ull) starts = 1u << (unsigned int)(fc - base);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) starts |= __shfl_xor_sync(0xFFFFFFFFu, starts, d);
    const unsigned int piece = lo + __popc(starts & (0xFFFFFFFFu >> (31u - lane)));
    return piece < npieces ? piece : npieces - 1u;
}

// Thread per 1 KiB chunk, warp-uniform grid-stride loop (block sizes are
// multiples of 32). With CRC, also the chunk's raw CRC-32C register: from
// 0xFFFFFFFF for a segment's first chunk (the init), from 0 otherwise, so
// the reduce combines registers linearly and the final xor comes last.
template <class Crc>
__device__ __forceinline__ void b3_chunks_body(const unsigned int* __restrict__ key_in, unsigned int flags,
                                               const unsigned char* __restrict__ data,
                                               const B3Piece* __restrict__ pieces, unsigned int npieces,
                                               unsigned long long total_chunks, unsigned int* __restrict__ cvs,
                                               unsigned int* __restrict__ digests, const Crc& crc_scheme,
                                               unsigned int* __restrict__ crcs, unsigned int* __restrict__ crc_out) {
    unsigned int key[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) key[i] = __ldg(key_in + i);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x + (threadIdx.x & ~31u);
         base < total_chunks; base += stride) {
        const unsigned int piece = b3_find_piece(pieces, npieces, base);
        const unsigned long long c = base + (threadIdx.x & 31u);
        if (c >= total_chunks) continue;
        const B3Piece* pc = pieces + piece;
        const unsigned long long first = __ldg(&pc->first_chunk), len = __ldg(&pc->len);
        if (c < first || c - first >= b3_chunks_of(len)) continue;   // inconsistent descriptors: touch nothing
        const unsigned long long j = c - first;
        const unsigned int n = (unsigned int)(len - 1024ull * j < 1024ull ? len - 1024ull * j : 1024ull);
        const bool root = __ldg(&pc->root) != 0u;
        const unsigned long long counter = __ldg(&pc->counter) + j;
        unsigned int cv[8];
        unsigned int crc = counter == 0ull ? 0xFFFFFFFFu : 0u;
        b3_chunk(key, flags, data + __ldg(&pc->offset) + 1024ull * j, n, counter, root, cv, crc_scheme, crc);
        if (root) b3_store8(digests + 8ull * __ldg(&pc->seg), cv);
        else b3_store8(cvs + 8ull * c, cv);
        if (Crc::on) {
            if (root) crc_out[__ldg(&pc->seg)] = crc ^ 0xFFFFFFFFu;
            else crcs[c] = crc;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
blake3_chunks(const unsigned int* __restrict__ key_in, unsigned int flags, const unsigned char* __restrict__ data,
              const B3Piece* __restrict__ pieces, unsigned int npieces, unsigned long long total_chunks,
              unsigned int* __restrict__ cvs, unsigned int* __restrict__ digests) {
    if (npieces == 0) return;
    b3_chunks_body(key_in, flags, data, pieces, npieces, total_chunks, cvs, digests, B3CrcNone{}, nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(256)
blake3_chunks_crc32c(const unsigned int* __restrict__ key_in, unsigned int flags,
                     const unsigned char* __restrict__ data, const B3Piece* __restrict__ pieces,
                     unsigned int npieces, unsigned long long total_chunks, unsigned int* __restrict__ cvs,
                     unsigned int* __restrict__ digests, unsigned int* __restrict__ crcs,
                     unsigned int* __restrict__ crc_out) {
    __shared__ unsigned int tbl[8][256];
    if (npieces == 0 || (unsigned long long)blockIdx.x * blockDim.x >= total_chunks) return;
    b3_crc_tables(tbl);
    b3_chunks_body(key_in, flags, data, pieces, npieces, total_chunks, cvs, digests, B3CrcSlice8{tbl}, crcs, crc_out);
}

// The replicated-table variants: tables in dynamic shared memory
// (B3_CRC_REP2_BYTES / B3_CRC_REP4_BYTES), blocks of 512 / 1024 threads
// (two blocks / one block an SM: 32 warps at 64 registers, as the others).
#define B3_CHUNKS_CRC_REP(NAME, TABLES, THREADS)                                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                            \
    NAME(const unsigned int* __restrict__ key_in, unsigned int flags, const unsigned char* __restrict__ data,        \
         const B3Piece* __restrict__ pieces, unsigned int npieces, unsigned long long total_chunks,                  \
         unsigned int* __restrict__ cvs, unsigned int* __restrict__ digests, unsigned int* __restrict__ crcs,        \
         unsigned int* __restrict__ crc_out) {                                                                       \
        __shared__ unsigned int base[TABLES][256];                                                                   \
        if (npieces == 0 || (unsigned long long)blockIdx.x * blockDim.x >= total_chunks) return;                     \
        b3_crc_rep_tables<TABLES>((unsigned int*)gv_smem, base);                                                     \
        const B3CrcRep<TABLES> scheme{gv_smem, (threadIdx.x & 31u) * 4u};                                            \
        b3_chunks_body(key_in, flags, data, pieces, npieces, total_chunks, cvs, digests, scheme, crcs, crc_out);     \
    }
B3_CHUNKS_CRC_REP(blake3_chunks_crc32c_rep2, 2, 512)
B3_CHUNKS_CRC_REP(blake3_chunks_crc32c_rep4, 4, 1024)

// B3_GROUP (16, chaining values a reduce thread merges) comes from abi.cuh.

// Thread per group of up to 16 CVs of one segment at one level. With CRC,
// the group's CRC registers are combined left to right: r = r * x^(8 |node|)
// + r_node, every node but the segment's last at this level being full
// (crc_full = x^(8 |full node|)), the last one crc_last; the root writes
// the final value (xor 0xFFFFFFFF).
template <bool CRC>
__device__ __forceinline__ void b3_reduce_body(const unsigned int* __restrict__ key_in, unsigned int flags,
                                               const B3Level* __restrict__ levels, unsigned int nlevels,
                                               unsigned long long total_groups,
                                               const unsigned int* __restrict__ cvs_in,
                                               unsigned int* __restrict__ cvs_out, unsigned int* __restrict__ digests,
                                               const unsigned int* __restrict__ crc_in,
                                               unsigned int* __restrict__ crc_out,
                                               unsigned int* __restrict__ crc_final) {
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
        const unsigned long long left = count - 16ull * k, first = __ldg(&lv->first_in) + 16ull * k;
        unsigned int n = left < B3_GROUP ? (unsigned int)left : B3_GROUP;
        const bool whole = count <= B3_GROUP;   // this group reduces to the root
        unsigned int crc = 0;
        if (CRC) {
            const unsigned int full = __ldg(&lv->crc_full), last = __ldg(&lv->crc_last);
            crc = __ldg(crc_in + first);
            for (unsigned int i = 1; i < n; ++i) {
                const bool is_last = 16ull * k + i + 1 == count;
                crc = b3_crc_mul(is_last ? last : full, crc) ^ __ldg(crc_in + first + i);
            }
        }
        unsigned int cv[B3_GROUP][8];
        for (unsigned int i = 0; i < n; ++i) b3_load8(cvs_in + 8ull * (first + i), cv[i]);
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
        if (CRC) {
            if (whole) crc_final[__ldg(&lv->seg)] = crc ^ 0xFFFFFFFFu;
            else crc_out[g] = crc;
        }
    }
}

extern "C" __global__ void __launch_bounds__(128)
blake3_reduce(const unsigned int* __restrict__ key_in, unsigned int flags, const B3Level* __restrict__ levels,
              unsigned int nlevels, unsigned long long total_groups, const unsigned int* __restrict__ cvs_in,
              unsigned int* __restrict__ cvs_out, unsigned int* __restrict__ digests) {
    if (nlevels == 0) return;
    b3_reduce_body<false>(key_in, flags, levels, nlevels, total_groups, cvs_in, cvs_out, digests, nullptr, nullptr,
                          nullptr);
}

extern "C" __global__ void __launch_bounds__(128)
blake3_reduce_crc32c(const unsigned int* __restrict__ key_in, unsigned int flags,
                     const B3Level* __restrict__ levels, unsigned int nlevels, unsigned long long total_groups,
                     const unsigned int* __restrict__ cvs_in, unsigned int* __restrict__ cvs_out,
                     unsigned int* __restrict__ digests, const unsigned int* __restrict__ crc_in,
                     unsigned int* __restrict__ crc_out, unsigned int* __restrict__ crc_final) {
    if (nlevels == 0) return;
    b3_reduce_body<true>(key_in, flags, levels, nlevels, total_groups, cvs_in, cvs_out, digests, crc_in, crc_out,
                         crc_final);
}
