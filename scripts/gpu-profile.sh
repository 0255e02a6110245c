#!/usr/bin/env bash
# Hardware counters for the kernels that miss their targets (plain and
# fused-CRC-32C BLAKE3 of chunks), when Nsight Compute is on the GPU machine.
# Run after `scripts/gpu-check.sh --build`; writes under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gvault-gpu-out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then
  echo "ncu not found; skipping the kernel profile" | tee "$OUT/profile.txt"
  exit 0
fi
export GVAULT_KERNEL_CACHE=/tmp/gvault-kernels
for k in blake3_chunks blake3_chunks_crc32c_rep2; do
  timeout 120 "$NCU" --kernel-name "$k" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats \
    .gpu/gvault bench primitive --no-single-core --min-ms 1 --ops fastcdc-blake3,fastcdc-blake3-crc32c \
    --sizes 256M --total 256M 2>&1 | tail -120 | tee -a "$OUT/profile.txt"
done
