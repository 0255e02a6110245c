#!/usr/bin/env bash
# Session 6's experiments on the GPU machine (after gpu-check.sh --build):
# SHA-256 over 4096 x 1 MiB pinned with each share of the strided 2D DMA,
# then Nsight Compute on the CRC kernel, then the auto phase.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gvault-gpu-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GVAULT_KERNEL_CACHE=/tmp/gvault-kernels
P=".gpu/gvault bench primitive --no-single-core --min-ms 200"
for share in ${SHARES:-100 60 40 0}; do
  echo "== GVAULT_STRIDED_SHARE=$share" | tee -a "$OUT/share.txt"
  GVAULT_STRIDED_SHARE=$share $P --pinned --ops sha256,md5 --sizes 1M --total 4G 2>&1 | tail -2 | tee -a "$OUT/share.txt"
  GVAULT_STRIDED_SHARE=$share GVAULT_GPU_TRACE=2 .gpu/gvault bench primitive --no-single-core --min-ms 1 \
    --pinned --ops sha256 --sizes 1M --total 4G 2>&1 | grep "^stage" | tail -2 | tee -a "$OUT/share.txt"
done
[ "${PROFILE:-1}" = 1 ] && scripts/gpu-profile.sh > /dev/null 2>&1
GPU_CHECK_PHASES="${PHASES:-auto}" scripts/gpu-check.sh > "$OUT/check-log.txt" 2>&1
rm -f "$OUT/machine.txt" "$OUT/doctor.txt"
