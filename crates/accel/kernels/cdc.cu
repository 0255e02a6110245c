// cdc.cu -- FastCDC 2020 chunking on the GPU: the gear hash of every
// position tested against the small and large masks of normalized chunking,
// then the chunk boundaries resolved in parallel, exactly.
//
// Kernels (extern "C", grid-stride, any grid size is correct):
//   gear_candidates(data, len, mask_s, mask_l, hits_s, hits_l)
//       for every position p of one segment of `len` bytes at `data`:
//       h(p) = sum over q in [p - 63, p] of GEAR[data[q]] << (p - q)  (mod 2^64),
//       the rolling hash h = (h << 1) + GEAR[byte], which forgets a byte after
//       64 steps. Bit p % 32 of hits_s[p / 32] is set iff (h(p) & mask_s) == 0,
//       likewise hits_l with mask_l. Positions p < 63 hash the bytes from 0.
//   cdc_summarize(lo_s, lo_l, n_lo, up_s, up_l)
//       bit b of up[j] = (lo[32 j + b] != 0): one level of the find-next
//       index over the candidate bitmaps (4 levels, see cdc_first).
//   cdc_walk, cdc_sync, cdc_fixup(job, segs, nsegs, nsections, lists, secs, fails, flags)
//       resolve the FastCDC 2020 min/avg/max/normalization rules on the
//       device, exactly as fastcdc::v2020 (src/cdc_resolve.rs is the CPU
//       twin). The scheme, for review:
//       * next(c), the end of a chunk that starts at c, depends only on c
//         (cdc_chunk_len: the 63 positions after the hash start c + min/2*2
//         are recomputed from the bytes, because the crate's hash restarts
//         there; later positions are the full-window hash, so their
//         candidates come from the bitmaps).
//       * Each segment is cut into sections of S >= max bytes. cdc_walk:
//         thread k walks from its section start s_k as if a chunk started
//         there, recording every start in [s_k, s_k + S) and the first
//         position past it (or the segment end) in its list.
//       * cdc_sync: thread k continues its walk from that last position into
//         section k + 1 until it lands on a position of list k + 1 (binary
//         search). Walks are deterministic, so from that common position on
//         list k + 1 is exactly the walk from wherever k's walk came from:
//         by induction from section 0 (which starts at 0, a true start) the
//         concatenation is the true chunk list. A junction that does not
//         meet within section k + 1 (or within CDC_TAIL steps) fails.
//       * cdc_fixup (thread per segment, only segments with a failure): for
//         each failed junction in order, re-walks section k + 1 from the
//         true entry (the last position of list k), then redoes the next
//         junction. Serial, but only where walks from different starts do
//         not meet: long runs of forced cuts at max (zeros) and the like.
//       Section k's chunks are the starts list[v .. e), each ending at the
//       next entry (list[e] is where section k + 1 takes over, or the
//       segment end). See README.md for the layouts.
// CDC_GEAR is fastcdc::v2020's table (seed 0). See README.md.
//
// gpu/launch.rs declares the same parameter lists (a test compares them).
//
// Constant time: not applicable (public data).

#include "abi.cuh"

// CDC_GEAR[256]: fastcdc::v2020's gear table (seed 0), generated from the
// crate by gpu/abi.rs, so the GPU hashes with the very table of the CPU twin.
#include "gear.cuh"

// ---- gear_candidates ---------------------------------------------------
//
// Cost per position (sm_90 SASS, fast path): 0.75 IMAD.HI + 1.75 IMAD (byte
// and table address, FMA pipe), LDS.64, LEA + LEA.HI.X (h = 2h + g), LOP3 x2
// + half a VIMNMX3 (filter; two positions share a 3-input min): 4.5
// ALU-pipe ops, 2.5 FMA-pipe ops, 1 LDS (a plain table lookup and a test of
// both masks take ~11 ALU ops and ~5 LDS wavefronts a warp).
// * The table is replicated (16 copies, 32 KiB): lane l reads copy l % 16,
//   which sits in bank pair l % 16, so a warp's LDS.64 takes 2 wavefronts
//   whatever the bytes (one 2 KiB copy: ~5 expected with random bytes).
// * A position can pass either mask only if (h & mask_s & mask_l) == 0, so
//   the fast path tests just that filter and keeps the minimum over 32
//   positions; a block of 32 with a zero minimum (~2^-19 a position with the
//   default masks: rare) is redone exactly from the saved hash. With a weak
//   filter (< 11 bits) every block is done exactly (2 masks: ~11 ALU ops).
// * 512 positions a thread: the 64-byte warm-up adds 3 ALU ops a byte over
//   an eighth of the positions (+~6%).
// * Data is read as 16-byte loads of 32-byte-aligned blocks, whatever the
//   alignment of `data` (r = data % 32): block j of the aligned stream
//   gives 32 hit bits at positions 32 j - r ..; word w is the funnel shift
//   of blocks w and w + 1 (a 17th block per span when r != 0).
// * Words go out 4 at a time (one 16-byte store a lane per 128 positions)
//   when both bitmaps are 16-byte aligned.
// Bound per GiB on an H100 (132 SMs, ~1.75 GHz, 64 ALU lanes an SM): ~5
// ALU ops a position with warm-up and loop -> 1.07e9 * 5 / (132 * 64 *
// 1.75e9) = 0.36 ms; issue (~8.3 instructions a position) 0.30 ms; LDS 2
// wavefronts a warp-position: 0.31 ms; HBM 1.06 GiB at 3.35 TB/s: 0.34 ms.
// With each thread loading its own span, an H100 measured 1.60 ms: the
// loads (see "Staging" below for the cure and its bound).

