// aes_core.cuh -- AES-256 encryption core shared by aes.cu and gcm.cu.
//
// Not a kernel file: aes.cu and gcm.cu include it; gpu/kernels.rs puts its
// text (and that of ctr_common.cuh, which it includes) in place of the
// #include. See README.md.
// Holds: the Te0 table, the shared-memory T-table layouts, the AES-256 block
// function for K interleaved blocks, the cipher the CTR walk of
// ctr_common.cuh calls (GvAesEnc), and the CTR kernels' prologue.
//
// Constant time: NO. Round lookups index shared memory with secret bytes. The
// replicated layouts below make every warp-wide lookup conflict-free, so the
// bank-conflict timing channel is closed, but the access pattern still depends
// on key and data; treat these kernels as not constant-time.

#ifndef GV_AES_CORE_CUH
#define GV_AES_CORE_CUH

#include "ctr_common.cuh"

// ---------------------------------------------------------------------------
// Te0[x] = (2*S[x], S[x], S[x], 3*S[x]) from the most significant byte down,
// the FIPS-197 T-table. Te1..Te3 are right rotations of it by 8, 16, 24 bits.
static __device__ const unsigned int gv_aes_te0[256] = {
    0xc66363a5u, 0xf87c7c84u, 0xee777799u, 0xf67b7b8du, 0xfff2f20du, 0xd66b6bbdu, 0xde6f6fb1u, 0x91c5c554u,
    0x60303050u, 0x02010103u, 0xce6767a9u, 0x562b2b7du, 0xe7fefe19u, 0xb5d7d762u, 0x4dababe6u, 0xec76769au,
    0x8fcaca45u, 0x1f82829du, 0x89c9c940u, 0xfa7d7d87u, 0xeffafa15u, 0xb25959ebu, 0x8e4747c9u, 0xfbf0f00bu,
    0x41adadecu, 0xb3d4d467u, 0x5fa2a2fdu, 0x45afafeau, 0x239c9cbfu, 0x53a4a4f7u, 0xe4727296u, 0x9bc0c05bu,
    0x75b7b7c2u, 0xe1fdfd1cu, 0x3d9393aeu, 0x4c26266au, 0x6c36365au, 0x7e3f3f41u, 0xf5f7f702u, 0x83cccc4fu,
    0x6834345cu, 0x51a5a5f4u, 0xd1e5e534u, 0xf9f1f108u, 0xe2717193u, 0xabd8d873u, 0x62313153u, 0x2a15153fu,
    0x0804040cu, 0x95c7c752u, 0x46232365u, 0x9dc3c35eu, 0x30181828u, 0x379696a1u, 0x0a05050fu, 0x2f9a9ab5u,
    0x0e070709u, 0x24121236u, 0x1b80809bu, 0xdfe2e23du, 0xcdebeb26u, 0x4e272769u, 0x7fb2b2cdu, 0xea75759fu,
    0x1209091bu, 0x1d83839eu, 0x582c2c74u, 0x341a1a2eu, 0x361b1b2du, 0xdc6e6eb2u, 0xb45a5aeeu, 0x5ba0a0fbu,
    0xa45252f6u, 0x763b3b4du, 0xb7d6d661u, 0x7db3b3ceu, 0x5229297bu, 0xdde3e33eu, 0x5e2f2f71u, 0x13848497u,
    0xa65353f5u, 0xb9d1d168u, 0x00000000u, 0xc1eded2cu, 0x40202060u, 0xe3fcfc1fu, 0x79b1b1c8u, 0xb65b5bedu,
    0xd46a6abeu, 0x8dcbcb46u, 0x67bebed9u, 0x7239394bu, 0x944a4adeu, 0x984c4cd4u, 0xb05858e8u, 0x85cfcf4au,
    0xbbd0d06bu, 0xc5efef2au, 0x4faaaae5u, 0xedfbfb16u, 0x864343c5u, 0x9a4d4dd7u, 0x66333355u, 0x11858594u,
    0x8a4545cfu, 0xe9f9f910u, 0x04020206u, 0xfe7f7f81u, 0xa05050f0u, 0x783c3c44u, 0x259f9fbau, 0x4ba8a8e3u,
    0xa25151f3u, 0x5da3a3feu, 0x804040c0u, 0x058f8f8au, 0x3f9292adu, 0x219d9dbcu, 0x70383848u, 0xf1f5f504u,
    0x63bcbcdfu, 0x77b6b6c1u, 0xafdada75u, 0x42212163u, 0x20101030u, 0xe5ffff1au, 0xfdf3f30eu, 0xbfd2d26du,
    0x81cdcd4cu, 0x180c0c14u, 0x26131335u, 0xc3ecec2fu, 0xbe5f5fe1u, 0x359797a2u, 0x884444ccu, 0x2e171739u,
    0x93c4c457u, 0x55a7a7f2u, 0xfc7e7e82u, 0x7a3d3d47u, 0xc86464acu, 0xba5d5de7u, 0x3219192bu, 0xe6737395u,
    0xc06060a0u, 0x19818198u, 0x9e4f4fd1u, 0xa3dcdc7fu, 0x44222266u, 0x542a2a7eu, 0x3b9090abu, 0x0b888883u,
    0x8c4646cau, 0xc7eeee29u, 0x6bb8b8d3u, 0x2814143cu, 0xa7dede79u, 0xbc5e5ee2u, 0x160b0b1du, 0xaddbdb76u,
    0xdbe0e03bu, 0x64323256u, 0x743a3a4eu, 0x140a0a1eu, 0x924949dbu, 0x0c06060au, 0x4824246cu, 0xb85c5ce4u,
    0x9fc2c25du, 0xbdd3d36eu, 0x43acacefu, 0xc46262a6u, 0x399191a8u, 0x319595a4u, 0xd3e4e437u, 0xf279798bu,
    0xd5e7e732u, 0x8bc8c843u, 0x6e373759u, 0xda6d6db7u, 0x018d8d8cu, 0xb1d5d564u, 0x9c4e4ed2u, 0x49a9a9e0u,
    0xd86c6cb4u, 0xac5656fau, 0xf3f4f407u, 0xcfeaea25u, 0xca6565afu, 0xf47a7a8eu, 0x47aeaee9u, 0x10080818u,
    0x6fbabad5u, 0xf0787888u, 0x4a25256fu, 0x5c2e2e72u, 0x381c1c24u, 0x57a6a6f1u, 0x73b4b4c7u, 0x97c6c651u,
    0xcbe8e823u, 0xa1dddd7cu, 0xe874749cu, 0x3e1f1f21u, 0x964b4bddu, 0x61bdbddcu, 0x0d8b8b86u, 0x0f8a8a85u,
    0xe0707090u, 0x7c3e3e42u, 0x71b5b5c4u, 0xcc6666aau, 0x904848d8u, 0x06030305u, 0xf7f6f601u, 0x1c0e0e12u,
    0xc26161a3u, 0x6a35355fu, 0xae5757f9u, 0x69b9b9d0u, 0x17868691u, 0x99c1c158u, 0x3a1d1d27u, 0x279e9eb9u,
    0xd9e1e138u, 0xebf8f813u, 0x2b9898b3u, 0x22111133u, 0xd26969bbu, 0xa9d9d970u, 0x078e8e89u, 0x339494a7u,
    0x2d9b9bb6u, 0x3c1e1e22u, 0x15878792u, 0xc9e9e920u, 0x87cece49u, 0xaa5555ffu, 0x50282878u, 0xa5dfdf7au,
    0x038c8c8fu, 0x59a1a1f8u, 0x09898980u, 0x1a0d0d17u, 0x65bfbfdau, 0xd7e6e631u, 0x844242c6u, 0xd06868b8u,
    0x824141c3u, 0x299999b0u, 0x5a2d2d77u, 0x1e0f0f11u, 0x7bb0b0cbu, 0xa85454fcu, 0x6dbbbbd6u, 0x2c16163au,
};

