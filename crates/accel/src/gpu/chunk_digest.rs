//! The fused job on one device: chunk boundaries and each chunk's keyed
//! BLAKE3 over the same device-resident bytes. Host segments cross the link
//! once (pinned slots, then a device-to-device copy into one job buffer);
//! `gpu::cdc::boundaries` finds the FastCDC boundaries on the device (gear
//! candidates, a find-next index, section walks that resynchronise, see
//! kernels/cdc.cu), and the BLAKE3 kernels hash every chunk where it lies
//! (computing its CRC-32C from the same loads when asked).
//!
//! `GVAULT_FUSED_DESC` picks where the chunk list is built:
//! * `device` (default, `device_list.rs`): kernels turn the section lists
//!   into the BLAKE3 descriptors in place; the host waits once for the
//!   totals and downloads once (digests, spans, CRCs).
//! * `host`: the section lists come down, the host assembles the spans and
//!   uploads one BLAKE3 piece per chunk, the digests come down.

use super::blake3::{hash, Input};
use super::cdc::{boundaries, OnDevice};
use super::runtime::{DevError, Device, DeviceBuffer};
use super::stage::{copy_in, cut};
use crate::chunking::ChunkParams;
use crate::job::{ChunkSpan, DigestedChunk};
use crate::types::Blake3Key;

mod device_list;

/// Where the fused job builds its chunk list (`GVAULT_FUSED_DESC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DescSide {
    Host,
    Device,
}

impl DescSide {
    fn pick(var: Result<String, std::env::VarError>) -> Result<Self, DevError> {
        match var {
            Err(std::env::VarError::NotPresent) => Ok(Self::Device),
            Ok(v) if v == "device" => Ok(Self::Device),
            Ok(v) if v == "host" => Ok(Self::Host),
            Ok(v) => Err(format!(
                "GVAULT_FUSED_DESC={v:?}: expected \"host\" or \"device\""
            )),
            Err(e) => Err(format!("GVAULT_FUSED_DESC: {e}")),
        }
    }
}

/// Device memory a group may take, counted as host bytes (copied into one
/// job buffer, plus ~1/4 of that for candidate bitmaps and their index and
/// 1/32 for chaining values) and device-resident bytes at a quarter (only
/// that scratch): 1 GiB of host segments or 4 GiB of resident ones (on an
/// H100 one group of 4 x 1 GiB resident ran at 381 GB/s against 336 in
/// four 1 GiB groups: each group pays host round trips). 1 GiB, not more:
/// a 4 GiB group of host segments once hit an illegal address on an H200
/// (cause not found; the candidate index's unwritten padding words, zeroed
/// now, are a suspect), while the same test passed twice on an H100.
/// `GVAULT_FUSED_GROUP_BYTES` (64 MiB..=16 GiB) overrides it
/// (`scripts/gpu-check.sh` phase group4g).
const GROUP_BYTES: usize = 1 << 30;

fn group_bytes() -> usize {
    crate::tuning::tuning()
        .fused_group_bytes
        .unwrap_or(GROUP_BYTES)
}

/// Chunks and digests (and with `crc32c` their CRC-32C) of each input, in order.
pub(crate) fn run(
    dev: &Device,
    params: &ChunkParams,
    key: &Blake3Key,
    crc32c: bool,
    inputs: &[Input<'_>],
) -> Result<Vec<Vec<DigestedChunk>>, DevError> {
    dev.bind()?;
    let side = DescSide::pick(
        crate::tuning::tuning()
            .fused_desc
            .clone()
            .ok_or(std::env::VarError::NotPresent),
    )?;
    let mut out = Vec::with_capacity(inputs.len());
    for group in groups(inputs) {
        out.extend(match side {
            DescSide::Host => run_group(dev, params, key, crc32c, group)?,
            DescSide::Device => {
                let (placed, _resident) = place(dev, group)?;
                device_list::run_group(dev, params, key, crc32c, &placed)?
            }
        });
    }
    Ok(out)
}

/// Consecutive runs of inputs of at most GROUP_BYTES (or one larger input).
pub(crate) fn groups<'a, 'b>(inputs: &'a [Input<'b>]) -> impl Iterator<Item = &'a [Input<'b>]> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= inputs.len() {
            return None;
        }
        let mut end = start;
        let mut bytes = 0usize;
        while end < inputs.len() && (end == start || bytes + weight(&inputs[end]) <= group_bytes())
        {
            bytes += weight(&inputs[end]);
            end += 1;
        }
        let group = &inputs[start..end];
        start = end;
        Some(group)
    })
}