#define GEAR_COPIES 16u
// GEAR_SPAN (512 positions a thread) comes from abi.cuh: the host sizes
// the grid by it.
#define GEAR_BLOCKS 16     // 32-byte blocks a span
static_assert(GEAR_SPAN == 32 * GEAR_BLOCKS, "a span is GEAR_BLOCKS blocks of 32 positions");

// The lane's table copy as one opaque register: the lookup address is then
// one IMAD (x * 128 + tab, FMA pipe); with the shared base and the lane
// offset visible, the compiler adds them with an extra IADD3 (ALU pipe).
#ifdef __CUDA_ARCH__
typedef unsigned int GearTab;   // shared-window address of this lane's copy
__device__ __forceinline__ GearTab gear_tab(const unsigned long long* table) {
    unsigned int a = (unsigned int)__cvta_generic_to_shared(table) + 8u * (threadIdx.x % GEAR_COPIES);
    asm("mov.u32 %0, %0;" : "+r"(a));
    return a;
}
__device__ __forceinline__ unsigned long long gear_lookup(GearTab tab, unsigned int x) {
    unsigned long long v;
    asm volatile("ld.shared.u64 %0, [%1];" : "=l"(v) : "r"(x * (8u * GEAR_COPIES) + tab));
    return v;
}
#else   // host emulation of the kernels
typedef const unsigned char* GearTab;
inline GearTab gear_tab(const unsigned long long* table) {
    return (const unsigned char*)table + 8u * (threadIdx.x % GEAR_COPIES);
}
inline unsigned long long gear_lookup(GearTab tab, unsigned int x) {
    return *(const unsigned long long*)(tab + x * (8u * GEAR_COPIES));
}
#endif

__device__ __forceinline__ unsigned int gear_byte(const unsigned int (&w)[8], int k) {
    return __byte_perm(w[k >> 2], 0u, 0x4440u + (unsigned int)(k & 3));
}

// The table addresses of a word's 4 bytes on the FMA pipe (the ALU pipe is
// the fast path's limit): with t8 = w >> 8, t16 = w >> 16, t24 = w >> 24 as
// IMAD.HI, byte k's address is 128 (t_k - 256 t_k+1) + tab, two IMADs
// (mod 2^32). The constants are hidden from the front end, which would
// turn the IMAD.HI back into shifts and masks on the ALU pipe (ptxas then
// folds them in as immediates but keeps the IMADs).
struct GearConsts {
    unsigned int s8, s16, s24, m128, mneg;   // 2^8, 2^16, 2^24, 128, -32768
};
__device__ __forceinline__ unsigned int gear_hide(unsigned int x) {
#ifdef __CUDA_ARCH__
    asm("mov.u32 %0, %0;" : "+r"(x));
#endif
    return x;
}
__device__ __forceinline__ GearConsts gear_consts() {
    return GearConsts{gear_hide(1u << 8), gear_hide(1u << 16), gear_hide(1u << 24), gear_hide(128u),
                      gear_hide(0u - 32768u)};
}
#ifdef __CUDA_ARCH__
typedef unsigned int GearAt;   // shared-window address of one entry
__device__ __forceinline__ void gear_addrs(unsigned int w, GearTab tab, const GearConsts& c, GearAt (&at)[4]) {
    const unsigned int t8 = __umulhi(w, c.s24), t16 = __umulhi(w, c.s16), t24 = __umulhi(w, c.s8);
    at[0] = t8 * c.mneg + (w * c.m128 + tab);
    at[1] = t16 * c.mneg + (t8 * c.m128 + tab);
    at[2] = t24 * c.mneg + (t16 * c.m128 + tab);
    at[3] = t24 * c.m128 + tab;
}
__device__ __forceinline__ unsigned long long gear_lookup_at(unsigned int at) {
    unsigned long long v;
    asm volatile("ld.shared.u64 %0, [%1];" : "=l"(v) : "r"(at));
    return v;
}
#else   // host emulation: byte offsets from the pointer
typedef const unsigned char* GearAt;
inline void gear_addrs(unsigned int w, GearTab tab, const GearConsts& c, GearAt (&at)[4]) {
    const unsigned int t8 = __umulhi(w, c.s24), t16 = __umulhi(w, c.s16), t24 = __umulhi(w, c.s8);
    at[0] = tab + (t8 * c.mneg + w * c.m128);
    at[1] = tab + (t16 * c.mneg + t8 * c.m128);
    at[2] = tab + (t24 * c.mneg + t16 * c.m128);
    at[3] = tab + t24 * c.m128;
}
inline unsigned long long gear_lookup_at(GearAt at) { return *(const unsigned long long*)at; }
#endif