// ---------------------------------------------------------------------------
// Shared-memory table layouts (all word-addressed by lookup, 4 bytes a lane):
//
//  NT = 4, SH = 7 ("x32x4", 128 KiB): Te0..Te3, each replicated 32 times;
//      word (t*256 + x)*32 + c holds Te_t[x] for copy c. Lane l reads copy l,
//      so a warp's 32 lookups always fall into 32 different banks: no
//      conflicts, and no rotations (each lookup is 1 LDS + index math).
//  NT = 1, SH = 7 ("x32", 32 KiB): Te0 only, replicated 32 times
//      (word x*32 + c); Te1..Te3 are made by rotating (one PRMT/SHF per
//      lookup). Conflict-free like the above at a quarter of the memory.
//  NT = 1, SH = 2 ("x1", 1 KiB): one plain copy of Te0 for the few
//      single-block encryptions (GHASH key, tag masks); conflicts don't matter.
//
// SH is log2 of the byte distance between entries x and x+1.
// GV_AES_TAB_X32X4_BYTES (131072) comes from abi.cuh: the launch passes it.
#define GV_AES_TAB_X32_BYTES 32768u
#define GV_AES_TAB_X1_BYTES 1024u

// Fill a table of layout (NT, SH) from Te0. Every thread of the block helps;
// the caller must __syncthreads() before use.
template <int NT, int SH>
__device__ __forceinline__ void gv_aes_fill(unsigned int* tab) {
    const unsigned int copies = 1u << (SH - 2);
    const unsigned int words = NT * 256u * copies;
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) {
        const unsigned int x = (i >> (SH - 2)) & 255u;   // x32 layouts: a warp shares x, one broadcast read
        const unsigned int t = i >> (SH + 6);
        const unsigned int w = gv_aes_te0[x];
        tab[i] = __funnelshift_r(w, w, 8u * t);
    }
}

