//! FastCDC chunking on one device, boundaries included: `gear_candidates`
//! marks every position whose gear hash passes the small or large mask,
//! `cdc_summarize` builds a find-next index over those bitmaps, and
//! `cdc_walk` / `cdc_sync` / `cdc_fixup` resolve the min/avg/max rules on
//! the device, exactly as `fastcdc::v2020` (kernels/cdc.cu explains the
//! scheme; `cdc_resolve` is the CPU twin). Only the section lists (a few
//! bytes per chunk) come back; the host reads the chunk spans from them.

pub(crate) use super::abi::CdcSec;
use super::abi::{
    CdcJob, CdcSeg, CDC_FAIL as FAIL, CDC_LEVELS as LEVELS, CDC_TAIL as TAIL, GEAR_SPAN as SPAN,
    GEAR_STAGE_WARP,
};
use super::blake3::Input;
use super::launch::{
    CdcArgs, GearArgs, Shape, SummarizeArgs, CDC_FIXUP, CDC_SUMMARIZE, CDC_SYNC, CDC_WALK,
    GEAR_CANDIDATES,
};
use super::runtime::{download, sync, DevError, Device, DeviceBuffer};
use super::stage::{as_bytes, upload_on};
use crate::cdc_resolve::masks;
use crate::chunking::ChunkParams;
use crate::job::ChunkSpan;

const BLOCK: u32 = 256;
/// Threads per block of the walking kernels: few threads, long serial work.
const WALK_BLOCK: u32 = 32;

/// Dynamic shared memory of a `gear_candidates` launch, by variant:
/// `staged` (loads staged through shared memory with cp.async, 3 blocks an
/// SM where an SM has >= 208 KiB of it) or `direct` (each thread loads its
/// own span). A launch with less than `GEAR_STAGE_WARP` a warp takes the
/// direct path. `GVAULT_GEAR_VARIANT` picks one, so both
/// can be timed in one build; by default, staged on the data-centre parts
/// with 164-228 KiB of shared memory an SM (sm_80, sm_90, sm_100) and direct
/// elsewhere (100 KiB an SM would hold one staged block; before sm_80 the
/// copies are synchronous).
fn gear_shared_bytes(
    variant: Result<String, std::env::VarError>,
    cc: (i32, i32),
) -> Result<u32, DevError> {
    let staged = BLOCK / 32 * GEAR_STAGE_WARP;
    match variant {
        Err(std::env::VarError::NotPresent) => Ok(match cc {
            (8, 0) | (9, _) | (10, _) => staged,
            _ => 0,
        }),
        Ok(v) if v == "staged" => Ok(staged),
        Ok(v) if v == "direct" => Ok(0),
        Ok(v) => Err(format!(
            "GVAULT_GEAR_VARIANT={v:?}: expected \"staged\" or \"direct\""
        )),
        Err(e) => Err(format!("GVAULT_GEAR_VARIANT: {e}")),
    }
}

/// One segment's bytes on the device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OnDevice {
    pub ptr: u64,
    pub len: usize,
}

/// Bytes per section: at least `max` (the scheme needs it), and large
/// enough that a walk's speculative first chunks are a small part of it.
pub(crate) fn section_bytes(params: &ChunkParams) -> u64 {
    (2 * params.max() as u64).max(32 << 10)
}

/// List entries per section: every start a walk can record in a section
/// (chunks other than a segment's last are at least `min & !1` long), the
/// position past it, and the junction steps.
pub(crate) fn list_cap(params: &ChunkParams, section: u64) -> u32 {
    let shortest = (params.min() & !1).max(2) as u64;
    (section.div_ceil(shortest) + 2) as u32 + TAIL
}

