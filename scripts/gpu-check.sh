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
  # The store's per-operation cost probes (phase costs).
  cargo build --release -p gvault-store --example read_cost --example write_cost
  cp target/release/examples/read_cost target/release/examples/write_cost .gpu/
  strip .gpu/* 2>/dev/null || true
  ls -la .gpu
  exit 0
fi

OUT=${OUT:-/tmp/gvault-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export GVAULT_KERNEL_CACHE=/tmp/gvault-kernels
# The GPU tests are #[ignore]d (a GPU-less `cargo test` reports them as
# ignored): run them here with --include-ignored, and fail, not skip, when
# the GPU cannot be used.
export GVAULT_REQUIRE_GPU=1
B=.gpu
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nproc; date -u; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
$B/gvault doctor 2>&1 | tee "$OUT/doctor.txt"
$B/gvault doctor --kernels 2>&1 | tee -a "$OUT/doctor.txt" || status=1
# The host's layout (NUMA nodes, cores, caches), for reading its noise.
{ lscpu; for n in /sys/devices/system/node/node*; do echo "$n: cpus $(cat $n/cpulist)"; done; } \
  > "$OUT/topology.txt" 2>&1
# BENCH_PIN=node0 runs the store benchmarks (lsm, costs) on NUMA node 0's
# CPUs and memory only; BENCH_PIN="taskset -c 0-7" (any prefix) as given.
PIN=
case "${BENCH_PIN:-}" in
  "") ;;
  node0)
    cpus=$(cat /sys/devices/system/node/node0/cpulist 2>/dev/null || echo 0-$(($(nproc) - 1)))
    if command -v numactl >/dev/null; then PIN="numactl --cpunodebind=0 --membind=0"; else PIN="taskset -c $cpus"; fi ;;
  *) PIN=$BENCH_PIN ;;
esac
[ -n "$PIN" ] && echo "store benchmarks run under: $PIN" | tee -a "$OUT/topology.txt"
# Phases (GPU_CHECK_PHASES, default all but gcm and fused): tests, ciphers, gcm,
# gear, slots, hashes, fused, group4g, many, wide, e2e, trace, split, auto, lsm,
# crc, costs.
phases=${GPU_CHECK_PHASES:-"tests ciphers hashes many auto"}
has() { case " $phases " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has tests; then
  # The cipher tests with each table layout of the table ciphers.
  for tables in ${TEST_TABLES:-narrow wide}; do
    echo "== gpu-tests (GVAULT_GPU_TABLES=$tables)"
    GVAULT_GPU_TABLES=$tables $B/gpu-tests --include-ignored --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/gpu-tests.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
  # The GCM tests again with each GHASH kernel forced (the default picks
  # by segment length, so each test exercises one of them).
  for ghash in narrow wide; do
    echo "== gpu-tests gcm (GVAULT_GCM_GHASH=$ghash)"
    GVAULT_GCM_GHASH=$ghash $B/gpu-tests --include-ignored gcm --test-threads=1 2>&1 | tee -a "$OUT/gpu-tests.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
  $B/gpu-hash-tests --include-ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/gpu-hash-tests.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # and the chunking tests with the gear pass's direct loads (the default
  # stages them through shared memory)
  echo "== gpu-hash-tests (GVAULT_GEAR_VARIANT=direct)" | tee -a "$OUT/gpu-hash-tests.txt"
  GVAULT_GEAR_VARIANT=direct $B/gpu-hash-tests --include-ignored --test-threads=1 2>&1 | tee -a "$OUT/gpu-hash-tests.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # and the fused CRC-32C tests with each table scheme forced (the default
  # run above used the device's default)
  for crc in slice8 rep2 rep4; do
    echo "== gpu-hash-tests crc32c (GVAULT_B3_CRC=$crc)" | tee -a "$OUT/gpu-hash-tests.txt"
    GVAULT_B3_CRC=$crc $B/gpu-hash-tests --include-ignored crc32c --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/gpu-hash-tests.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
P="$B/gvault bench primitive --no-single-core --min-ms 200"
if has ciphers; then
  $B/gvault bench link --quick 2>&1 | tee "$OUT/link.txt"
  # Kernel variants side by side (the defaults are the faster of each).
  for tables in narrow wide; do
    GVAULT_GPU_TABLES=$tables $P --ops aes256ctr,aes256gcm-seal,blowfish-ctr --sizes 64M,1G \
      2>&1 | tee "$OUT/ciphers-$tables.txt"
  done
  $P --pinned --ops aes256ctr,aes256gcm-seal,aes256gcm-open,blowfish-ctr \
    --sizes 64K,1M,16M,256M,1G 2>&1 | tee "$OUT/ciphers.txt"
fi
if has gcm; then
  $B/gvault bench link --quick 2>&1 | tee "$OUT/link.txt"
  $P --pinned --ops aes256ctr,aes256gcm-seal,aes256gcm-open --sizes 16M,256M,1G 2>&1 | tee "$OUT/gcm.txt"
  # GHASH piece length (blocks per thread) cap, when GCM_PIECE_CAPS names
  # some (e.g. "128 256 512 1024"): the power step is amortised over longer pieces.
  # GHASH kernel side by side (wide: a warp per piece, coalesced loads).
  for ghash in narrow wide; do
    echo "== GVAULT_GCM_GHASH=$ghash" | tee -a "$OUT/gcm-ghash.txt"
    GVAULT_GCM_GHASH=$ghash $P --ops aes256gcm-seal,aes256gcm-open --sizes 1G 2>&1 | tee -a "$OUT/gcm-ghash.txt"
  done
  for cap in ${GCM_PIECE_CAPS:-}; do
    echo "== GVAULT_GCM_PIECE_MAX=$cap" | tee -a "$OUT/gcm-pieces.txt"
    GVAULT_GCM_PIECE_MAX=$cap $P --ops aes256gcm-seal,aes256gcm-open --sizes 1G 2>&1 | tee -a "$OUT/gcm-pieces.txt"
  done
fi
if has hashes; then
  $P --pinned --ops blake3,blake3-keyed,sha256,md5,crc32,crc32c,fastcdc,fastcdc-blake3 \
    --sizes 64K,1M,16M,256M,1G 2>&1 | tee "$OUT/hashes.txt"
fi
if has gear; then
  # The gear pass's two load paths side by side, with its phase trace.
  for v in staged direct; do
    echo "== GVAULT_GEAR_VARIANT=$v" | tee -a "$OUT/gear.txt"
    GVAULT_GEAR_VARIANT=$v $P --ops fastcdc,fastcdc-blake3 --sizes 1G 2>&1 | tee -a "$OUT/gear.txt"
    GVAULT_GEAR_VARIANT=$v GVAULT_GPU_TRACE=1 $B/gvault bench primitive --no-single-core --min-ms 1 \
      --ops fastcdc-blake3 --sizes 1G --total 1G 2>&1 | grep -E "trace" | tail -12 | tee -a "$OUT/gear.txt"
  done
fi
if has crc; then
  # The fused CRC-32C's table schemes side by side (kernels/README.md,
  # "Fused CRC-32C"), device-resident 1 GiB x 4, next to the plain fused job.
  for crc in slice8 rep2 rep4; do
    echo "== GVAULT_B3_CRC=$crc" | tee -a "$OUT/crc.txt"
    GVAULT_B3_CRC=$crc $P --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes 1G 2>&1 | tee -a "$OUT/crc.txt"
  done
  # The fused job's chunk list built on the host (session 6) and on the
  # device (default), side by side, with and without CRC, then each side's
  # phase trace and the fused tests under the host side (the tests phase ran
  # the device side).
  for side in device host; do
    echo "== GVAULT_FUSED_DESC=$side" | tee -a "$OUT/crc.txt"
    GVAULT_FUSED_DESC=$side $P --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes 1G 2>&1 | tee -a "$OUT/crc.txt"
    GVAULT_FUSED_DESC=$side GVAULT_GPU_TRACE=1 $B/gvault bench primitive --no-single-core --min-ms 1 \
      --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes 1G 2>&1 | grep "^trace" | tail -24 | tee -a "$OUT/crc.txt"
  done
  echo "== gpu-hash-tests chunk_digest (GVAULT_FUSED_DESC=host)" | tee -a "$OUT/crc.txt"
  GVAULT_FUSED_DESC=host $B/gpu-hash-tests --include-ignored chunk_digest --test-threads=1 2>&1 | tee -a "$OUT/crc.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has slots; then
  # Staging slots 3 (default) vs 4 for host jobs, with the staging loop's
  # host time by phase (GVAULT_GPU_TRACE=2).
  for n in 3 4; do
    echo "== GVAULT_GPU_SLOTS=$n" | tee -a "$OUT/slots.txt"
    GVAULT_GPU_SLOTS=$n $P --ops sha256,md5 --sizes 1M --total 4G 2>&1 | tee -a "$OUT/slots.txt"
    GVAULT_GPU_SLOTS=$n $P --pinned --ops aes256ctr,aes256gcm-seal --sizes 1G 2>&1 | tee -a "$OUT/slots.txt"
    GVAULT_GPU_SLOTS=$n GVAULT_GPU_TRACE=2 $B/gvault bench primitive --no-single-core --min-ms 1 \
      --ops sha256 --sizes 1M --total 4G 2>&1 | grep "^stage" | tail -3 | tee -a "$OUT/slots.txt"
  done
fi
if has fused; then
  $P --pinned --ops ${FUSED_OPS:-blake3,fastcdc,fastcdc-blake3,fastcdc-blake3-crc32c} --sizes ${FUSED_SIZES:-1M,256M,1G} 2>&1 | tee "$OUT/fused.txt"
  echo "== GVAULT_FUSED_DESC=host" | tee -a "$OUT/fused.txt"
  GVAULT_FUSED_DESC=host $P --pinned --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes ${FUSED_SIZES:-1M,256M,1G} 2>&1 | tee -a "$OUT/fused.txt"
  $B/gvault bench seed001 --sizes 1M,16M,256M 2>&1 | tee "$OUT/seed001.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has group4g; then
  # The fused job with 4 GiB groups (4 x 1 GiB), which hit an illegal
  # address with the earlier host-resolved chunker.
  GVAULT_FUSED_GROUP_BYTES=4294967296 $P --ops fastcdc-blake3 --sizes 1G 2>&1 | tee "$OUT/group4g.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has many; then
  # SHA-256 and MD5 over many 1 MiB segments (one thread per segment).
  $P --pinned --ops sha256,md5 --sizes 1M --total 4G 2>&1 | tee "$OUT/hashes-many.txt"
  # One thread per segment: the kernel needs ~16 K segments to give every
  # SM scheduler a warp; sweep the segment count.
  for total in 16G 32G; do
    $P --ops sha256 --sizes 1M --total $total 2>&1 | tee -a "$OUT/hashes-many.txt"
  done
  # Seed 001: sliding-window MD5 (Fig. 14) and parallel Merkle-Damgård.
  $B/gvault bench seed001 --sizes 1M,16M,256M 2>&1 | tee "$OUT/seed001.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has wide; then
  # SHA-256 / MD5 over 4096 x 1 MiB page-locked: rounds of 2D DMA into wide
  # device buffers (gpu/serial_pinned.rs) by round size; 0 = the staging
  # slots (16 KiB rows at 64 MiB a round). Pageable as the reference.
  for mib in ${WIDE_MIB:-0 64 128 256 512}; do
    echo "== GVAULT_SERIAL_WIDE_MIB=$mib" | tee -a "$OUT/wide.txt"
    GVAULT_SERIAL_WIDE_MIB=$mib $P --pinned --ops sha256,md5 --sizes 1M --total 4G 2>&1 | tee -a "$OUT/wide.txt"
  done
  $P --ops sha256,md5 --sizes 1M --total 4G 2>&1 | tee -a "$OUT/wide.txt"
fi
if has e2e; then
  # Host end to end at 1 GiB next to the link, same run (pinned user memory).
  $B/gvault bench link --quick 2>&1 | tee "$OUT/link-e2e.txt"
  $P --pinned --ops blake3,aes256ctr,aes256gcm-seal,aes256gcm-open --sizes 1G 2>&1 | tee "$OUT/e2e.txt"
fi
if has trace; then
  # Phase timings of the fused job (GVAULT_GPU_TRACE), one 1 GiB segment.
  T="$B/gvault bench primitive --no-single-core --min-ms 1"
  GVAULT_GPU_TRACE=1 $T --ops fastcdc-blake3,fastcdc-blake3-crc32c,fastcdc --sizes 1G --total 1G 2>&1 \
    | tail -60 | tee "$OUT/trace.txt"
  # and of GCM on device-resident data (the kernel column's job)
  GVAULT_GPU_TRACE=1 $T --ops aes256gcm-seal --sizes 1G --total 4G 2>&1 \
    | tail -30 | tee -a "$OUT/trace.txt"
fi
# The auto backend's cost model: a carried one (COST_MODEL=path, from an
# earlier call on this kind of machine), else calibrated here once.
calibrated=
calibrate_once() {
  [ -n "$calibrated" ] && return 0
  calibrated=1
  export GVAULT_COST_MODEL="$OUT/cost-model.json"
  if [ -n "${COST_MODEL:-}" ]; then
    cp "$COST_MODEL" "$GVAULT_COST_MODEL"
  else
    { time $B/gvault bench calibrate; } 2>&1 | tee "$OUT/calibrate.txt"
  fi
  $B/gvault doctor 2>&1 | tee "$OUT/doctor-model.txt"
}
if has split; then
  # Issue 5: each 4-segment GCM job split at every segment boundary, beside
  # the plan auto picks, and cpu-all timed twice (the host's A/A noise).
  calibrate_once
  $B/gvault bench primitive --no-single-core --min-ms ${SPLIT_MIN_MS:-300} --pinned --backend auto \
    --split-sweep --control --ops ${SPLIT_OPS:-aes256gcm-seal,aes256gcm-open} \
    --sizes ${SPLIT_SIZES:-16M,64M,256M,1G} 2>&1 | tee "$OUT/split.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has auto; then
  calibrate_once
  # SHA-256 runs to 1 GiB: its GPU columns (one thread per segment, ~0.13
  # GB/s, ~32 s a run at 1 GiB x 4) are timed by their warm-up run alone
  # (`bench primitive`'s hopeless-column rule), and the SHA-256 half takes
  # no --split-sweep (AUTO_SERIAL_FLAGS; split columns of a serial hash
  # only repeat the GPU's time).
  # AUTO_OPS=none or AUTO_SERIAL_OPS=none skips that half (two calls when
  # one would pass the device's 10-minute limit); each half saves its JSON,
  # and `bench plot` draws whatever halves this call has.
  A="$B/gvault bench primitive --no-single-core --min-ms ${AUTO_MIN_MS:-200} --pinned --backend auto ${AUTO_FLAGS:-}"
  saved=()
  if [ "${AUTO_OPS:-}" != none ]; then
    $A --ops ${AUTO_OPS:-aes256gcm-seal,aes256gcm-open,blake3} --sizes ${AUTO_SIZES:-512,4K,64K,1M,16M,64M,256M,1G} \
      --save "$OUT/auto-main.json" 2>&1 | tee -a "$OUT/auto.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] && saved+=(--from "$OUT/auto-main.json") || status=1
  fi
  if [ "${AUTO_SERIAL_OPS:-}" != none ]; then
    $B/gvault bench primitive --no-single-core --min-ms ${AUTO_MIN_MS:-200} --pinned --backend auto ${AUTO_SERIAL_FLAGS:-} \
      --ops ${AUTO_SERIAL_OPS:-sha256} --sizes ${AUTO_SERIAL_SIZES:-512,4K,64K,1M,16M,64M,256M,1G} \
      --save "$OUT/auto-serial.json" 2>&1 | tee -a "$OUT/auto.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] && saved+=(--from "$OUT/auto-serial.json") || status=1
  fi
  [ ${#saved[@]} -gt 0 ] && $B/gvault bench plot "${saved[@]}" --out "$OUT/auto.png" \
    --title "gvault bench primitive --backend auto --pinned, $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
fi
if has lsm; then
  # Encryption at rest on this host (issue 7): db_bench workloads with and
  # without encryption, then re-encryption against a disk copy.
  D=${LSM_DIR:-/tmp/gvault-lsm}
  mkdir -p "$D"
  calibrate_once
  $PIN $B/gvault bench lsm --encrypt ${LSM_ENCRYPT:-none,cpu,auto} --value-sizes ${LSM_SIZES:-100,4K,64K} --sync off \
    --max-bytes ${LSM_BYTES:-256M} --workloads ${LSM_WORKLOADS:-fillseq,fillrandom,overwrite,readrandom,readseq} \
    ${LSM_READS:+--reads $LSM_READS} --repeat ${LSM_REPEAT:-2} --dir "$D" 2>&1 | tee -a "$OUT/lsm.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  if [ "${LSM_REENCRYPT_GIB:-10}" != 0 ]; then
    $B/gvault bench lsm --reencrypt ${LSM_REENCRYPT_GIB:-10} --dir "$D" 2>&1 | tee "$OUT/reencrypt.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi
if has costs; then
  # Per-operation CPU cost of the store's reads and writes, plain against
  # encrypted, by the thread's own CPU clock (issue 7: where a 4 KiB
  # operation's time goes on this host).
  D=${LSM_DIR:-/tmp/gvault-lsm}
  mkdir -p "$D"
  for v in ${COST_SIZES:-4096 65536}; do
    n=${COST_NUM:-$((160000000 / v))}
    READ_COST_DIR=$D $PIN $B/read_cost $v $n ${COST_ROUNDS:-7} 2>&1 | tee -a "$OUT/costs.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    if [ "${COST_WRITE:-1}" = 1 ]; then
      WRITE_COST_DIR=$D $PIN $B/write_cost $v $n ${COST_ROUNDS:-7} 2>&1 | tee -a "$OUT/costs.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    fi
  done
fi
echo "gpu-check status: $status"
exit $status