// The 32 positions of one block: the hash and both hit words, exactly.
// Returns (hit_s, hit_l, h lo, h hi).
__device__ __noinline__ uint4 gear_exact32(uint4 a, uint4 b, unsigned long long h, GearTab tab,
                                           unsigned long long mask_s, unsigned long long mask_l) {
    const unsigned int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    unsigned int s = 0, l = 0;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        h = (h << 1) + gear_lookup(tab, gear_byte(w, k));
        s |= (unsigned int)((h & mask_s) == 0ull) << k;
        l |= (unsigned int)((h & mask_l) == 0ull) << k;
    }
    return make_uint4(s, l, (unsigned int)h, (unsigned int)(h >> 32));
}

struct GearMasks {
    unsigned long long s, l;
    unsigned int flo, fhi;   // the filter mask_s & mask_l, in halves
    bool filtered;           // false: no useful filter, every block exact
    GearConsts k;
};

// One block of 32 positions: advances h, returns its hit words (x: small, y: large).
__device__ __forceinline__ uint2 gear_block(uint4 a, uint4 b, unsigned long long& h, GearTab tab,
                                            const GearMasks& m) {
    if (!m.filtered) {
        const uint4 e = gear_exact32(a, b, h, tab, m.s, m.l);
        h = ((unsigned long long)e.w << 32) | e.z;
        return make_uint2(e.x, e.y);
    }
    const unsigned int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    const unsigned long long h0 = h;
    unsigned int least = 0xFFFFFFFFu;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        GearAt at[4];
        gear_addrs(w[i], tab, m.k, at);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            h = (h << 1) + gear_lookup_at(at[k]);
            least = min(least, ((unsigned int)h & m.flo) | ((unsigned int)(h >> 32) & m.fhi));
        }
    }
    if (least != 0u) return make_uint2(0u, 0u);
    const uint4 e = gear_exact32(a, b, h0, tab, m.s, m.l);
    return make_uint2(e.x, e.y);
}

__device__ __forceinline__ void gear_prefetch(const uint4* p) {
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// Hash-only warm-up over 64 bytes (4 loads): h then covers the 63 bytes
// before the next position (the oldest byte drops out at the next step).
__device__ __forceinline__ unsigned long long gear_warm(const uint4* q, GearTab tab) {
    unsigned long long h = 0;
#pragma unroll
    for (int i = 0; i < 4; i += 2) {
        const uint4 a = q[i], b = q[i + 1];
        const unsigned int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int k = 0; k < 32; ++k) h = (h << 1) + gear_lookup(tab, gear_byte(w, k));
    }
    return h;
}

// Words [w0, w1) of a span near a segment end, or of a segment shorter than a
// span: byte loads from the segment only.
__device__ void gear_edge(const unsigned char* __restrict__ data, unsigned long long len, unsigned long long w0,
                          unsigned long long w1, GearTab tab, const GearMasks& m,
                          unsigned int* __restrict__ hits_s, unsigned int* __restrict__ hits_l) {
    const unsigned long long start = w0 << 5;
    unsigned long long h = 0;
    for (unsigned long long q = start >= 63ull ? start - 63ull : 0ull; q < start; ++q)
        h = (h << 1) + gear_lookup(tab, data[q]);
    for (unsigned long long w = w0; w < w1; ++w) {
        const unsigned long long p0 = w << 5;
        unsigned int s = 0, l = 0;
        for (unsigned int k = 0; k < 32u && p0 + k < len; ++k) {
            h = (h << 1) + gear_lookup(tab, data[p0 + k]);
            s |= (unsigned int)((h & m.s) == 0ull) << k;
            l |= (unsigned int)((h & m.l) == 0ull) << k;
        }
        hits_s[w] = s;
        hits_l[w] = l;
    }
}

// Words 4 g .. 4 g + 3 of a span out, 16 bytes a bitmap when both are aligned.
__device__ __forceinline__ void gear_store4(unsigned int* __restrict__ hits_s, unsigned int* __restrict__ hits_l,
                                            unsigned long long w, bool wide, const unsigned int (&os)[4],
                                            const unsigned int (&ol)[4]) {
    if (wide) {
        *(uint4*)(hits_s + w) = make_uint4(os[0], os[1], os[2], os[3]);
        *(uint4*)(hits_l + w) = make_uint4(ol[0], ol[1], ol[2], ol[3]);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            hits_s[w + i] = os[i];
            hits_l[w + i] = ol[i];
        }
    }
}