// gv_opaque (ctr_common.cuh) on the lane offset takes a round from ALU-pipe
// bound (9 ALU ops per output column) to shared-memory bound (5 ALU, 5 FMA,
// 4 LDS).
// Byte offset of this lane's table copy: lane l reads copy l (bank l).
template <int SH>
__device__ __forceinline__ unsigned int gv_aes_lane_offset() {
    return SH == 7 ? gv_opaque(4u * (threadIdx.x & 31u)) : 0u;
}

// Copy the 60-word key schedule into shared memory. The last round key is
// stored byte-swapped because the last round produces little-endian words
// (ready to XOR with data loaded as uint4), see gv_aes_encrypt.
__device__ __forceinline__ void gv_aes_load_rk(unsigned int* rks, const unsigned int* __restrict__ rk) {
    for (unsigned int i = threadIdx.x; i < 60u; i += blockDim.x) {
        const unsigned int w = __ldg(rk + i);
        rks[i] = i >= 56u ? gv_bswap32(w) : w;
    }
}

// Byte offset, within a table of entry stride 1 << SH, of the entry for byte
// k (k = 3 is the most significant) of s, plus the lane offset lb. The top
// byte uses IMAD.HI and the others PRMT, each followed by one IMAD.
template <int SH, int k>
__device__ __forceinline__ unsigned int gv_toff(unsigned int s, unsigned int lb) {
    const unsigned int x = k == 3 ? __umulhi(s, 256u) : __byte_perm(s, 0u, 0x4440u + k);
    return x * (1u << SH) + lb;
}

// Lookup Te_t[x] where off = (x << SH) + lane offset; tb is the table base.
template <int NT, int SH, int t>
__device__ __forceinline__ unsigned int gv_te(const unsigned char* tb, unsigned int off) {
    if constexpr (NT == 4) {
        return *(const unsigned int*)(tb + t * (256u << SH) + off);
    } else {
        const unsigned int w = *(const unsigned int*)(tb + off);
        return t == 0 ? w : __funnelshift_r(w, w, 8 * t);
    }
}

// Raw word of table t (Te0 when NT = 1); the last round only needs its S-box byte.
template <int NT, int SH, int t>
__device__ __forceinline__ unsigned int gv_te_raw(const unsigned char* tb, unsigned int off) {
    return *(const unsigned int*)(tb + (NT == 4 ? t * (256u << SH) : 0u) + off);
}

// One full round for one block: out = Te0[s0>>24]^Te1[s1>>16]^Te2[s2>>8]^Te3[s3]^rk.
template <int NT, int SH>
__device__ __forceinline__ void gv_aes_round(const unsigned char* tb, unsigned int lb, const unsigned int (&s)[4],
                                             unsigned int (&o)[4], const uint4 k) {
    const unsigned int kk[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        o[c] = gv_te<NT, SH, 0>(tb, gv_toff<SH, 3>(s[c], lb)) ^ gv_te<NT, SH, 1>(tb, gv_toff<SH, 2>(s[(c + 1) & 3], lb)) ^
               gv_te<NT, SH, 2>(tb, gv_toff<SH, 1>(s[(c + 2) & 3], lb)) ^
               gv_te<NT, SH, 3>(tb, gv_toff<SH, 0>(s[(c + 3) & 3], lb)) ^ kk[c];
    }
}

