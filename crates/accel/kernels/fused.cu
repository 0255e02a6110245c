// fused.cu -- the fused job's chunk list, built on the device: from the
// resolved section lists of cdc.cu straight to the piece and level
// descriptors of blake3.cu, so the chunk list never crosses the link.
// gpu/kernels.rs compiles this file after blake3.cu and cdc.cu in one unit
// ("fused"), so it shares their structs (B3Piece, B3Level, CdcJob, CdcSeg,
// CdcSec) and helpers.
//
// Kernels (extern "C"):
//   fused_count(job, segs, nsegs, nsections, lists, secs, stats, head)
//       thread per section (grid-stride): checks the section's list as
//       gpu/cdc.rs `assemble` does (resolved, v <= e < cap, strictly
//       increasing starts, its first start where the previous section of the
//       segment ended (0 for a segment's first), the last section ending at
//       the segment end) and writes stats[k]: its chunks, their 1 KiB BLAKE3
//       chunks and their reduce groups at each tree level. A bad section k
//       raises head[FUSED_BAD] to at least k + 1 (head zeroed by the host).
//   fused_scan(stats, nsections, overflow, head)
//       one block: stats become exclusive prefix sums, in place; head gets the
//       totals and *overflow (cdc.cu's list overflow flag) at FUSED_OVERFLOW.
//   fused_scatter(job, segs, nsegs, nsections, lists, secs, stats, nchunks, crc,
//                 pieces, levels, offsets, lens)
//       thread per section: for its chunks c (job-wide, in order), the
//       B3Piece (seg = c: chunk c's digest lands in digests[c]), the chunk's
//       offset in its segment and length, and for every level L the
//       B3Level levels[L * nchunks + c] (count 0 where the chunk has no
//       level L, so blake3_reduce skips it; first_out stays monotone).
//       With crc, the levels carry their x^(8 |node|) factors.
// Layouts: README.md, "Fused job: descriptors on the device".
//
// gpu/launch.rs declares the same parameter lists (a test compares them).
//
// Constant time: not applicable (public data).

#include "abi.cuh"

// From abi.cuh: FUSED_LEVELS (reduce levels of a chunk < 4 GiB: 2^22 KiB <
// 16^6), FUSED_FIELDS (words of a FusedStat), the head words FUSED_BAD (1 +
// the highest bad section, 0 if none) and FUSED_OVERFLOW, FUSED_SCAN_BLOCK.

// gpu/abi.rs FusedStat (the layout is checked below).
struct FusedStat {
    unsigned long long chunks;               // content-defined chunks of the section
    unsigned long long kib;                  // their 1 KiB BLAKE3 chunks
    unsigned long long groups[FUSED_LEVELS]; // their reduce groups at each level
};
GV_CHECK_LAYOUT(FusedStat);

// B3_CRC_X8POW[64]: x^(8 * 2^k) modulo the CRC-32C polynomial, reflected,
// generated from gpu/blake3.rs `crc_pow2` (the host's table) by gpu/abi.rs.
#include "crc_pow.cuh"

// x^(8 n): one multiply per set bit of n.
__device__ __forceinline__ unsigned int fused_crc_shift(unsigned long long n) {
    unsigned int p = 1u << 31;   // x^0
    for (int k = 0; n != 0ull; ++k, n >>= 1)
        if (n & 1ull) p = b3_crc_mul(B3_CRC_X8POW[k], p);
    return p;
}

// Adds one content-defined chunk of `len` bytes to st.
__device__ __forceinline__ void fused_add(FusedStat& st, unsigned long long len) {
    unsigned long long count = b3_chunks_of(len);
    st.chunks += 1ull;
    st.kib += count;
    for (int L = 0; L < FUSED_LEVELS && count > 1ull; ++L) {
        count = (count + B3_GROUP - 1ull) / B3_GROUP;
        st.groups[L] += count;
    }
}

// Whether section k's list is consistent (see the header).
__device__ bool fused_section_ok(const CdcJob* __restrict__ job, const CdcSeg& sg, unsigned long long i,
                                 unsigned long long k, const unsigned int* __restrict__ lists,
                                 const CdcSec* __restrict__ secs) {
    const unsigned int cap = job->cap;
    const CdcSec sc = secs[k];
    if (sc.v == CDC_FAIL || sc.v > sc.e || sc.e >= cap) return false;
    const unsigned int* l = lists + k * cap;
    const unsigned long long s = i * job->section;
    unsigned long long entry = 0;   // where the previous section's chunks ended
    if (i > 0) {
        const CdcSec pv = secs[k - 1ull];
        if (pv.e >= cap) return false;
        entry = s - job->section + lists[(k - 1ull) * cap + pv.e];
    }
    if (s + l[sc.v] != entry) return false;
    for (unsigned int j = sc.v; j < sc.e; ++j)
        if (l[j + 1u] <= l[j]) return false;
    if (i + 1ull == cdc_sections(job, sg.len) && s + l[sc.e] != sg.len) return false;
    return true;
}