// Span t read straight from global memory, one thread (the path of warps
// without staging space, and of the first and last warp of a segment).
__device__ void gear_span_direct(const unsigned char* __restrict__ data, unsigned long long len, unsigned long long t,
                                 GearTab tab, const GearMasks& m, unsigned int* __restrict__ hits_s,
                                 unsigned int* __restrict__ hits_l, bool wide) {
    const unsigned long long start = t * GEAR_SPAN, w0 = t * GEAR_BLOCKS, words = (len + 31ull) >> 5;
    const unsigned int r = (unsigned int)((unsigned long long)data & 31ull);
    // Interior: the warm-up (64 bytes before block 0 of the aligned stream,
    // which starts r bytes before `start`) and block 16 (for the last
    // word's funnel shift) lie inside the segment.
    if (t == 0 || start + GEAR_SPAN + 32ull - r > len) {
        const unsigned long long w1 = w0 + GEAR_BLOCKS < words ? w0 + GEAR_BLOCKS : words;
        gear_edge(data, len, w0, w1, tab, m, hits_s, hits_l);
        return;
    }
    const uint4* q = (const uint4*)(data - r) + 2ull * (w0 - 2ull);   // block -2 of the span
    unsigned long long h = gear_warm(q, tab);
    q += 4;
    uint2 prev = gear_block(q[0], q[1], h, tab, m);
#pragma unroll 1
    for (int g = 0; g < GEAR_BLOCKS / 4; ++g) {
        // Each block's loads wait for their data: bring the next group's
        // 128 bytes into L2 a whole group ahead.
        if (g + 1 < GEAR_BLOCKS / 4) {
            gear_prefetch(q + 8 * (g + 1) + 2);
            gear_prefetch(q + 8 * (g + 1) + 8);
        }
        unsigned int os[4], ol[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            // Word 4 g + i takes bits r.. of block 4 g + i, then bits
            // ..r of block 4 g + i + 1 (not needed for the last when r = 0).
            const int j = 4 * g + i + 1;
            uint2 cur = make_uint2(0u, 0u);
            if (j < GEAR_BLOCKS || r != 0u) cur = gear_block(q[2 * j], q[2 * j + 1], h, tab, m);
            os[i] = __funnelshift_r(prev.x, cur.x, r);
            ol[i] = __funnelshift_r(prev.y, cur.y, r);
            prev = cur;
        }
        gear_store4(hits_s, hits_l, w0 + 4ull * (unsigned long long)g, wide, os, ol);
    }
}

// ---- Staging through shared memory (gear_candidates' default launch) ----
//
// Why: with a span a thread, lanes are 512 bytes apart, so one warp-wide
// 16-byte load touches 32 lines (32 L1TEX wavefronts for 512 bytes, ~2 a
// warp-position on top of the table's 2) and each block's loads were used
// at once: the direct pass waits on L1/L2 every 32 positions (H100: 1.60 ms
// per GiB, issue 25% busy, 70% of stalls on L1TEX).
// How: a warp's 32 spans go through a per-warp ring in shared memory, one
// 2-block tile (64 bytes a lane) at a time, with cp.async (LDGSTS, sm_80+):
// tile k + 1 is in flight while tile k is hashed. Lane i copies granule
// i / 8 of rows i % 8 + 8 m (m = 0..3): each instruction reads 8 whole
// 64-byte pieces (16 full sectors, 8-12 lines) and writes them without bank
// conflicts: rows are 144 = 9 x 16 bytes apart, so granule q of row L sits
// in bank quad (L + q) % 8, and the 8 lanes of an LDS.128/LDGSTS phase
// (one granule of 8 consecutive rows) hit 8 different quads. A lane reads
// its own row (LDS.128, the 8 lanes of a phase: 8 rows at one granule).
// Ring: 2 tiles = blocks b at slot (b + 2) % 4; a span is 10 tiles
// (blocks -2..-1 = warm-up, 0..1, ..., 14..15, then block 16 alone, since
// block 17 may lie past the segment). Before a tile's slot is refilled the
// warp passes __syncwarp after its last reader; before a tile is read every
// lane waits for its own copies (cp.async.wait_group 0) and the warp syncs.
// Cost (per GiB, H100 132 SMs at ~1.75 GHz): L1TEX/shared wavefronts per
// warp-position ~2.25 (table, warm-up included) + 0.25-0.4 (fill: 4-6 a
// 512-byte instruction) + 0.25 (row reads) + 0.25 (bitmap stores, 16
// lines an instruction) = ~3.0 -> 1.07e9 / 32 * 3 / (132 * 1.75e9) = 0.43
// ms, the tightest bound now (ALU 0.36, issue 0.30; HBM 1.13 GiB read =
// 0.36 ms; the direct loads cost ~2 wavefronts a warp-position alone). Latency: a tile is ~530 warp-instructions; with 6
// warps a scheduler it lasts ~3200 cycles (~1.8 us) against ~0.6-1 us of
// loaded HBM latency, so the copies should land before they are needed.
// Expect ~0.5-0.65 ms per GiB. Shared: 32 KiB table (static) + 8 x 4.5 KiB
// (dynamic) = 68 KiB a 256-thread block: 3 blocks (24 warps) an SM, which
// also needs <= 80 registers (__launch_bounds__(256, 3)).
// GEAR_ROW (144 bytes a lane: 2 tiles of 64 + 16 of bank skew) and
// GEAR_STAGE_WARP (32 rows: the dynamic shared memory a warp) come from
// abi.cuh: the host sizes the launch by them.
static_assert(GEAR_ROW == 2u * 64u + 16u && GEAR_STAGE_WARP == 32u * GEAR_ROW, "the staging ring's layout");
#define GEAR_TILES 10                       // tiles a span

extern __shared__ __align__(16) unsigned char gv_smem[];

// Dynamic shared memory of this launch: the staged path needs
// GEAR_STAGE_WARP a warp; a launch with less runs the direct path.
__device__ __forceinline__ unsigned int gear_dynamic_smem() {
#ifdef __CUDA_ARCH__
    unsigned int n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
#else
    return emu_dynamic_smem;   // host emulation: set by the launcher
#endif
}

