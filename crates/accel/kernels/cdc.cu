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
// GEAR is fastcdc::v2020's table (seed 0). See README.md.
//
// gpu/launch.rs declares the same parameter lists (a test compares them).
//
// Constant time: not applicable (public data).

#include "abi.cuh"

__constant__ unsigned long long CDC_GEAR[256] = {
    0x3b5d3c7d207e37dcull, 0x784d68ba91123086ull, 0xcd52880f882e7298ull, 0xeacf8e4e19fdcca7ull,
    0xc31f385dfbd1632bull, 0x1d5f27001e25abe6ull, 0x83130bde3c9ad991ull, 0xc4b225676e9b7649ull,
    0xaa329b29e08eb499ull, 0xb67fcbd21e577d58ull, 0x0027baaada2acf6bull, 0xe3ef2d5ac73c2226ull,
    0x0890f24d6ed312b7ull, 0xa809e036851d7c7eull, 0xf0a6fe5e0013d81bull, 0x1d026304452cec14ull,
    0x03864632648e248full, 0xcdaacf3dcd92b9b4ull, 0xf5e012e63c187856ull, 0x8862f9d3821c00b6ull,
    0xa82f7338750f6f8aull, 0x1e583dc6c1cb0b6full, 0x7a3145b69743a7f1ull, 0xabb20fee404807ebull,
    0xb14b3cfe07b83a5dull, 0xb9dc27898adb9a0full, 0x3703f5e91baa62beull, 0xcf0bb866815f7d98ull,
    0x3d9867c41ea9dcd3ull, 0x1be1fa65442bf22cull, 0x14300da4c55631d9ull, 0xe698e9cbc6545c99ull,
    0x4763107ec64e92a5ull, 0xc65821fc65696a24ull, 0x76196c064822f0b7ull, 0x485be841f3525e01ull,
    0xf652bc9c85974ff5ull, 0xcad8352face9e3e9ull, 0x2a6ed1dceb35e98eull, 0xc6f483badc11680full,
    0x3cfd8c17e9cf12f1ull, 0x89b83c5e2ea56471ull, 0xae665cfd24e392a9ull, 0xec33c4e504cb8915ull,
    0x3fb9b15fc9fe7451ull, 0xd7fd1fd1945f2195ull, 0x31ade0853443efd8ull, 0x255efc9863e1e2d2ull,
    0x10eab6008d5642cfull, 0x46f04863257ac804ull, 0xa52dc42a789a27d3ull, 0xdaaadf9ce77af565ull,
    0x6b479cd53d87febbull, 0x6309e2d3f93db72full, 0xc5738ffbaa1ff9d6ull, 0x6bd57f3f25af7968ull,
    0x67605486d90d0a4aull, 0xe14d0b9663bfbdaeull, 0xb7bbd8d816eb0414ull, 0xdef8a4f16b35a116ull,
    0xe7932d85aaaffed6ull, 0x08161cbae90cfd48ull, 0x855507beb294f08bull, 0x91234ea6ffd399b2ull,
    0xad70cf4b2435f302ull, 0xd289a97565bc2d27ull, 0x8e558437ffca99deull, 0x96d2704b7115c040ull,
    0x0889bbcdfc660e41ull, 0x5e0d4e67dc92128dull, 0x72a9f8917063ed97ull, 0x438b69d409e016e3ull,
    0xdf4fed8a5d8a4397ull, 0x00f41dcf41d403f7ull, 0x4814eb038e52603full, 0x9dafbacc58e2d651ull,
    0xfe2f458e4be170afull, 0x4457ec414df6a940ull, 0x06e62f1451123314ull, 0xbd1014d173ba92ccull,
    0xdef318e25ed57760ull, 0x9fea0de9dfca8525ull, 0x459de1e76c20624bull, 0xaeec189617e2d666ull,
    0x126a2c06ab5a83cbull, 0xb1321532360f6132ull, 0x65421503dbb40123ull, 0x2d67c287ea089ab3ull,
    0x6c93bff5a56bd6b6ull, 0x4ffb2036cab6d98dull, 0xce7b785b1be7ad4full, 0xedb42ef6189fd163ull,
    0xdc905288703988f6ull, 0x365f9c1d2c691884ull, 0xc640583680d99bfeull, 0x3cd4624c07593ec6ull,
    0x7f1ea8d85d7c5805ull, 0x014842d480b57149ull, 0x0b649bcb5a828688ull, 0xbcd5708ed79b18f0ull,
    0xe987c862fbd2f2f0ull, 0x982731671f0cd82cull, 0xbaf13e8b16d8c063ull, 0x8ea3109cbd951bbaull,
    0xd141045bfb385cadull, 0x2acbc1a0af1f7d30ull, 0xe6444d89df03bfdfull, 0xa18cc771b8188ff9ull,
    0x9834429db01c39bbull, 0x214add07fe086a1full, 0x8f07c19b1f6b3ff9ull, 0x56a297b1bf4ffe55ull,
    0x94d558e493c54fc7ull, 0x40bfc24c764552cbull, 0x931a706f8a8520cbull, 0x32229d322935bd52ull,
    0x2560d0f5dc4fefafull, 0x9dbcc48355969bb6ull, 0x0fd81c3985c0b56aull, 0xe03817e1560f2bdaull,
    0xc1bb4f81d892b2d5ull, 0xb0c4864f4e28d2d7ull, 0x3ecc49f9d9d6c263ull, 0x51307e99b52ba65eull,
    0x8af2b688da84a752ull, 0xf5d72523b91b20b6ull, 0x6d95ff1ff4634806ull, 0x562f21555458339aull,
    0xc0ce47f889336346ull, 0x487823e5089b40d8ull, 0xe4727c7ebc6d9592ull, 0x5a8f7277e94970baull,
    0xfca2f406b1c8bb50ull, 0x5b1f8a95f1791070ull, 0xd304af9fc9028605ull, 0x5440ab7fc930e748ull,
    0x312d25fbca2ab5a1ull, 0x10f4a4b234a4d575ull, 0x90301d55047e7473ull, 0x3b6372886c61591eull,
    0x293402b77c444e06ull, 0x451f34a4d3e97dd7ull, 0x3158d814d81bc57bull, 0x034942425b9bda69ull,
    0xe2032ff9e532d9bbull, 0x62ae066b8b2179e5ull, 0x9545e10c2f8d71d8ull, 0x7ff7483eb2d23fc0ull,
    0x00945fcebdc98d86ull, 0x8764bbbe99b26ca2ull, 0x1b1ec62284c0bfc3ull, 0x58e0fcc4f0aa362bull,
    0x5f4abefa878d458dull, 0xfd74ac2f9607c519ull, 0xa4e3fb37df8cbfa9ull, 0xbf697e43cac574e5ull,
    0x86f14a3f68f4cd53ull, 0x24a23d076f1ce522ull, 0xe725cd8048868cc8ull, 0xbf3c729eb2464362ull,
    0xd8f6cd57b3cc1ed8ull, 0x6329e52425541577ull, 0x62aa688ad5ae1ac0ull, 0x0a242566269bf845ull,
    0x168b1a4753aca74bull, 0xf789afefff2e7e3cull, 0x6c3362093b6fccdbull, 0x4ce8f50bd28c09b2ull,
    0x006a2db95ae8aa93ull, 0x975b0d623c3d1a8cull, 0x18605d3935338c5bull, 0x5bb6f6136cad3c71ull,
    0x0f53a20701f8d8a6ull, 0xab8c5ad2e7e93c67ull, 0x40b5ac5127acaa29ull, 0x8c7bf63c2075895full,
    0x78bd9f7e014a805cull, 0xb2c9e9f4f9c8c032ull, 0xefd6049827eb91f3ull, 0x2be459f482c16fbdull,
    0xd92ce0c5745aaa8cull, 0x0aaa8fb298d965b9ull, 0x2b37f92c6c803b15ull, 0x8c54a5e94e0f0e78ull,
    0x95f9b6e90c0a3032ull, 0xe7939faa436c7874ull, 0xd16bfe8f6a8a40c9ull, 0x44982b86263fd2faull,
    0xe285fb39f984e583ull, 0x779a8df72d7619d3ull, 0xf2d79a8de8d5dd1eull, 0xd1037354d66684e2ull,
    0x004c82a4e668a8e5ull, 0x31d40a7668b044e6ull, 0xd70578538bd02c11ull, 0xdb45431078c5f482ull,
    0x977121bb7f6a51adull, 0x73d5ccbd34eff8ddull, 0xe437a07d356e17cdull, 0x47b2782043c95627ull,
    0x9fb251413e41d49aull, 0xccd70b60652513d3ull, 0x1c95b31e8a1b49b2ull, 0xcae73dfd1bcb4c1bull,
    0x34d98331b1f5b70full, 0x784e39f22338d92full, 0x18613d4a064df420ull, 0xf1d8dae25f0bcebeull,
    0x33f77c15ae855efcull, 0x3c88b3b912eb109cull, 0x956a2ec96bafeea5ull, 0x1aa005b5e0ad0e87ull,
    0x5500d70527c4bb8eull, 0xe36c57196421cc44ull, 0x13c4d286cc36ee39ull, 0x5654a23d818b2a81ull,
    0x77b1dc13d161abdcull, 0x734f44de5f8d5eb5ull, 0x60717e174a6c89a2ull, 0xd47d9649266a211eull,
    0x5b13a4322bb69e90ull, 0xf7669609f8b5fc3cull, 0x21e6ac55bedcdac9ull, 0x9b56b62b61166deaull,
    0xf48f66b939797e9cull, 0x35f332f9c0e6ae9aull, 0xcc733f6a9a878db0ull, 0x3da161e41cc108c2ull,
    0xb7d74ae535914d51ull, 0x4d493b0b11d36469ull, 0xce264d1dfba9741aull, 0xa9d1f2dc7436dc06ull,
    0x70738016604c2a27ull, 0x231d36e96e93f3d5ull, 0x7666881197838d19ull, 0x4a2a83090aaad40cull,
    0xf1e761591668b35dull, 0x7363236497f730a7ull, 0x301080e37379dd4dull, 0x502dea2971827042ull,
    0xc2c5eb858f32625full, 0x786afb9edfafbdffull, 0xdaee0d868490b2a4ull, 0x617366b3268609f6ull,
    0xae0e35a0fe46173eull, 0xd1a07de93e824f11ull, 0x079b8b115ea4cca8ull, 0x93a99274558faebbull,
    0xfb1e6e22e08a03b3ull, 0xea635fdba3698dd0ull, 0xcf53659328503a5cull, 0xcde3b31e6fd5d780ull,
    0x8e3e4221d3614413ull, 0xef14d0d86bf1a22cull, 0xe1d830d3f16c5ddbull, 0xaabd2b2a451504e1ull};

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
