// cdc.cu -- FastCDC 2020 boundary candidates: the gear hash of every
// position, tested against the small and large masks of normalized chunking.
//
// Kernel (extern "C", grid-stride, any grid size is correct):
//   gear_candidates(data, len, mask_s, mask_l, hits_s, hits_l)
//       for every position p of one segment of `len` bytes at `data`:
//       h(p) = sum over q in [p - 63, p] of GEAR[data[q]] << (p - q)  (mod 2^64),
//       the rolling hash h = (h << 1) + GEAR[byte], which forgets a byte after
//       64 steps. Bit p % 32 of hits_s[p / 32] is set iff (h(p) & mask_s) == 0,
//       likewise hits_l with mask_l. Positions p < 63 hash the bytes from 0.
//       The host resolves the min/avg/max rules over these sparse hits
//       (src/gpu/cdc.rs), recomputing the 63 positions after each hash start
//       whose window the CPU chunker truncates.
//   cdc_compact(hits_s, hits_l, words, out, count, cap)
//       for every word w < words with hits_s[w] | hits_l[w] != 0, appends
//       {w, hits_s[w], hits_l[w]} to out (unordered) while fewer than `cap`
//       are stored; *count ends as the number of such words (the host
//       downloads the dense bitmaps instead when it exceeds cap).
//   cdc_gather(data, windows, n, out)
//       copies windows[i].len (<= 64) bytes at data + windows[i].offset to
//       out + 64 i: the bytes after each likely hash start that the host
//       resolver needs, for device-resident segments, in one download.
// GEAR is fastcdc::v2020's table (seed 0). See README.md.
//
// Constant time: not applicable (public data).

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

extern "C" __global__ void __launch_bounds__(256)
gear_candidates(const unsigned char* __restrict__ data, unsigned long long len, unsigned long long mask_s,
                unsigned long long mask_l, unsigned int* __restrict__ hits_s, unsigned int* __restrict__ hits_l) {
    __shared__ unsigned long long gear[256];
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) gear[i] = CDC_GEAR[i];
    __syncthreads();
    // 256 positions per thread: the 63-byte warm-up costs a quarter extra.
    const unsigned long long words = (len + 31ull) >> 5, spans = (words + 7ull) >> 3;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; t < spans; t += stride) {
        const unsigned long long start = t << 8;
        unsigned long long h = 0;
        for (unsigned long long q = start >= 63ull ? start - 63ull : 0ull; q < start; ++q) h = (h << 1) + gear[data[q]];
        for (unsigned long long w = t << 3; w < ((t + 1) << 3) && w < words; ++w) {
            const unsigned long long p0 = w << 5;
            unsigned int s = 0, l = 0;
#pragma unroll 4
            for (unsigned int k = 0; k < 32u; ++k) {
                if (p0 + k < len) {
                    h = (h << 1) + gear[data[p0 + k]];
                    s |= (unsigned int)((h & mask_s) == 0ull) << k;
                    l |= (unsigned int)((h & mask_l) == 0ull) << k;
                }
            }
            hits_s[w] = s;
            hits_l[w] = l;
        }
    }
}

struct CdcHit {
    unsigned int word;   // bitmap word index (positions 32 word ..)
    unsigned int s;      // hits_s[word]
    unsigned int l;      // hits_l[word]
};

extern "C" __global__ void __launch_bounds__(256)
cdc_compact(const unsigned int* __restrict__ hits_s, const unsigned int* __restrict__ hits_l, unsigned long long words,
            CdcHit* __restrict__ out, unsigned long long* __restrict__ count, unsigned long long cap) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long w = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += stride) {
        const unsigned int s = hits_s[w], l = hits_l[w];
        if ((s | l) != 0u) {
            const unsigned long long at = atomicAdd(count, 1ull);
            if (at < cap) out[at] = CdcHit{(unsigned int)w, s, l};
        }
    }
}

struct CdcWindow {
    unsigned long long offset;   // byte offset from data
    unsigned int len;            // bytes to copy, <= 64
    unsigned int pad;
};

extern "C" __global__ void __launch_bounds__(256)
cdc_gather(const unsigned char* __restrict__ data, const CdcWindow* __restrict__ windows, unsigned int n,
           unsigned char* __restrict__ out) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; t < 64ull * n; t += stride) {
        const unsigned long long i = t >> 6;
        const unsigned int b = (unsigned int)(t & 63ull);
        if (b < windows[i].len) out[t] = data[windows[i].offset + b];
    }
}