// 16 bytes global -> shared, asynchronous from sm_80 (L2 only: .cg).
__device__ __forceinline__ void gear_copy16(unsigned char* dst, const unsigned char* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned int)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    *(uint4*)dst = *(const uint4*)src;
#else
    emu_cp_async16(dst, src);
#endif
}

__device__ __forceinline__ void gear_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#elif !defined(__CUDA_ARCH__)
    emu_cp_async_commit();
#endif
}

// Waits until at most N of this thread's committed copy groups are pending.
template <int N>
__device__ __forceinline__ void gear_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif !defined(__CUDA_ARCH__)
    emu_cp_async_wait(N);
#endif
}

// Starts tile k of the warp's spans (see above). src: this lane's source
// for tile 0, m = 0; dst likewise in the ring. Every lane commits a group.
__device__ __forceinline__ void gear_stage(const unsigned char* src, unsigned char* dst, int k, unsigned int lane) {
    if (k < GEAR_TILES - 1 || lane < 16u) {   // the last tile: granules 0-1 (block 16)
#pragma unroll
        for (unsigned int m = 0; m < 4u; ++m)
            gear_copy16(dst + 64u * (unsigned int)(k & 1) + m * 8u * GEAR_ROW,
                        src + 64ull * (unsigned long long)k + m * 8ull * GEAR_SPAN);
    }
    gear_copy_commit();
}

// The warp's 32 interior spans t0 .. t0 + 31 (lane = t - t0). All 32 lanes
// must call it together.
__device__ void gear_warp_staged(const unsigned char* __restrict__ data, unsigned long long t0, unsigned int lane,
                                 unsigned char* stage, GearTab tab, const GearMasks& m,
                                 unsigned int* __restrict__ hits_s, unsigned int* __restrict__ hits_l, bool wide) {
    const unsigned int r = (unsigned int)((unsigned long long)data & 31ull);
    // Tile 0 of row L starts at block -2 of span t0 + L in the aligned stream.
    const unsigned char* src =
        data - r + (t0 + (lane & 7u)) * GEAR_SPAN - 64ull + 16ull * (unsigned long long)(lane >> 3);
    unsigned char* dst = stage + GEAR_ROW * (lane & 7u) + 16u * (lane >> 3);
    const uint4* row = (const uint4*)(stage + GEAR_ROW * lane);
    const unsigned long long w0 = (t0 + lane) * GEAR_BLOCKS;

    __syncwarp();   // the previous spans' reads of both slots are done
    gear_stage(src, dst, 0, lane);
    gear_stage(src, dst, 1, lane);
    gear_copy_wait<1>();
    __syncwarp();
    unsigned long long h = gear_warm(row, tab);   // blocks -2, -1: slots 0, 1
    gear_copy_wait<0>();
    __syncwarp();   // tile 1 in; slot 0 (tile 0) read by every lane
    gear_stage(src, dst, 2, lane);
    uint2 prev = gear_block(row[4], row[5], h, tab, m);   // block 0: slot 2
#pragma unroll 1
    for (int g = 0; g < GEAR_BLOCKS / 4; ++g) {
        unsigned int os[4], ol[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int j = 4 * g + i + 1, slot = (i + 3) & 3;   // (j + 2) % 4
            if (i == 1 || i == 3) {
                // Block j opens tile j / 2 + 1: wait for it, then refill the
                // slot that every lane has just finished (tile j / 2).
                gear_copy_wait<0>();
                __syncwarp();
                if (j / 2 + 2 < GEAR_TILES) gear_stage(src, dst, j / 2 + 2, lane);
            }
            uint2 cur = make_uint2(0u, 0u);
            if (j < GEAR_BLOCKS || r != 0u) cur = gear_block(row[2 * slot], row[2 * slot + 1], h, tab, m);
            os[i] = __funnelshift_r(prev.x, cur.x, r);
            ol[i] = __funnelshift_r(prev.y, cur.y, r);
            prev = cur;
        }
        gear_store4(hits_s, hits_l, w0 + 4ull * (unsigned long long)g, wide, os, ol);
    }
}

