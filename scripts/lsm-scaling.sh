#!/usr/bin/env bash
# Issue 30's read-scaling run: readrandom and readseq on 1..16 threads
# against a cached, fully compacted store of each value size, plain and
# AES-256-GCM (CPU), with scaling over one thread, where the workers' time
# goes (--profile) and the space after compaction. Runs on the GPU machine
# from a binary built elsewhere (it has no cargo):
#   here:  scripts/lsm-scaling.sh --build   (copies the release gvault into .gpu/)
#   there: scripts/lsm-scaling.sh           (tables to stdout and $OUT/lsm-scaling.txt,
#                                            JSON to $OUT/lsm-scaling-<size>.json)
# With the defaults it took 4 min on the 2-core development machine (100 B:
# 143 s, of which the four fills and compactions of 256 MiB took ~90 s;
# 4 KiB and 64 KiB: 50 s each); the timed part is fixed at sizes x 2
# workloads x 5 thread counts x 2 modes x repeat x SCALING_SECONDS = 120 s.
# Knobs (env):
#   SCALING_SIZES    value sizes in bytes            (100 4096 65536)
#   SCALING_MIB      key+value MiB per store         (256; --num follows from it)
#   SCALING_THREADS  thread counts                   (1,2,4,8,16)
#   SCALING_ENCRYPT  encryption modes                (none,cpu)
#   SCALING_SECONDS  seconds each thread count reads (1; --duration)
#   SCALING_REPEAT   stores per size and mode        (2; rows are medians)
#   LSM_DIR          where the stores go             (/tmp/gvault-lsm; use a real disk)
#   BENCH_PIN        a prefix such as "taskset -c 0-15" or "numactl --cpunodebind=0 --membind=0"
#   SCALING_BINS     binaries to compare, side by side (".gpu/gvault"); each
#                    runs every size in turn, its output tagged by its name
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--build" ]; then
  set -e
  mkdir -p .gpu
  cargo build --release -p gvault
  cp target/release/gvault .gpu/
  strip .gpu/gvault 2>/dev/null || true
  ls -la .gpu/gvault
  exit 0
fi

BINS=${SCALING_BINS:-.gpu/gvault}
for B in $BINS; do
  if [ ! -x "$B" ]; then
    echo "no $B: run scripts/lsm-scaling.sh --build on the build machine first" >&2
    exit 2
  fi
done
OUT=${OUT:-/tmp/gvault-lsm-scaling}
D=${LSM_DIR:-/tmp/gvault-lsm}
mkdir -p "$OUT" "$D"
{ nproc; lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|NUMA node)'; free -g 2>/dev/null; date -u; } \
  > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
status=0
for size in ${SCALING_SIZES:-100 4096 65536}; do
  for B in $BINS; do
    tag=$(basename "$B")
    num=$(( ${SCALING_MIB:-256} * 1048576 / (16 + size) ))
    cmd=(${BENCH_PIN:-} "$B" bench lsm --workloads readrandom,readseq --value-sizes "$size" --num "$num"
         --threads "${SCALING_THREADS:-1,2,4,8,16}" --duration "${SCALING_SECONDS:-1}"
         --repeat "${SCALING_REPEAT:-2}" --encrypt "${SCALING_ENCRYPT:-none,cpu}" --profile
         --dir "$D" --save "$OUT/lsm-scaling-$tag-$size.json")
    echo "== $tag: ${cmd[*]}" | tee -a "$OUT/lsm-scaling.txt"
    start=$(date +%s)
    "${cmd[@]}" 2>&1 | tee -a "$OUT/lsm-scaling.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "== $tag $size B: $(( $(date +%s) - start )) s" | tee -a "$OUT/lsm-scaling.txt"
  done
done
echo "lsm-scaling status: $status"
exit $status
