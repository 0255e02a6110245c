// seed001.cu -- seed 001's sliding-window hashing (HashGPU, Fig. 14): the
// MD5 of every window of `window` bytes at offsets 0, step, 2 step, ...,
// looked up in a sorted set of pattern digests. Compiled after serial.cu,
// whose md5_block, sp_load_le and sp_pad it uses (kernels.rs concatenates).
//
// Kernel (extern "C", grid-stride, any grid size is correct):
//   sliding_md5(data, window, step, nwin, patterns, npat, out, count, cap)
//       one thread per window k < nwin, at offset o = k * step: if
//       MD5(data[o .. o + window]) equals one of the npat patterns (pairs of
//       big-endian u64: digest bytes 0..8 and 8..16, sorted ascending), o is
//       appended to out (unordered) while fewer than cap are stored; *count
//       ends as the number of matching windows. The parallel Merkle-Damgard
//       digest needs no kernel of its own: md5_pieces / sha256_pieces hash
//       its blocks as segments. See README.md.
//
// Constant time: not applicable (public data).

__device__ __forceinline__ unsigned long long sw_be64(unsigned int lo_word, unsigned int hi_word) {
    // MD5 state words are little-endian digest bytes: bytes 0..4 = lo_word.
    return ((unsigned long long)sp_bswap(lo_word) << 32) | sp_bswap(hi_word);
}

extern "C" __global__ void __launch_bounds__(128)
sliding_md5(const unsigned char* __restrict__ data, unsigned long long window, unsigned long long step,
            unsigned long long nwin, const unsigned long long* __restrict__ patterns, unsigned int npat,
            unsigned long long* __restrict__ out, unsigned long long* __restrict__ count, unsigned long long cap) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < nwin; k += stride) {
        const unsigned long long o = k * step;
        const unsigned char* p = data + o;
        unsigned int h[4];
        SP_MD5_INIT
        const unsigned long long full = window & ~63ull;
        unsigned int m[16];
        for (unsigned long long b = 0; b < full; b += 64) { sp_load_le(p + b, m); md5_block(h, m); }
        sp_pad(p + full, (unsigned int)(window - full), window, false, [&](const unsigned int* mm) { md5_block(h, mm); });
        const unsigned long long a = sw_be64(h[0], h[1]), b = sw_be64(h[2], h[3]);
        unsigned int lo = 0, hi = npat;   // first pattern >= (a, b)
        while (lo < hi) {
            const unsigned int mid = (lo + hi) >> 1;
            const unsigned long long pa = __ldg(&patterns[2 * mid]), pb = __ldg(&patterns[2 * mid + 1]);
            if (pa < a || (pa == a && pb < b)) lo = mid + 1; else hi = mid;
        }
        if (lo < npat && __ldg(&patterns[2 * lo]) == a && __ldg(&patterns[2 * lo + 1]) == b) {
            const unsigned long long at = atomicAdd(count, 1ull);
            if (at < cap) out[at] = o;
        }
    }
}