extern "C" __global__ void __launch_bounds__(256, 3)
gear_candidates(const unsigned char* __restrict__ data, unsigned long long len, unsigned long long mask_s,
                unsigned long long mask_l, unsigned int* __restrict__ hits_s, unsigned int* __restrict__ hits_l) {
    __shared__ unsigned long long gear16[256u * GEAR_COPIES];
    for (unsigned int i = threadIdx.x; i < 256u * GEAR_COPIES; i += blockDim.x) gear16[i] = CDC_GEAR[i / GEAR_COPIES];
    __syncthreads();
    const GearTab tab = gear_tab(gear16);
    const unsigned long long filt = mask_s & mask_l;
    const GearMasks m{mask_s, mask_l, (unsigned int)filt, (unsigned int)(filt >> 32), __popcll(filt) >= 11,
                      gear_consts()};
    const unsigned long long spans = (len + GEAR_SPAN - 1ull) / GEAR_SPAN;
    const unsigned int r = (unsigned int)((unsigned long long)data & 31ull);
    const bool wide = (((unsigned long long)hits_s | (unsigned long long)hits_l) & 15ull) == 0ull;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    // Warp-uniform: a whole warp with its staging space in this launch.
    const bool staged = (warp + 1u) * 32u <= blockDim.x && (warp + 1u) * GEAR_STAGE_WARP <= gear_dynamic_smem();
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (!staged) {
        for (; t < spans; t += stride) gear_span_direct(data, len, t, tab, m, hits_s, hits_l, wide);
        return;
    }
    unsigned char* stage = gv_smem + warp * GEAR_STAGE_WARP;
    // The warp's spans are t0 .. t0 + 31 (t0 = t - lane, warp-uniform).
    for (; t - lane < spans; t += stride) {
        const unsigned long long t0 = t - lane;
        // Every lane interior (see gear_span_direct), the last one included.
        if (t0 != 0ull && (t0 + 31ull) * GEAR_SPAN + GEAR_SPAN + 32ull - r <= len)
            gear_warp_staged(data, t0, lane, stage, tab, m, hits_s, hits_l, wide);
        else if (t < spans)
            gear_span_direct(data, len, t, tab, m, hits_s, hits_l, wide);
    }
}

// ---- Boundary resolution ------------------------------------------------

#define CDC_NONE 0xFFFFFFFFFFFFFFFFull
// From abi.cuh: CDC_FAIL (a section whose junction failed), CDC_LEVELS (of
// the find-next index), CDC_TAIL (steps a junction walk may take into the
// next section before it fails).

// gpu/abi.rs CdcJob, CdcSeg and CdcSec (the layouts are checked below).
struct CdcJob {
    unsigned long long min, avg, max;    // ChunkParams sizes
    unsigned long long mask_s, mask_l;   // cdc_resolve::masks
    unsigned long long section;          // S >= max, bytes per section
    const unsigned int* lv_s[CDC_LEVELS];   // level 0: job-wide bitmap of mask_s hits
    const unsigned int* lv_l[CDC_LEVELS];
    unsigned int cap;                    // list entries per section: ceil(S / (min & ~1)) + 2 + CDC_TAIL
    unsigned int pad;
};
GV_CHECK_LAYOUT(CdcJob);

struct CdcSeg {
    const unsigned char* data;           // device address of the segment's bytes
    unsigned long long len;
    unsigned long long bit0;             // job-wide bitmap position of byte 0 (32 x first word)
    unsigned long long first_section;    // job-wide index of its first section
};
GV_CHECK_LAYOUT(CdcSeg);

struct CdcSec {
    unsigned int n;   // entries of the section walk (the last is >= the section end)
    unsigned int v;   // first valid entry (CDC_FAIL: junction into it failed)
    unsigned int e;   // entry where the next section takes over (or the segment end)
    unsigned int pad;
};
GV_CHECK_LAYOUT(CdcSec);

__device__ __forceinline__ unsigned int cdc_ctz(unsigned int x) { return (unsigned int)__ffs((int)x) - 1u; }

// First set bit in [from, to) of a 4-level bitmap (bit w of level k + 1
// marks a nonzero word w of level k), or CDC_NONE. Climbs while the word
// holding `from` is empty, scans at most (to - from) / 2^20 + 2 top words,
// then descends: about 8 dependent reads for any range.
__device__ unsigned long long cdc_first(const unsigned int* const* lv, unsigned long long from,
                                        unsigned long long to) {
    if (from >= to) return CDC_NONE;
    unsigned long long f = from, t = to, hit = CDC_NONE;
    int k = 0;
    for (;;) {
        const unsigned long long w = f >> 5;
        const unsigned int bits = lv[k][w] & (0xFFFFFFFFu << (unsigned int)(f & 31ull));
        if (bits) { hit = (w << 5) + cdc_ctz(bits); break; }
        const unsigned long long tw = (t + 31ull) >> 5;   // words of level k that hold bits below t
        if (k == CDC_LEVELS - 1) {
            for (unsigned long long x = w + 1; x < tw; ++x) {
                const unsigned int b = lv[k][x];
                if (b) { hit = (x << 5) + cdc_ctz(b); break; }
            }
            if (hit == CDC_NONE) return CDC_NONE;
            break;
        }
        f = w + 1; t = tw; ++k;
        if (f >= t) return CDC_NONE;
    }
    while (k > 0) { --k; hit = (hit << 5) + cdc_ctz(lv[k][hit]); }
    return hit < to ? hit : CDC_NONE;
}