extern "C" __global__ void __launch_bounds__(256)
fused_count(const CdcJob* __restrict__ job, const CdcSeg* __restrict__ segs, unsigned int nsegs,
            unsigned long long nsections, const unsigned int* __restrict__ lists, const CdcSec* __restrict__ secs,
            FusedStat* __restrict__ stats, unsigned long long* __restrict__ head) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < nsections; k += stride) {
        FusedStat st = {};
        const CdcSeg sg = segs[cdc_seg_of(segs, nsegs, k)];
        const unsigned long long i = k - sg.first_section;
        if (i < cdc_sections(job, sg.len) && fused_section_ok(job, sg, i, k, lists, secs)) {
            const CdcSec sc = secs[k];
            const unsigned int* l = lists + k * job->cap;
            for (unsigned int j = sc.v; j < sc.e; ++j) fused_add(st, l[j + 1u] - l[j]);
        } else {
            atomicMax(head + FUSED_BAD, k + 1ull);
        }
        stats[k] = st;
    }
}

// One block of FUSED_SCAN_BLOCK threads: thread t sums a contiguous run of
// sections, thread 0 scans the run sums, then every thread rewrites its run.
extern "C" __global__ void __launch_bounds__(FUSED_SCAN_BLOCK)
fused_scan(FusedStat* __restrict__ stats, unsigned long long nsections, const unsigned int* __restrict__ overflow,
           unsigned long long* __restrict__ head) {
    __shared__ FusedStat runs[FUSED_SCAN_BLOCK];
    if (blockIdx.x != 0) return;
    const unsigned int t = threadIdx.x;
    const unsigned long long per = (nsections + blockDim.x - 1ull) / blockDim.x;
    const unsigned long long lo = t * per < nsections ? t * per : nsections;
    const unsigned long long hi = lo + per < nsections ? lo + per : nsections;
    FusedStat sum = {};
    for (unsigned long long k = lo; k < hi; ++k) {
        sum.chunks += stats[k].chunks;
        sum.kib += stats[k].kib;
        for (int L = 0; L < FUSED_LEVELS; ++L) sum.groups[L] += stats[k].groups[L];
    }
    runs[t] = sum;
    __syncthreads();
    if (t == 0) {
        FusedStat acc = {};
        for (unsigned int r = 0; r < blockDim.x; ++r) {
            const FusedStat x = runs[r];
            runs[r] = acc;
            acc.chunks += x.chunks;
            acc.kib += x.kib;
            for (int L = 0; L < FUSED_LEVELS; ++L) acc.groups[L] += x.groups[L];
        }
        head[0] = acc.chunks;
        head[1] = acc.kib;
        for (int L = 0; L < FUSED_LEVELS; ++L) head[2 + L] = acc.groups[L];
        head[FUSED_OVERFLOW] = *overflow;
    }
    __syncthreads();
    FusedStat acc = runs[t];
    for (unsigned long long k = lo; k < hi; ++k) {
        const FusedStat x = stats[k];
        stats[k] = acc;
        acc.chunks += x.chunks;
        acc.kib += x.kib;
        for (int L = 0; L < FUSED_LEVELS; ++L) acc.groups[L] += x.groups[L];
    }
}

extern "C" __global__ void __launch_bounds__(256)
fused_scatter(const CdcJob* __restrict__ job, const CdcSeg* __restrict__ segs, unsigned int nsegs,
              unsigned long long nsections, const unsigned int* __restrict__ lists, const CdcSec* __restrict__ secs,
              const FusedStat* __restrict__ stats, unsigned long long nchunks, unsigned int crc,
              B3Piece* __restrict__ pieces, B3Level* __restrict__ levels, unsigned long long* __restrict__ offsets,
              unsigned int* __restrict__ lens) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < nsections; k += stride) {
        const CdcSeg sg = segs[cdc_seg_of(segs, nsegs, k)];
        const unsigned long long s = (k - sg.first_section) * job->section;
        const CdcSec sc = secs[k];
        const unsigned int* l = lists + k * job->cap;
        FusedStat at = stats[k];
        for (unsigned int j = sc.v; j < sc.e; ++j) {
            const unsigned long long c = at.chunks, start = s + l[j], len = l[j + 1u] - l[j];
            if (c >= nchunks) return;   // inconsistent with the count: write nothing out of range
            unsigned long long count = b3_chunks_of(len);
            pieces[c] = B3Piece{(unsigned long long)sg.data + start, len, at.kib, 0ull, (unsigned int)c,
                                count == 1ull ? 1u : 0u};
            offsets[c] = start;
            lens[c] = (unsigned int)len;
            unsigned long long first_in = at.kib, node = 1024ull;
            for (int L = 0; L < FUSED_LEVELS; ++L) {
                B3Level lv = {first_in, 0ull, at.groups[L], (unsigned int)c, 0u, 0u, 0u};
                if (count > 1ull) {
                    lv.count = count;
                    if (crc) {
                        lv.crc_full = fused_crc_shift(node);
                        lv.crc_last = fused_crc_shift(len - (count - 1ull) * node);
                    }
                    first_in = at.groups[L];
                    count = (count + B3_GROUP - 1ull) / B3_GROUP;
                    at.groups[L] += count;
                }
                levels[(unsigned long long)L * nchunks + c] = lv;
                node *= B3_GROUP;
            }
            at.chunks += 1ull;
            at.kib += b3_chunks_of(len);
        }
    }
}
