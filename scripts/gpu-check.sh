#!/usr/bin/env bash
# GPU tests and benchmarks, run on the GPU machine from binaries built
# elsewhere (it has no cargo):
#   here:  scripts/gpu-check.sh --build     (fills .gpu/ with release binaries)
#   there: scripts/gpu-check.sh             (writes results under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--build" ]; then
  set -e
  mkdir -p .gpu
  cargo build --release -p gvault
  cp target/release/gvault .gpu/
  bin=$(cargo test --release -p gvault-accel --test gpu --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import sys,json; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable")]')
  cp "$bin" .gpu/gpu-tests
  bin=$(cargo test --release -p gvault-accel --test gpu_hash --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import sys,json; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable")]')
  cp "$bin" .gpu/gpu-hash-tests
  strip .gpu/* 2>/dev/null || true
  ls -la .gpu
  exit 0
fi

OUT=${OUT:-/tmp/gvault-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export GVAULT_KERNEL_CACHE=/tmp/gvault-kernels
B=.gpu
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nproc; date -u; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
$B/gvault doctor 2>&1 | tee "$OUT/doctor.txt"
$B/gvault doctor --kernels 2>&1 | tee -a "$OUT/doctor.txt" || status=1
# Every GPU test binary, with each table layout of the table ciphers.
for t in $B/*-tests; do
  for tables in narrow wide; do
    echo "== $t (GVAULT_GPU_TABLES=$tables)"
    GVAULT_GPU_TABLES=$tables $t --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/gpu-tests.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
done
[ "${GPU_CHECK_TESTS_ONLY:-0}" = 1 ] && { echo "gpu-check status: $status"; exit $status; }
$B/gvault bench link --quick 2>&1 | tee "$OUT/link.txt"
ciphers=aes256ctr,aes256gcm-seal,aes256gcm-open,tea-ctr,blowfish-ctr
for tables in narrow wide; do
  GVAULT_GPU_TABLES=$tables $B/gvault bench primitive --ops aes256ctr,blowfish-ctr --sizes 1M,64M,1G \
    --min-ms 300 --json > "$OUT/primitive-gpu-$tables.json" 2> "$OUT/primitive-gpu-$tables.err"
done
$B/gvault bench primitive --ops $ciphers --sizes 64K,1M,16M,256M,1G --min-ms 300 2>&1 | tee "$OUT/primitive-gpu.txt"
$B/gvault bench primitive --quick --reference 2>&1 | tee "$OUT/primitive-cpu.txt"
echo "gpu-check status: $status"
exit $status