// Last round (SubBytes, ShiftRows, AddRoundKey), emitting each column as a
// little-endian word so the result can be XORed straight onto uint4 data.
// S[x] is read out of a T-table word at a byte where it sits already in
// place: Te1 has S at bits 0-7, Te0 at 8-15, Te3 at 16-23, Te2 at 24-31.
// With one table (NT = 1) the same bytes come from Te0 with a shift.
template <int NT, int SH>
__device__ __forceinline__ void gv_aes_last(const unsigned char* tb, unsigned int lb, const unsigned int (&s)[4],
                                            unsigned int (&o)[4], const uint4 k) {
    const unsigned int kk[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        unsigned int b0, b1, b2, b3;
        if constexpr (NT == 4) {
            b0 = gv_te_raw<NT, SH, 1>(tb, gv_toff<SH, 3>(s[c], lb)) & 0x000000ffu;
            b1 = gv_te_raw<NT, SH, 0>(tb, gv_toff<SH, 2>(s[(c + 1) & 3], lb)) & 0x0000ff00u;
            b2 = gv_te_raw<NT, SH, 3>(tb, gv_toff<SH, 1>(s[(c + 2) & 3], lb)) & 0x00ff0000u;
            b3 = gv_te_raw<NT, SH, 2>(tb, gv_toff<SH, 0>(s[(c + 3) & 3], lb)) & 0xff000000u;
        } else {
            b0 = (gv_te_raw<NT, SH, 0>(tb, gv_toff<SH, 3>(s[c], lb)) >> 8) & 0x000000ffu;
            b1 = gv_te_raw<NT, SH, 0>(tb, gv_toff<SH, 2>(s[(c + 1) & 3], lb)) & 0x0000ff00u;
            b2 = gv_te_raw<NT, SH, 0>(tb, gv_toff<SH, 1>(s[(c + 2) & 3], lb)) & 0x00ff0000u;
            b3 = (gv_te_raw<NT, SH, 0>(tb, gv_toff<SH, 0>(s[(c + 3) & 3], lb)) << 8) & 0xff000000u;
        }
        o[c] = b0 ^ b1 ^ b2 ^ b3 ^ kk[c];
    }
}

// Encrypt K blocks in lock step (K independent chains give the scheduler ILP
// on top of the 16 independent lookups of a round).
//   s:   in: plaintext as big-endian column words; out: ciphertext as
//        little-endian words (byte 4c+i of the block is byte i of s[c]).
//   tb:  table base (layout NT/SH, already filled); lb: this lane's byte
//        offset into it, gv_aes_lane_offset<SH>().
//   rks: round keys from gv_aes_load_rk (shared memory, 16-byte aligned).
template <int NT, int SH, int K>
__device__ __forceinline__ void gv_aes_encrypt(const unsigned char* tb, unsigned int lb, const unsigned int* rks,
                                               unsigned int (&s)[K][4]) {
    const uint4* rk4 = (const uint4*)rks;
    {
        const uint4 k = rk4[0];
#pragma unroll
        for (int b = 0; b < K; ++b) {
            s[b][0] ^= k.x; s[b][1] ^= k.y; s[b][2] ^= k.z; s[b][3] ^= k.w;
        }
    }
#pragma unroll
    for (int r = 1; r < 14; r += 2) {
        // two rounds per iteration so the state ping-pongs between s and t
        // without copies
        const uint4 k1 = rk4[r], k2 = rk4[r + 1];
        unsigned int t[K][4];
#pragma unroll
        for (int b = 0; b < K; ++b) gv_aes_round<NT, SH>(tb, lb, s[b], t[b], k1);
        if (r + 1 < 14) {
#pragma unroll
            for (int b = 0; b < K; ++b) gv_aes_round<NT, SH>(tb, lb, t[b], s[b], k2);
        } else {
#pragma unroll
            for (int b = 0; b < K; ++b) gv_aes_last<NT, SH>(tb, lb, t[b], s[b], k2);
        }
    }
}

// The cipher of gv_ctr16_run (ctr_common.cuh): K blocks with table layout
// (NT, SH) at tb, lane offset lb, round keys rks.
template <int NT, int SH>
struct GvAesEnc {
    const unsigned char* tb;
    unsigned int lb;
    const unsigned int* rks;
    template <int K>
    __device__ __forceinline__ void operator()(unsigned int (&st)[K][4]) const {
        gv_aes_encrypt<NT, SH, K>(tb, lb, rks, st);
    }
};

// Per-block prologue of the CTR kernels: a block with no chunk returns before
// paying for the table fill. Returns false for such blocks (uniform per block,
// so the __syncthreads below is safe).
template <int NT, int SH, int K>
__device__ __forceinline__ bool gv_ctr16_prologue(unsigned int* tab, unsigned int* rks,
                                                  const unsigned int* __restrict__ rk, unsigned int nsegs,
                                                  unsigned long long total_units) {
    const unsigned long long nchunks = (total_units + (K - 1)) / K;
    if (nsegs == 0 || (unsigned long long)blockIdx.x * blockDim.x >= nchunks) return false;
    gv_aes_fill<NT, SH>(tab);
    gv_aes_load_rk(rks, rk);
    __syncthreads();
    return true;
}

#endif  // GV_AES_CORE_CUH