/// Chunk boundaries of each input, in order (`Job::Chunk`).
pub(crate) fn chunk_all(
    dev: &Device,
    params: &ChunkParams,
    inputs: &[Input<'_>],
) -> Result<Vec<Vec<ChunkSpan>>, DevError> {
    dev.bind()?;
    let mut out = Vec::with_capacity(inputs.len());
    for group in super::chunk_digest::groups(inputs) {
        let (placed, _resident) = super::chunk_digest::place(dev, group)?;
        out.extend(boundaries(dev, params, &placed)?);
    }
    Ok(out)
}

/// Chunk boundaries of segments that lie on the device, resolved there;
/// the section lists come down and the host assembles the spans.
pub(crate) fn boundaries(
    dev: &Device,
    params: &ChunkParams,
    segs: &[OnDevice],
) -> Result<Vec<Vec<ChunkSpan>>, DevError> {
    let Some(r) = resolve(dev, params, segs)? else {
        return Ok(segs.iter().map(|_| Vec::new()).collect());
    };
    let mut trace = super::runtime::Trace::new("cdc", r.stream);
    sync(r.stream)?;
    let mut overflow = [0u8; 4];
    download(&mut overflow, r.flags.ptr + segs.len() as u64 * 4)?;
    if overflow != [0; 4] {
        return Err(OVERFLOW.into());
    }
    let ns = r.sections as usize;
    let cap = r.cap;
    let mut sec_bytes = vec![0u8; ns * std::mem::size_of::<CdcSec>()];
    // 16 bytes a section and `cap` words a section (MB per GiB of input):
    // through the page-locked buffer.
    dev.download_pinned(&mut sec_bytes, r.secs.ptr)?;
    let mut list_bytes = vec![0u8; ns * cap as usize * 4];
    dev.download_pinned(&mut list_bytes, r.lists.ptr)?;
    let words_of = |b: &[u8]| -> Vec<u32> {
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let secs: Vec<CdcSec> = words_of(&sec_bytes)
        .chunks_exact(4)
        .map(|w| CdcSec {
            n: w[0],
            v: w[1],
            e: w[2],
            pad: w[3],
        })
        .collect();
    trace.mark("downloads");
    let lens: Vec<usize> = segs.iter().map(|s| s.len).collect();
    let spans = assemble(&lens, r.section, cap, &secs, &words_of(&list_bytes));
    trace.mark("assemble");
    spans
}

/// The error of a section list overflow (cdc.cu sets `flags[nsegs]`).
pub(crate) const OVERFLOW: &str = "cdc_walk: a section list overflowed (internal error)";

/// Resolved section lists on the device, queued on `stream` (not yet
/// synchronised): `lists` holds `cap` words a section, `secs` one `CdcSec`
/// a section, `flags[nsegs]` the overflow flag; `job` and `segs` are the
/// kernels' `CdcJob` and `CdcSeg`s. The buffers must outlive the stream's
/// use of them.
pub(crate) struct Resolved {
    pub stream: cudarc::driver::sys::CUstream,
    pub section: u64,
    pub cap: u32,
    pub sections: u64,
    pub job: DeviceBuffer,
    pub segs: DeviceBuffer,
    pub lists: DeviceBuffer,
    pub secs: DeviceBuffer,
    pub flags: DeviceBuffer,
    /// The candidate index and failure bits the kernels read (kept alive).
    _scratch: [DeviceBuffer; 2],
}

/// Queues the boundary kernels for segments that lie on the device; None
/// when they hold no bytes (no sections).
pub(crate) fn resolve(
    dev: &Device,
    params: &ChunkParams,
    segs: &[OnDevice],
) -> Result<Option<Resolved>, DevError> {
    let section = section_bytes(params);
    let mut first_words = Vec::with_capacity(segs.len());
    let mut first_sections = Vec::with_capacity(segs.len());
    let (mut words, mut sections) = (0usize, 0u64);
    for s in segs {
        first_words.push(words);
        first_sections.push(sections);
        // 4-word (16-byte) aligned, for the kernel's 16-byte stores; the
        // padding words are never written and lie past the segment's end,
        // where cdc_first ignores them.
        words += s.len.div_ceil(32).next_multiple_of(4);
        sections += (s.len as u64).div_ceil(section);
    }
    if sections == 0 {
        return Ok(None);
    }
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;

    let mut trace = super::runtime::Trace::new("cdc", stream);
    // Candidate bitmaps (level 0) and their summaries, both masks, one buffer.
    let mut level_words = [words.max(4); LEVELS];
    for k in 1..LEVELS {
        level_words[k] = level_words[k - 1].div_ceil(32);
    }
    let index_bytes = level_words.iter().sum::<usize>() * 8;
    let index = dev.alloc(index_bytes)?;
    // The gear pass never writes the padding words between segments'
    // bitmaps; zeroed, they hold no candidates whatever reads them
    // (~0.02 ms per GiB of input).
    // SAFETY: index is a live device allocation of index_bytes bytes; the
    // memset is ordered before the kernels on the same stream.
    unsafe { cudarc::driver::sys::cuMemsetD8Async(index.ptr, 0, index_bytes, stream) }
        .result()
        .map_err(|e| super::runtime::err("zeroing the candidate index", e))?;
    let (mut lv_s, mut lv_l) = ([0u64; LEVELS], [0u64; LEVELS]);
    let mut at = index.ptr;
    for k in 0..LEVELS {
        lv_s[k] = at;
        lv_l[k] = at + level_words[k] as u64 * 4;
        at += level_words[k] as u64 * 8;
    }
    let (mask_s, mask_l) = masks(params);
    let gear_shared = gear_shared_bytes(
        crate::tuning::tuning()
            .gear_variant
            .clone()
            .ok_or(std::env::VarError::NotPresent),
        dev.compute_capability,
    )?;
    for (s, &w) in segs.iter().zip(&first_words).filter(|(s, _)| s.len > 0) {
        let args = GearArgs {
            data: s.ptr.into(),
            len: s.len as u64,
            mask_s,
            mask_l,
            hits_s: (lv_s[0] + w as u64 * 4).into(),
            hits_l: (lv_l[0] + w as u64 * 4).into(),
        };
        // A grid of one wave (4 blocks an SM, against ncu's 3.88 waves at
        // 256 MiB) measured 1.64-1.70 ms per GiB against 1.59-1.64 with the
        // direct loads: the grid covers the spans.
        let shape = Shape {
            grid: dev.grid_for((s.len as u64).div_ceil(SPAN), BLOCK),
            block: BLOCK,
            shared: gear_shared,
        };
        // SAFETY: s.ptr holds s.len bytes (the caller's device memory); the
        // segment's words lie in level 0; the kernel uses at most
        // gear_shared bytes of dynamic shared memory (it reads the launch's
        // size), which the runtime allows every kernel.
        unsafe { dev.launch(GEAR_CANDIDATES, shape, stream, args)? };
    }
    trace.mark("gear_candidates");
    for k in 1..LEVELS {
        let args = SummarizeArgs {
            lo_s: lv_s[k - 1].into(),
            lo_l: lv_l[k - 1].into(),
            n_lo: level_words[k - 1] as u64,
            up_s: lv_s[k].into(),
            up_l: lv_l[k].into(),
        };
        // a warp per upper word
        let shape = Shape {
            grid: dev.grid_for(level_words[k] as u64 * 32, BLOCK),
            block: BLOCK,
            shared: 0,
        };
        // SAFETY: level k - 1 holds level_words[k - 1] words, level k
        // ceil(that / 32).
        unsafe { dev.launch(CDC_SUMMARIZE, shape, stream, args)? };
    }

    trace.mark("cdc_summarize");
    // The walk.
    let cap = list_cap(params, section);
    let job = CdcJob {
        min: params.min() as u64,
        avg: params.avg() as u64,
        max: params.max() as u64,
        mask_s,
        mask_l,
        section,
        lv_s,
        lv_l,
        cap,
        pad: 0,
    };
    let descs: Vec<CdcSeg> = segs
        .iter()
        .zip(first_words.iter().zip(&first_sections))
        .map(|(s, (&w, &f))| CdcSeg {
            data: s.ptr,
            len: s.len as u64,
            bit0: w as u64 * 32,
            first_section: f,
        })
        .collect();
    let ns = sections as usize;
    let job_buf = dev.alloc(std::mem::size_of::<CdcJob>())?;
    let seg_buf = dev.alloc(std::mem::size_of_val(descs.as_slice()))?;
    let lists = dev.alloc(ns * cap as usize * 4)?;
    let secs = dev.alloc(ns * std::mem::size_of::<CdcSec>())?;
    let fails = dev.alloc((ns / 32 + 1) * 4)?;
    let flags = dev.alloc((segs.len() + 1) * 4)?;
    upload_on(stream, job_buf.ptr, as_bytes(std::slice::from_ref(&job)))?;
    upload_on(stream, seg_buf.ptr, as_bytes(&descs))?;
    let args = CdcArgs {
        job: job_buf.ptr.into(),
        segs: seg_buf.ptr.into(),
        nsegs: u32::try_from(segs.len()).map_err(|_| "cdc: over 2^32 segments in one group")?,
        nsections: sections,
        lists: lists.ptr.into(),
        secs: secs.ptr.into(),
        fails: fails.ptr.into(),
        flags: flags.ptr.into(),
    };
    for (kernel, threads) in [
        (CDC_WALK, sections),
        (CDC_SYNC, sections),
        (CDC_FIXUP, segs.len() as u64),
    ] {
        let shape = Shape {
            grid: dev.grid_for(threads, WALK_BLOCK),
            block: WALK_BLOCK,
            shared: 0,
        };
        // SAFETY: job and segs were uploaded on this stream; lists hold cap
        // entries per section, secs one per section, fails a bit per
        // section, flags nsegs + 1 words; every segment's data and bitmap
        // words are valid device memory.
        unsafe { dev.launch(kernel, shape, stream, args)? };
        trace.mark(kernel.name);
    }
    Ok(Some(Resolved {
        stream,
        section,
        cap,
        sections,
        job: job_buf,
        segs: seg_buf,
        lists,
        secs,
        flags,
        _scratch: [index, fails],
    }))
}

/// The chunk spans of each segment from the resolved section lists:
/// section k of a segment owns the starts `list[v..e]`, each chunk ending
/// at the next entry. Checks that the spans tile every segment exactly.
pub(crate) fn assemble(
    lens: &[usize],
    section: u64,
    cap: u32,
    secs: &[CdcSec],
    lists: &[u32],
) -> Result<Vec<Vec<ChunkSpan>>, DevError> {
    let mut out = Vec::with_capacity(lens.len());
    let mut k = 0usize;
    for (si, &len) in lens.iter().enumerate() {
        let mut spans = Vec::new();
        let mut pos = 0u64;
        for i in 0..(len as u64).div_ceil(section) {
            let bad = |what: &str| format!("cdc resolution: segment {si} section {i}: {what}");
            let sec = secs.get(k).ok_or_else(|| bad("missing"))?;
            let list = lists
                .get(k * cap as usize..(k + 1) * cap as usize)
                .ok_or_else(|| bad("list missing"))?;
            if sec.v == FAIL || sec.v > sec.e || sec.e >= cap {
                return Err(bad(&format!("unresolved ({sec:?})")));
            }
            let start = i * section;
            for w in list[sec.v as usize..=sec.e as usize].windows(2) {
                let (a, b) = (start + w[0] as u64, start + w[1] as u64);
                if a != pos || b <= a || b - a > u32::MAX as u64 {
                    return Err(bad(&format!("chunk {a}..{b} after {pos}")));
                }
                spans.push(ChunkSpan {
                    offset: a,
                    len: (b - a) as u32,
                });
                pos = b;
            }
            k += 1;
        }
        if pos != len as u64 {
            return Err(format!(
                "cdc resolution: segment {si}: chunks end at {pos} of {len}"
            ));
        }
        out.push(spans);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastcdc::v2020::FastCDC;
    use rand::{RngCore, SeedableRng};

    /// Section lists as the kernels leave them: a speculative first entry
    /// at the section start where that is no chunk start, the true starts,
    /// then the first start past the section (or the segment end).
    fn lists_of(
        spans: &[ChunkSpan],
        len: usize,
        section: u64,
        cap: u32,
    ) -> (Vec<CdcSec>, Vec<u32>) {
        let mut starts: Vec<u64> = spans.iter().map(|s| s.offset).collect();
        starts.push(len as u64);
        let (mut secs, mut lists) = (Vec::new(), Vec::new());
        for i in 0..(len as u64).div_ceil(section) {
            let s = i * section;
            let mut list: Vec<u32> = Vec::new();
            if !starts.contains(&s) {
                list.push(0);
            }
            let v = list.len() as u32;
            let mut past = starts.iter().filter(|&&x| x >= s);
            for &x in past.by_ref() {
                list.push((x - s) as u32);
                if x >= s + section {
                    break;
                }
            }
            let n = list.len() as u32;
            secs.push(CdcSec {
                n,
                v,
                e: n - 1,
                pad: 0,
            });
            list.resize(cap as usize, 0xEEEE_EEEE);
            lists.extend(list);
        }
        (secs, lists)
    }

    #[test]
    fn gear_variant_from_the_environment() {
        use std::env::VarError::NotPresent;
        let staged = 8 * GEAR_STAGE_WARP;
        assert_eq!(gear_shared_bytes(Err(NotPresent), (9, 0)), Ok(staged));
        assert_eq!(gear_shared_bytes(Err(NotPresent), (8, 0)), Ok(staged));
        assert_eq!(gear_shared_bytes(Err(NotPresent), (8, 9)), Ok(0));
        assert_eq!(gear_shared_bytes(Ok("direct".into()), (9, 0)), Ok(0));
        assert_eq!(gear_shared_bytes(Ok("staged".into()), (8, 6)), Ok(staged));
        let bad = gear_shared_bytes(Ok("fast".into()), (9, 0)).unwrap_err();
        assert!(
            bad.contains("GVAULT_GEAR_VARIANT") && bad.contains("fast"),
            "{bad}"
        );
    }

    #[test]
    fn assemble_gives_the_spans_and_rejects_bad_lists() {
        let p = ChunkParams::new(64, 256, 1024, 1).unwrap();
        let section = 2048;
        let cap = list_cap(&p, section);
        let mut data = vec![0u8; 50_001];
        rand::rngs::StdRng::seed_from_u64(9).fill_bytes(&mut data[..30_000]);
        let want: Vec<ChunkSpan> =
            FastCDC::with_level(&data, p.min(), p.avg(), p.max(), p.normalization())
                .map(|c| ChunkSpan {
                    offset: c.offset as u64,
                    len: c.length as u32,
                })
                .collect();
        let (secs, lists) = lists_of(&want, data.len(), section, cap);
        let got = assemble(&[data.len(), 0], section, cap, &secs, &lists).unwrap();
        assert_eq!(got, vec![want, Vec::new()]);
        for bad in [
            CdcSec { v: FAIL, ..secs[3] },
            CdcSec { e: cap, ..secs[3] },
            CdcSec {
                v: secs[3].v + 1,
                ..secs[3]
            },
            CdcSec {
                e: secs[3].e + 1,
                ..secs[3]
            },
        ] {
            let mut s = secs.clone();
            s[3] = bad;
            assert!(assemble(&[data.len()], section, cap, &s, &lists).is_err());
        }
        assert!(assemble(&[data.len() + 1], section, cap, &secs, &lists).is_err());
        assert!(assemble(&[data.len()], section, cap, &secs[1..], &lists).is_err());
    }
}