/// An input's share of a group's device memory (see GROUP_BYTES).
fn weight(input: &Input<'_>) -> usize {
    match input {
        Input::Host(b) => b.len(),
        Input::Device { len, .. } => len / 4,
    }
}

fn run_group(
    dev: &Device,
    params: &ChunkParams,
    key: &Blake3Key,
    crc32c: bool,
    inputs: &[Input<'_>],
) -> Result<Vec<Vec<DigestedChunk>>, DevError> {
    let stream = dev.aux_stream;
    let mut trace = super::runtime::Trace::new("fused", stream);
    let (placed, _resident) = place(dev, inputs)?;
    trace.mark("place");
    let spans: Vec<Vec<ChunkSpan>> = boundaries(dev, params, &placed)?;
    trace.mark("boundaries");
    // Every chunk of every segment is one BLAKE3 input, read in place.
    let chunk_inputs: Vec<Input<'_>> = placed
        .iter()
        .zip(&spans)
        .flat_map(|(p, spans)| {
            spans.iter().map(move |s| Input::Device {
                ptr: p.ptr + s.offset,
                len: s.len as usize,
            })
        })
        .collect();
    trace.mark("chunk inputs");
    let (digests, crcs) = hash(dev, Some(key), &chunk_inputs, crc32c)?;
    trace.mark("blake3 of chunks");
    let mut digests = digests.into_iter();
    let mut crcs = crcs.map(Vec::into_iter);
    Ok(spans
        .into_iter()
        .map(|spans| {
            spans
                .into_iter()
                .map(|span| DigestedChunk {
                    span,
                    digest: digests.next().expect("one digest per chunk"),
                    crc32c: crcs.as_mut().map(|c| c.next().expect("one CRC per chunk")),
                })
                .collect()
        })
        .collect())
}

/// Device addresses for every input: host bytes are copied through the
/// pinned slots into one job buffer (returned, to keep it alive).
pub(crate) fn place(
    dev: &Device,
    inputs: &[Input<'_>],
) -> Result<(Vec<OnDevice>, Option<DeviceBuffer>), DevError> {
    let mut host_len = 0usize;
    let mut offsets = Vec::with_capacity(inputs.len());
    for i in inputs {
        offsets.push(host_len);
        if let Input::Host(b) = i {
            host_len = (host_len + b.len()).next_multiple_of(16);
        }
    }
    let resident = if host_len > 0 {
        Some(dev.alloc(host_len)?)
    } else {
        None
    };
    let base = resident.as_ref().map_or(0, |r| r.ptr);
    let mut placed = Vec::with_capacity(inputs.len());
    let mut pieces: Vec<&[u8]> = Vec::new();
    let mut targets: Vec<u64> = Vec::new();
    for (i, &off) in inputs.iter().zip(&offsets) {
        placed.push(match *i {
            Input::Host(b) => {
                for (at, piece) in cut(b) {
                    if !piece.is_empty() {
                        pieces.push(piece);
                        targets.push(base + (off + at) as u64);
                    }
                }
                OnDevice {
                    ptr: base + off as u64,
                    len: b.len(),
                }
            }
            Input::Device { ptr, len } => OnDevice { ptr, len },
        });
    }
    copy_in(dev, &pieces, &targets)?;
    Ok((placed, resident))
}

#[cfg(test)]
mod tests {
    use super::{groups, DescSide, Input};

    #[test]
    fn desc_side_follows_the_env_var() {
        use std::env::VarError::NotPresent;
        assert_eq!(DescSide::pick(Err(NotPresent)), Ok(DescSide::Device));
        assert_eq!(DescSide::pick(Ok("device".into())), Ok(DescSide::Device));
        assert_eq!(DescSide::pick(Ok("host".into())), Ok(DescSide::Host));
        let bad = DescSide::pick(Ok("gpu".into())).unwrap_err();
        assert!(
            bad.contains("GVAULT_FUSED_DESC") && bad.contains("gpu"),
            "{bad}"
        );
    }

    #[test]
    fn groups_count_resident_bytes_at_a_quarter() {
        let gib = 1usize << 30;
        let resident: Vec<Input<'_>> = (0..5)
            .map(|k| Input::Device {
                ptr: (k * gib) as u64,
                len: gib,
            })
            .collect();
        let sizes: Vec<usize> = groups(&resident).map(|g| g.len()).collect();
        assert_eq!(sizes, vec![4, 1]);
        let bytes = vec![0u8; 3 << 20];
        let host = [Input::Host(&bytes[..]), Input::Host(&bytes[..])];
        // small host inputs share a group; every input lands in exactly one
        assert_eq!(groups(&host).map(|g| g.len()).sum::<usize>(), 2);
    }
}