// Length of the chunk that starts at c of a segment: fastcdc::v2020::cut_gear.
__device__ unsigned long long cdc_chunk_len(const CdcJob* __restrict__ j, const unsigned long long* gear,
                                            const CdcSeg& sg, unsigned long long c) {
    const unsigned long long rem = sg.len - c;
    if (rem <= j->min) return rem;
    unsigned long long center = j->avg, r = rem;
    if (rem > j->max) r = j->max; else if (rem < center) center = rem;
    const unsigned long long hs = j->min & ~1ull, end = r & ~1ull;
    unsigned long long ce = center & ~1ull;
    if (ce < hs) ce = hs;
    if (hs >= end) return r;
    // The crate's hash restarts at hs: recompute its first 63 positions from
    // the bytes. Aligned 8-byte loads, all issued before the hash uses them
    // (a word that holds a segment byte lies inside the allocation).
    const unsigned long long direct = hs + 63ull < end ? hs + 63ull : end;
    const unsigned long long a0 = (unsigned long long)(sg.data + c + hs);
    const unsigned long long* wp = (const unsigned long long*)(a0 & ~7ull);
    const unsigned long long last = (unsigned long long)(sg.data + c + direct - 1ull);
    const unsigned int skip = (unsigned int)(a0 & 7ull);
    unsigned long long wd[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) wd[i] = (unsigned long long)(wp + i) <= last ? wp[i] : 0ull;
    unsigned long long h = 0;
    const unsigned long long ms = j->mask_s, ml = j->mask_l;
    for (unsigned long long a = hs; a < direct; ++a) {
        const unsigned int b = (unsigned int)(a - hs) + skip;
        h = (h << 1) + gear[(wd[b >> 3] >> (8u * (b & 7u))) & 0xFFull];
        if ((h & (a < ce ? ms : ml)) == 0ull) return a;
    }
    const unsigned long long base = sg.bit0 + c;
    if (direct < ce) {
        const unsigned long long p = cdc_first(j->lv_s, base + direct, base + ce);
        if (p != CDC_NONE) return p - base;
    }
    const unsigned long long p = cdc_first(j->lv_l, base + (direct > ce ? direct : ce), base + end);
    return p != CDC_NONE ? p - base : r;
}

__device__ __forceinline__ unsigned long long cdc_sections(const CdcJob* j, unsigned long long len) {
    return (len + j->section - 1ull) / j->section;
}

// The segment holding job-wide section k: the last with first_section <= k.
__device__ __forceinline__ unsigned int cdc_seg_of(const CdcSeg* segs, unsigned int nsegs, unsigned long long k) {
    unsigned int lo = 0, hi = nsegs;
    while (hi - lo > 1u) {
        const unsigned int mid = (lo + hi) >> 1;
        if (segs[mid].first_section <= k) lo = mid; else hi = mid;
    }
    return lo;
}

// Walks from x (a chunk start >= s) through the section [s, s + S): writes
// every start and the first position past the section (or the segment end)
// as offsets from s; returns the entry count. Sets flags[nsegs] on overflow
// (not reachable with the documented cap).
__device__ unsigned int cdc_walk_from(const CdcJob* j, const unsigned long long* gear, const CdcSeg& sg,
                                      unsigned long long s, unsigned long long x, unsigned int* list,
                                      unsigned int* overflow) {
    const unsigned long long stop = s + j->section;
    const unsigned int room = j->cap - CDC_TAIL;
    unsigned int n = 0;
    list[n++] = (unsigned int)(x - s);
    while (x < stop && x < sg.len) {
        x += cdc_chunk_len(j, gear, sg, x);
        if (n == room) { *overflow = 1u; return n; }
        list[n++] = (unsigned int)(x - s);
    }
    return n;
}

// Junction of section k (list lk, sec sk) into section k + 1 (list lk1 of
// n1 walk entries): continues k's walk until it meets lk1. Writes sk->e and
// the index into lk1 (or CDC_FAIL) to *v1; returns whether they met.
__device__ bool cdc_join(const CdcJob* j, const unsigned long long* gear, const CdcSeg& sg, unsigned long long s,
                         unsigned int* lk, CdcSec* sk, const unsigned int* lk1, unsigned int n1, unsigned int* v1) {
    const unsigned long long s1 = s + j->section, s2 = s1 + j->section;
    unsigned int idx = sk->n - 1u;
    unsigned long long x = s + lk[idx];
    for (unsigned int t = 0;; ++t) {
        if (x >= s1) {
            const unsigned long long want = x - s1;
            unsigned int lo = 0, hi = n1;   // first entry >= want
            while (lo < hi) {
                const unsigned int mid = (lo + hi) >> 1;
                if (lk1[mid] < want) lo = mid + 1u; else hi = mid;
            }
            if (lo < n1 && lk1[lo] == want) { sk->e = idx; *v1 = lo; return true; }
        }
        if (x >= s2 || x >= sg.len || t == CDC_TAIL) { sk->e = sk->n - 1u; *v1 = CDC_FAIL; return false; }
        x += cdc_chunk_len(j, gear, sg, x);
        lk[++idx] = (unsigned int)(x - s);
    }
}

#define CDC_LOAD_GEAR()                                                                  \
    __shared__ unsigned long long gear[256];                                             \
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) gear[i] = CDC_GEAR[i]; \
    __syncthreads();

// One warp per upper word: lane b loads lower word 32u + b (coalesced) and
// a ballot gathers the 32 "nonzero" bits. (A thread per upper word reading
// its 32 lower words in turn fetched a 32-byte sector per 4-byte load once
// L1 overflowed: 1.45 ms per GiB of data on an H100.) blockDim must be a
// multiple of 32; any grid is correct.
extern "C" __global__ void __launch_bounds__(256)
cdc_summarize(const unsigned int* __restrict__ lo_s, const unsigned int* __restrict__ lo_l, unsigned long long n_lo,
              unsigned int* __restrict__ up_s, unsigned int* __restrict__ up_l) {
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned long long warps = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    const unsigned long long n_up = (n_lo + 31ull) >> 5;
    for (unsigned long long u = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < n_up;
         u += warps) {
        const unsigned long long i = (u << 5) + lane;
        const bool hs = i < n_lo && lo_s[i] != 0u, hl = i < n_lo && lo_l[i] != 0u;
        const unsigned int s = __ballot_sync(0xffffffffu, hs), l = __ballot_sync(0xffffffffu, hl);
        if (lane == 0) {
            up_s[u] = s;
            up_l[u] = l;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
cdc_walk(const CdcJob* __restrict__ job, const CdcSeg* __restrict__ segs, unsigned int nsegs,
         unsigned long long nsections, unsigned int* __restrict__ lists, CdcSec* __restrict__ secs,
         unsigned int* __restrict__ fails, unsigned int* __restrict__ flags) {
    CDC_LOAD_GEAR();
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < nsections; k += stride) {
        if (k == 0) flags[nsegs] = 0u;
        if ((k & 31ull) == 0) fails[k >> 5] = 0u;
        const unsigned int si = cdc_seg_of(segs, nsegs, k);
        const CdcSeg sg = segs[si];
        const unsigned long long i = k - sg.first_section;
        if (i >= cdc_sections(job, sg.len)) continue;   // inconsistent descriptors
        if (i == 0) flags[si] = 0u;
        const unsigned long long s = i * job->section;
        const unsigned int n = cdc_walk_from(job, gear, sg, s, s, lists + k * job->cap, flags + nsegs);
        secs[k] = CdcSec{n, i == 0 ? 0u : CDC_FAIL, n - 1u, 0u};
    }
}

extern "C" __global__ void __launch_bounds__(256)
cdc_sync(const CdcJob* __restrict__ job, const CdcSeg* __restrict__ segs, unsigned int nsegs,
         unsigned long long nsections, unsigned int* __restrict__ lists, CdcSec* __restrict__ secs,
         unsigned int* __restrict__ fails, unsigned int* __restrict__ flags) {
    CDC_LOAD_GEAR();
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < nsections; k += stride) {
        const unsigned int si = cdc_seg_of(segs, nsegs, k);
        const CdcSeg sg = segs[si];
        const unsigned long long i = k - sg.first_section;
        if (i + 1ull >= cdc_sections(job, sg.len)) continue;   // last section: no junction
        // Thread k writes lists[k][n_k..], secs[k].e and secs[k + 1].v; it
        // reads lists[k + 1][0..n_{k+1}), which thread k + 1 does not write.
        if (!cdc_join(job, gear, sg, i * job->section, lists + k * job->cap, secs + k, lists + (k + 1ull) * job->cap,
                      secs[k + 1ull].n, &secs[k + 1ull].v)) {
            atomicOr(fails + ((k + 1ull) >> 5), 1u << ((k + 1ull) & 31ull));
            flags[si] = 1u;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
cdc_fixup(const CdcJob* __restrict__ job, const CdcSeg* __restrict__ segs, unsigned int nsegs,
          unsigned long long nsections, unsigned int* __restrict__ lists, CdcSec* __restrict__ secs,
          unsigned int* __restrict__ fails, unsigned int* __restrict__ flags) {
    CDC_LOAD_GEAR();
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long si = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; si < nsegs; si += stride) {
        const CdcSeg sg = segs[si];
        const unsigned long long first = sg.first_section, end = first + cdc_sections(job, sg.len);
        if (end - first < 2ull || flags[si] == 0u) continue;
        // Failed junctions in order; fixing one may fail the next (its bit
        // is then set here). Words at segment edges are shared: atomics.
        unsigned long long k = first + 1ull;
        while (k < end) {
            const unsigned int bits = fails[k >> 5] & (0xFFFFFFFFu << (unsigned int)(k & 31ull));
            if (bits == 0u) { k = ((k >> 5) + 1ull) << 5; continue; }
            k = ((k >> 5) << 5) + cdc_ctz(bits);
            if (k >= end) break;
            if (secs[k].v == CDC_FAIL) {
                // The true entry of section k: the first position of list
                // k - 1 (valid by induction) past its section.
                CdcSec* prev = secs + (k - 1ull);
                const unsigned long long s = (k - first) * job->section;
                const unsigned long long entry = s - job->section + lists[(k - 1ull) * job->cap + prev->n - 1u];
                prev->e = prev->n - 1u;
                unsigned int* lk = lists + k * job->cap;
                const unsigned int n = cdc_walk_from(job, gear, sg, s, entry, lk, flags + nsegs);
                secs[k] = CdcSec{n, 0u, n - 1u, 0u};
                if (k + 1ull < end &&
                    !cdc_join(job, gear, sg, s, lk, secs + k, lists + (k + 1ull) * job->cap, secs[k + 1ull].n,
                              &secs[k + 1ull].v))
                    atomicOr(fails + ((k + 1ull) >> 5), 1u << ((k + 1ull) & 31ull));
            }
            ++k;
        }
    }
}
