#!/usr/bin/env bash
# gvault on the GPU machine: GPU tests, benchmarks and profiles, run from
# binaries built here (the GPU machine has no cargo).
#
#   here:   scripts/gpu.sh --build        release binaries into .gpu/ (git-ignored;
#                                         the device tool carries it: carry [".gpu"])
#   there:  scripts/gpu.sh [PHASE...]     from the repository root; results under $OUT
#   here:   GPU_DRY_RUN=1 scripts/gpu.sh PHASE...
#                                         print each command a phase would run, run none
#
# With no PHASE it runs `tests primitive auto`. Phases run in the order given.
# Exit status 1 if any command failed (a failed test, a benchmark that
# errored), 2 on usage errors. Each phase appends to one text file under
# $OUT (default /tmp/gvault-gpu-out); every call also writes machine.txt
# (GPU, driver, cores, NUMA layout, memory, `gvault doctor`, kernel builds).
# One call of the device tool runs at most 10 minutes: give it one or two
# phases; `variants` and `seeds` take their own selection (VARIANTS, SEEDS).
#
# Phases, with their environment knobs (defaults in brackets) and outputs:
#
#   tests      The #[ignore]d GPU tests (`--include-ignored`, GVAULT_REQUIRE_GPU=1:
#              a GPU that cannot be used fails them), once per kernel variant:
#              cipher tests with each table layout, GCM tests with each GHASH
#              kernel, hash and chunking tests with the default and the direct
#              gear loads, fused CRC-32C tests with each table scheme, fused
#              chunk-digest tests with the chunk list built on the host, the
#              CAS backing up one tree through the CPU then the GPU (same
#              chunks), and a fused job over 4 GiB groups (once an illegal address).
#              TEST_TABLES [narrow wide].                       -> tests.txt
#   primitive  `bench link --quick`, then `bench primitive --pinned` (cpu-all, gpu,
#              gpu-pinned, gpu-kernel columns) over the ciphers and the hashes
#              and chunking ops at 64 KiB-1 GiB, and SHA-256 / MD5 over many
#              1 MiB segments (4, 16 and 32 GiB a job: one GPU thread a segment).
#              PRIMITIVE_OPS, PRIMITIVE_SIZES, PRIMITIVE_TOTAL, PRIMITIVE_FLAGS:
#              with PRIMITIVE_OPS set, one sweep of those ops instead (sizes
#              [64K,1M,16M,256M,1G], flags [--pinned]).         -> primitive.txt
#   variants   Kernel variants side by side, one environment setting at a time,
#              each with the ops it changes. VARIANTS [all], any of:
#                tables  GVAULT_GPU_TABLES=narrow|wide: AES-CTR, GCM, Blowfish
#                ghash   GVAULT_GCM_GHASH=narrow|wide: GCM seal/open 1 GiB
#                pieces  GVAULT_GCM_PIECE_MAX in GCM_PIECE_CAPS [128 256 512 1024]
#                gear    GVAULT_GEAR_VARIANT=staged|direct, with the phase trace
#                crc     GVAULT_B3_CRC=slice8|rep2|rep4: fused CRC-32C
#                desc    GVAULT_FUSED_DESC=device|host: fused chunk list, with trace
#                slots   GVAULT_GPU_SLOTS=3|4, with the staging loop's trace
#                wide    GVAULT_SERIAL_WIDE_MIB in WIDE_MIB [0 64 128 256 512]
#                share   GVAULT_STRIDED_SHARE in SHARES [100 60 40 0], with trace
#              All of them take more than one call.             -> variants.txt
#   cas        `bench cas` (seed 001 §4 on the repository): the issue's targets on one
#              CAS_SIZE [16G] incompressible file (cpu and auto, FastCDC), repositories
#              on /dev/shm and on CAS_DISK_DIR [/var/tmp], then the seed's workloads
#              (different, similar, checkpoint, tree) at CAS_SMALL [1G] with cpu, auto
#              and the CA-Infinite oracle, content-defined and fixed chunks.
#              CAS_BACKENDS [cpu,auto] for the single file; CAS_DISK_DIR empty: tmpfs
#              only; CAS_SEED001=0 skips the seed's workloads; CAS_BASELINE=BINARY
#              runs the single file with another gvault first (an A/B in one call).
#                                        -> cas.txt, cas-single.json, cas-seed001.json, cas.png
#   profile    Phase timings (GVAULT_GPU_TRACE=1) of the fused job and of GCM on
#              device-resident data, then Nsight Compute counters of
#              PROFILE_KERNELS [blake3_chunks blake3_chunks_crc32c_rep2] when
#              ncu is installed (skipped, with a line saying so, when not).
#                                                               -> profile.txt
#   auto       The auto backend: `bench calibrate` (or the model in COST_MODEL, a
#              cost-model.json from an earlier call on this kind of machine),
#              then `bench primitive --pinned --backend auto` in two halves, each
#              saved as JSON and drawn together by `bench plot`:
#                main    AUTO_OPS [aes256gcm-seal,aes256gcm-open,blake3],
#                        AUTO_SIZES [512,4K,64K,1M,16M,64M,256M,1G], AUTO_FLAGS
#                serial  AUTO_SERIAL_OPS [sha256], AUTO_SERIAL_SIZES [as AUTO_SIZES],
#                        AUTO_SERIAL_FLAGS (SHA-256's GPU columns are timed by
#                        their warm-up run alone, ~32 s at 1 GiB x 4)
#              AUTO_OPS=none / AUTO_SERIAL_OPS=none skips a half; AUTO_MIN_MS [200].
#              The forced-split sweep with the A/A control:
#                AUTO_FLAGS="--split-sweep --control" AUTO_MIN_MS=300 \
#                AUTO_OPS=aes256gcm-seal,aes256gcm-open AUTO_SIZES=16M,64M,256M,1G \
#                AUTO_SERIAL_OPS=none scripts/gpu.sh auto
#                  -> auto.txt, cost-model.json, auto-main.json, auto-serial.json, auto.png
#   lsm        The store with encryption at rest: `bench lsm` db_bench workloads
#              per mode, then re-encryption of a store against a disk copy.
#              LSM_ENCRYPT [none,cpu,auto], LSM_SIZES [100,4K,64K],
#              LSM_WORKLOADS [fillseq,fillrandom,overwrite,readrandom,readseq;
#              seed000-insert,seed000-search,seed000-remove for seed 000 §4.5],
#              LSM_BYTES [256M], LSM_READS, LSM_REPEAT [2], LSM_SYNC [off],
#              LSM_REENCRYPT_GIB [10; 0 skips it]. A mode with auto or gpu
#              calibrates first (or takes COST_MODEL).    -> lsm.txt (+ cost-model.json)
#   costs      Per-operation CPU cost of the store's reads and writes, plain
#              against encrypted, by the thread's own CPU clock (the read_cost
#              and write_cost examples). COST_SIZES [4096 65536], COST_BYTES
#              [160000000 of values a store; COST_NUM sets the entry count
#              instead], COST_ROUNDS [7], COST_WRITE [1; 0 reads only].
#                                                               -> costs.txt
#   scaling    Store reads on 1..16 threads against a cached, fully compacted
#              store per value size, plain and AES-256-GCM (cpu): `bench lsm
#              --workloads readrandom,readseq --threads ... --profile`.
#              SCALING_SIZES [100 4096 65536], SCALING_MIB [256 MiB of key+value
#              per store], SCALING_THREADS [1,2,4,8,16], SCALING_ENCRYPT
#              [none,cpu], SCALING_SECONDS [1], SCALING_REPEAT [2],
#              SCALING_BINS [.gpu/gvault; several binaries run side by side,
#              output tagged by file name]. The defaults take ~4 minutes.
#                                             -> scaling.txt, scaling.json
#   rocks      gvault-store against RocksDB (issue 30): `bench lsm`, then `rocks-lsm` (a
#              benchmark kept outside the repository: rust-rocksdb 0.25.0, RocksDB
#              11.8.1 built from source, the same keys, values, workloads, flags and
#              JSON; its binary and compare.py go in .gpu/ by hand), one after the
#              other with ROCKS_FLAGS [issue 30's table: fillseq, fillrandom,
#              readrandom, readseq; 100 B, 4 KiB, 64 KiB; 1 and 16 threads; 512 MiB
#              cache; medians of 2], then compare.py's gvault/RocksDB table.
#                                 -> rocks.txt, rocks-gvault.json, rocks-rocksdb.json
#   rsa        RSA private-key batches (issue 24): the #[ignore]d tests of
#              crates/accel/tests/rsa_gpu.rs (kernel == CPU emulation word for
#              word, GPU == CPU backend), then `bench rsa` (ops/s against batch
#              size for 1024/2048/4096: 1 core, all cores, openssl speed, GPU end to
#              end, GPU kernel, auto on the calibrated model (or COST_MODEL);
#              sorting 0/1/2-pass). RSA_BENCH_FLAGS
#              [--quick]; saved as JSON too.     -> rsa.txt, rsa.json
#   python     The Python package with the torch installed there (issue 22): the wheel
#              that --build put in .gpu-py/ (carry [".gpu", ".gpu-py"]) installed into
#              /tmp/gvault-site, then python/tests/test_gpu.py (device round trips, link
#              bytes only for new chunks, GPU and CPU paths write the same packs),
#              `gvault bench checkpoint` (the engine alone: save, 5%-changed save,
#              load; device and host paths; CKPT_RUST=0 skips it) and
#              python/bench/checkpoint.py (the same through the package, against
#              torch.save and safetensors; CKPT_PY=0 skips it). CKPT_GIB [20],
#              CKPT_DIR [/tmp/gvault-ckpt], CKPT_SKIP [none], CKPT_GPUS [1; "1,2"
#              runs the GPU path on 1 then 2 GPUs, tensors spread by layer],
#              CKPT_WORKERS [auto: half the cores over the GPUs, 4-16 a GPU;
#              a comma list of counts sweeps].
#                                    -> python.txt, bench-checkpoint.json, checkpoint.json
#   service    The accelerator service (issue 23): the #[ignore]d tests of
#              crates/service/tests/gpu.rs (a GPU daemon against the CPU for every
#              op, shared buffers registered with the driver; an auto daemon), then
#              `bench service` on the calibrated model (or COST_MODEL): the default
#              sweep (SERVICE_FLAGS), the same with --zero-copy over SERVICE_ZC_SIZES
#              [64K,1M,16M], 64 clients of 4 KiB AES-GCM under one key
#              (--shared-key), and that on daemons running every job on the GPU
#              (--accel gpu, seed 004's setting), each saved as JSON.
#                      -> service.txt, service*.json, service.png, service-zc.png
#   multi      Several GPUs of one host (issue 28; an x2/x4 kind): the accel spread
#              test, the service's GPU tests, `bench primitive --every-gpu` (one GPU
#              against every GPU at once, end to end and device-resident) over
#              MULTI_PRIM_OPS [aes256gcm-seal,blake3,sha256,fastcdc-blake3] at
#              MULTI_PRIM_SIZES [1M,64M], then `bench service --accel gpu` (every
#              job on a GPU, spread by queue depth) with 64 clients on the first GPU
#              only and on every GPU (CUDA_VISIBLE_DEVICES), MULTI_OPS
#              [sha256,aes256gcm-seal,fastcdc-blake3,rsa-private] at MULTI_SIZES
#              [64K,1M]; MULTI_SERVICE=0 skips the service part.
#                                                  -> multi.txt, multi-*.json
#   seeds      The seeds' measurements at their shapes (docs/seeds.md says which
#              table or figure each reproduces). SEEDS [000 000-lsm 001 002 003]:
#                000      seed 000 Tables 4.4-4.9: CRC32 and TEA-CTR, one job of
#                         4 and of 262144 512-byte blocks, 1 core, all cores,
#                         GPU end to end and kernel only
#                000-lsm  seed 000 §4.5 (Tables 4.10-4.16): `bench lsm --seed-000`,
#                         none, cpu, gpu, auto and their index-only twins
#                001      seed 001 Fig. 4 and Fig. 14: `bench seed001`
#                002      seed 002 Fig. 5: AES-256-CTR over 1-16 MiB
#                003      seed 003 Table I: Blowfish-CTR over 4 KiB-256 MiB
#                                                               -> seeds.txt
#
# Knobs of every phase: OUT (results), LSM_DIR [/tmp/gvault-lsm; the store
# benchmarks' stores, use a real disk], BENCH_PIN (prefix for the store
# benchmarks lsm, costs, scaling: "node0" runs them on NUMA node 0's CPUs and
# memory, anything else is used as given, e.g. "taskset -c 0-7").
#
# The journal's older commands name the phases of the script this one
# replaced (gpu-check.sh): its ciphers, hashes, many, e2e and fused phases are
# `primitive` (or PRIMITIVE_OPS), gcm/gear/crc/slots/wide are `variants`,
# trace is `profile`, split is `auto` with the flags above, group4g is part
# of `tests`; lsm-scaling.sh is `scaling`.
set -uo pipefail
cd "$(dirname "$0")/.."

B=.gpu
ALL_PHASES="tests primitive variants profile auto lsm costs scaling rocks seeds cas rsa python service multi"
ALL_VARIANTS="tables ghash pieces gear crc desc slots wide share"
ALL_SEEDS="000 000-lsm 001 002 003"

# The executable of one test target (CRATE TARGET): cargo names it in its
# JSON messages when asked to build without running.
test_binary() {
  local bin
  bin=$(cargo test --release -p "$1" --test "$2" --no-run --message-format=json |
    python3 -c 'import sys, json
for m in map(json.loads, sys.stdin):
    if m.get("executable"): print(m["executable"])') || return 1
  [ -n "$bin" ] || { echo "cargo named no executable for $1 --test $2" >&2; return 1; }
  echo "$bin"
}

if [ "${1:-}" = "--build" ]; then
  set -e
  mkdir -p "$B"
  cargo build --release -p gvault
  cp target/release/gvault "$B/"
  bin=$(test_binary gvault-accel gpu)
  cp "$bin" "$B/gpu-tests"
  bin=$(test_binary gvault-accel gpu_hash)
  cp "$bin" "$B/gpu-hash-tests"
  bin=$(test_binary gvault-cas gpu_chunking)
  cp "$bin" "$B/cas-gpu-tests"
  bin=$(test_binary gvault-accel rsa_gpu)
  cp "$bin" "$B/rsa-gpu-tests"
  bin=$(test_binary gvault-service gpu)
  cp "$bin" "$B/service-gpu-tests"
  cargo build --release -p gvault-store --example read_cost --example write_cost
  cp target/release/examples/read_cost target/release/examples/write_cost "$B/"
  strip "$B"/* 2>/dev/null || true
  ls -la "$B"
  # The Python package's wheel for the python phase (its python3 has torch).
  rm -rf .gpu-py
  scripts/python.sh --wheel .gpu-py
  exit 0
fi

usage() {
  echo "usage: scripts/gpu.sh --build | scripts/gpu.sh [PHASE...]" >&2
  echo "phases: $ALL_PHASES (see the header of scripts/gpu.sh)" >&2
  exit 2
}
# PICK NAME LIST: whether NAME is one of the words of LIST.
pick() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(tests primitive auto)
for p in "${phases[@]}"; do
  case "$p" in -h | --help) usage ;; esac
  pick "$p" "$ALL_PHASES" || { echo "unknown phase: $p" >&2; usage; }
done
# VARIANTS and SEEDS: words separated by spaces or commas.
variants=${VARIANTS:-$ALL_VARIANTS}
variants=${variants//,/ }
[ "$variants" = all ] && variants=$ALL_VARIANTS
for v in $variants; do pick "$v" "$ALL_VARIANTS" || { echo "unknown variant: $v (VARIANTS: $ALL_VARIANTS)" >&2; exit 2; }; done
seeds=${SEEDS:-$ALL_SEEDS}
seeds=${seeds//,/ }
for s in $seeds; do pick "$s" "$ALL_SEEDS" || { echo "unknown seed item: $s (SEEDS: $ALL_SEEDS)" >&2; exit 2; }; done

DRY=${GPU_DRY_RUN:-}
OUT=${OUT:-/tmp/gvault-gpu-out}
D=${LSM_DIR:-/tmp/gvault-lsm}
mkdir -p "$OUT"
if [ -z "$DRY" ]; then
  need=(gvault)
  pick tests "${phases[*]}" && need+=(gpu-tests gpu-hash-tests cas-gpu-tests)
  pick costs "${phases[*]}" && need+=(read_cost write_cost)
  pick rsa "${phases[*]}" && need+=(rsa-gpu-tests)
  pick service "${phases[*]}" && need+=(service-gpu-tests)
  pick multi "${phases[*]}" && need+=(gpu-tests service-gpu-tests)
  if pick python "${phases[*]}" && ! ls .gpu-py/gvault-*.whl >/dev/null 2>&1; then
    echo "no wheel in .gpu-py: run scripts/gpu.sh --build and carry .gpu-py" >&2
    exit 2
  fi
  for f in "${need[@]}"; do
    [ -x "$B/$f" ] || { echo "no $B/$f: run scripts/gpu.sh --build on the build machine and carry .gpu" >&2; exit 2; }
  done
  mkdir -p "$D"
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export GVAULT_KERNEL_CACHE=/tmp/gvault-kernels
export GVAULT_REQUIRE_GPU=1
status=0

# run FILE CMD...: runs CMD, its output on stdout and appended to $OUT/FILE;
# a failure is noted there, sets the exit status and is returned.
run() {
  local f=$OUT/$1 rc
  shift
  echo "== $*" | tee -a "$f"
  [ -n "$DRY" ] && return 0
  "$@" 2>&1 | tee -a "$f"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "== failed with exit status $rc: $*" | tee -a "$f"
    status=1
  fi
  return "$rc"
}
# run_lines FILE PATTERN N CMD...: as run, keeping only the last N output
# lines that match PATTERN (the trace lines of a traced run).
run_lines() {
  local f=$OUT/$1 pat=$2 n=$3 rc
  shift 3
  echo "== $* (last $n lines matching $pat)" | tee -a "$f"
  [ -n "$DRY" ] && return 0
  "$@" 2>&1 | grep -E "$pat" | tail -n "$n" | tee -a "$f"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "== failed with exit status $rc: $*" | tee -a "$f"
    status=1
  fi
  return "$rc"
}

# The machine, for reading the figures: GPU, cores, NUMA nodes, memory.
{
  echo "phases: ${phases[*]}"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  echo "cores: $(nproc)"
  lscpu
  for n in /sys/devices/system/node/node*; do echo "$n: cpus $(cat "$n/cpulist")"; done
  free -g
} > "$OUT/machine.txt" 2>&1
run machine.txt "$B/gvault" doctor
run machine.txt "$B/gvault" doctor --kernels

PIN=()
case "${BENCH_PIN:-}" in
  "") ;;
  node0)
    if command -v numactl >/dev/null; then
      PIN=(numactl --cpunodebind=0 --membind=0)
    else
      PIN=(taskset -c "$(cat /sys/devices/system/node/node0/cpulist 2>/dev/null || echo 0-$(($(nproc) - 1)))")
    fi ;;
  *) read -r -a PIN <<< "$BENCH_PIN" ;;
esac
[ ${#PIN[@]} -gt 0 ] && echo "store benchmarks run under: ${PIN[*]}" | tee -a "$OUT/machine.txt"

# The GPU sweeps time every column at least 200 ms a run and skip one core
# (slow ciphers on one core take minutes); the traced runs need one run.
P=("$B/gvault" bench primitive --no-single-core --min-ms 200)
T=("$B/gvault" bench primitive --no-single-core --min-ms 1)

# The auto backend's cost model, once a call: the one in COST_MODEL, else
# calibrated here. Later phases and calls use $OUT/cost-model.json.
calibrated=
calibrate_once() {
  local f=$1
  [ -n "$calibrated" ] && return 0
  calibrated=1
  export GVAULT_COST_MODEL=$OUT/cost-model.json
  if [ -n "${COST_MODEL:-}" ]; then
    echo "== cost model from $COST_MODEL" | tee -a "$OUT/$f"
    [ -n "$DRY" ] || cp "$COST_MODEL" "$GVAULT_COST_MODEL" || status=1
  else
    local start=$SECONDS
    run "$f" "$B/gvault" bench calibrate
    echo "== calibration took $((SECONDS - start)) s" | tee -a "$OUT/$f"
  fi
  run "$f" "$B/gvault" doctor
}

phase_tests() {
  local f=tests.txt t g c
  for t in ${TEST_TABLES:-narrow wide}; do
    run $f env GVAULT_GPU_TABLES="$t" "$B/gpu-tests" --include-ignored --test-threads=1 --nocapture
  done
  # The default GHASH kernel depends on the segment length; force each.
  for g in narrow wide; do
    run $f env GVAULT_GCM_GHASH=$g "$B/gpu-tests" --include-ignored gcm --test-threads=1
  done
  run $f "$B/gpu-hash-tests" --include-ignored --test-threads=1 --nocapture
  run $f env GVAULT_GEAR_VARIANT=direct "$B/gpu-hash-tests" --include-ignored --test-threads=1
  for c in slice8 rep2 rep4; do
    run $f env GVAULT_B3_CRC=$c "$B/gpu-hash-tests" --include-ignored crc32c --test-threads=1 --nocapture
  done
  run $f env GVAULT_FUSED_DESC=host "$B/gpu-hash-tests" --include-ignored chunk_digest --test-threads=1
  run $f "$B/cas-gpu-tests" --include-ignored --test-threads=1
  run $f env GVAULT_FUSED_GROUP_BYTES=4294967296 "${P[@]}" --ops fastcdc-blake3 --sizes 1G
}

phase_cas() {
  local f=cas.txt disk=${CAS_DISK_DIR-/var/tmp} dirs=(--repo-dir /dev/shm)
  calibrate_once $f
  [ -n "$disk" ] && dirs+=(--repo-dir "$disk")
  if [ -n "${CAS_BASELINE:-}" ]; then
    run $f "$CAS_BASELINE" bench cas --workloads single --size "${CAS_SIZE:-16G}" \
      --backends "${CAS_BACKENDS:-cpu,auto}" --chunkers cdc "${dirs[@]}" --data-dir /dev/shm
  fi
  run $f "$B/gvault" bench cas --workloads single --size "${CAS_SIZE:-16G}" --backends "${CAS_BACKENDS:-cpu,auto}" \
    --chunkers cdc "${dirs[@]}" --data-dir /dev/shm --save "$OUT/cas-single.json"
  [ "${CAS_SEED001:-1}" = 0 ] && return 0
  run $f "$B/gvault" bench cas --workloads different,similar,checkpoint,tree --size "${CAS_SMALL:-1G}" \
    --data-dir /dev/shm --repo-dir /dev/shm --save "$OUT/cas-seed001.json" --plot "$OUT/cas.png"
}

phase_primitive() {
  local f=primitive.txt t
  run $f "$B/gvault" bench link --quick
  if [ -n "${PRIMITIVE_OPS:-}" ]; then
    run $f "${P[@]}" ${PRIMITIVE_FLAGS:---pinned} --ops "$PRIMITIVE_OPS" \
      --sizes "${PRIMITIVE_SIZES:-64K,1M,16M,256M,1G}" ${PRIMITIVE_TOTAL:+--total "$PRIMITIVE_TOTAL"}
    return
  fi
  run $f "${P[@]}" --pinned --ops aes256ctr,aes256gcm-seal,aes256gcm-open,blowfish-ctr \
    --sizes 64K,1M,16M,256M,1G
  run $f "${P[@]}" --pinned \
    --ops blake3,blake3-keyed,sha256,md5,crc32,crc32c,fastcdc,fastcdc-blake3,fastcdc-blake3-crc32c \
    --sizes 64K,1M,16M,256M,1G
  # SHA-256 and MD5 run one GPU thread a segment: the kernel needs ~16 K
  # segments to give every SM scheduler a warp.
  run $f "${P[@]}" --pinned --ops sha256,md5 --sizes 1M --total 4G
  for t in 16G 32G; do
    run $f "${P[@]}" --ops sha256 --sizes 1M --total $t
  done
}

phase_variants() {
  local f=variants.txt v x
  for v in $variants; do
    echo "== variant $v" | tee -a "$OUT/$f"
    case $v in
      tables)
        for x in narrow wide; do
          run $f env GVAULT_GPU_TABLES=$x "${P[@]}" --ops aes256ctr,aes256gcm-seal,blowfish-ctr --sizes 64M,1G
        done ;;
      ghash)
        for x in narrow wide; do
          run $f env GVAULT_GCM_GHASH=$x "${P[@]}" --ops aes256gcm-seal,aes256gcm-open --sizes 1G
        done ;;
      pieces)
        for x in ${GCM_PIECE_CAPS:-128 256 512 1024}; do
          run $f env GVAULT_GCM_PIECE_MAX="$x" "${P[@]}" --ops aes256gcm-seal,aes256gcm-open --sizes 1G
        done ;;
      gear)
        for x in staged direct; do
          run $f env GVAULT_GEAR_VARIANT=$x "${P[@]}" --ops fastcdc,fastcdc-blake3 --sizes 1G
          run_lines $f trace 12 env GVAULT_GEAR_VARIANT=$x GVAULT_GPU_TRACE=1 "${T[@]}" \
            --ops fastcdc-blake3 --sizes 1G --total 1G
        done ;;
      crc)
        for x in slice8 rep2 rep4; do
          run $f env GVAULT_B3_CRC=$x "${P[@]}" --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes 1G
        done ;;
      desc)
        for x in device host; do
          run $f env GVAULT_FUSED_DESC=$x "${P[@]}" --pinned --ops fastcdc-blake3,fastcdc-blake3-crc32c \
            --sizes 1M,256M,1G
          run_lines $f '^trace' 24 env GVAULT_FUSED_DESC=$x GVAULT_GPU_TRACE=1 "${T[@]}" \
            --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes 1G
        done ;;
      slots)
        for x in 3 4; do
          run $f env GVAULT_GPU_SLOTS=$x "${P[@]}" --ops sha256,md5 --sizes 1M --total 4G
          run $f env GVAULT_GPU_SLOTS=$x "${P[@]}" --pinned --ops aes256ctr,aes256gcm-seal --sizes 1G
          run_lines $f '^stage' 3 env GVAULT_GPU_SLOTS=$x GVAULT_GPU_TRACE=2 "${T[@]}" \
            --ops sha256 --sizes 1M --total 4G
        done ;;
      wide)
        # 0 = the staging slots (16 KiB rows, 64 MiB a round); pageable last,
        # as the reference.
        for x in ${WIDE_MIB:-0 64 128 256 512}; do
          run $f env GVAULT_SERIAL_WIDE_MIB="$x" "${P[@]}" --pinned --ops sha256,md5 --sizes 1M --total 4G
        done
        run $f "${P[@]}" --ops sha256,md5 --sizes 1M --total 4G ;;
      share)
        for x in ${SHARES:-100 60 40 0}; do
          run $f env GVAULT_STRIDED_SHARE="$x" "${P[@]}" --pinned --ops sha256,md5 --sizes 1M --total 4G
          run_lines $f '^stage' 2 env GVAULT_STRIDED_SHARE="$x" GVAULT_GPU_TRACE=2 "${T[@]}" \
            --pinned --ops sha256 --sizes 1M --total 4G
        done ;;
    esac
  done
}

phase_profile() {
  local f=profile.txt ncu k
  run_lines $f . 60 env GVAULT_GPU_TRACE=1 "${T[@]}" --ops fastcdc-blake3,fastcdc-blake3-crc32c,fastcdc \
    --sizes 1G --total 1G
  run_lines $f . 30 env GVAULT_GPU_TRACE=1 "${T[@]}" --ops aes256gcm-seal --sizes 1G --total 4G
  ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  if [ -z "$ncu" ]; then
    echo "== ncu not found: no kernel counters" | tee -a "$OUT/$f"
    return
  fi
  for k in ${PROFILE_KERNELS:-blake3_chunks blake3_chunks_crc32c_rep2}; do
    run_lines $f . 120 timeout 120 "$ncu" --kernel-name "$k" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats \
      "${T[@]}" --ops fastcdc-blake3,fastcdc-blake3-crc32c --sizes 256M --total 256M
  done
}

phase_auto() {
  local f=auto.txt from=() name
  calibrate_once $f
  local A=("$B/gvault" bench primitive --no-single-core --min-ms "${AUTO_MIN_MS:-200}" --pinned --backend auto)
  local sizes=${AUTO_SIZES:-512,4K,64K,1M,16M,64M,256M,1G}
  # Each half that ran to the end is drawn.
  if [ "${AUTO_OPS:-}" != none ]; then
    run $f "${A[@]}" ${AUTO_FLAGS:-} --ops "${AUTO_OPS:-aes256gcm-seal,aes256gcm-open,blake3}" \
      --sizes "$sizes" --save "$OUT/auto-main.json" && from+=(--from "$OUT/auto-main.json")
  fi
  if [ "${AUTO_SERIAL_OPS:-}" != none ]; then
    run $f "${A[@]}" ${AUTO_SERIAL_FLAGS:-} --ops "${AUTO_SERIAL_OPS:-sha256}" \
      --sizes "${AUTO_SERIAL_SIZES:-$sizes}" --save "$OUT/auto-serial.json" &&
      from+=(--from "$OUT/auto-serial.json")
  fi
  [ ${#from[@]} -gt 0 ] || return 0
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  run $f "$B/gvault" bench plot "${from[@]}" --out "$OUT/auto.png" \
    --title "gvault bench primitive --backend auto --pinned, $(nproc) cores, ${name:-no GPU}"
}

phase_lsm() {
  local f=lsm.txt enc=${LSM_ENCRYPT:-none,cpu,auto}
  case ",$enc," in *auto* | *gpu*) calibrate_once $f ;; esac
  run $f "${PIN[@]}" "$B/gvault" bench lsm --encrypt "$enc" --value-sizes "${LSM_SIZES:-100,4K,64K}" \
    --sync "${LSM_SYNC:-off}" --max-bytes "${LSM_BYTES:-256M}" \
    --workloads "${LSM_WORKLOADS:-fillseq,fillrandom,overwrite,readrandom,readseq}" \
    ${LSM_READS:+--reads "$LSM_READS"} --repeat "${LSM_REPEAT:-2}" --dir "$D"
  if [ "${LSM_REENCRYPT_GIB:-10}" != 0 ]; then
    run $f "$B/gvault" bench lsm --reencrypt "${LSM_REENCRYPT_GIB:-10}" --dir "$D"
  fi
}

phase_costs() {
  local f=costs.txt v n
  for v in ${COST_SIZES:-4096 65536}; do
    n=${COST_NUM:-$((${COST_BYTES:-160000000} / v))}
    run $f env READ_COST_DIR="$D" "${PIN[@]}" "$B/read_cost" "$v" "$n" "${COST_ROUNDS:-7}"
    if [ "${COST_WRITE:-1}" = 1 ]; then
      run $f env WRITE_COST_DIR="$D" "${PIN[@]}" "$B/write_cost" "$v" "$n" "${COST_ROUNDS:-7}"
    fi
  done
}

phase_scaling() {
  local f=scaling.txt bin size tag num start saved=()
  for bin in ${SCALING_BINS:-$B/gvault}; do
    [ -n "$DRY" ] || [ -x "$bin" ] || { echo "== no $bin" | tee -a "$OUT/$f"; status=1; return; }
  done
  [ -n "$DRY" ] || mkdir -p "$D"
  for size in ${SCALING_SIZES:-100 4096 65536}; do
    for bin in ${SCALING_BINS:-$B/gvault}; do
      tag=$(basename "$bin")
      num=$((${SCALING_MIB:-256} * 1048576 / (16 + size)))
      start=$SECONDS
      run $f "${PIN[@]}" "$bin" bench lsm --workloads readrandom,readseq --value-sizes "$size" \
        --num "$num" --threads "${SCALING_THREADS:-1,2,4,8,16}" --duration "${SCALING_SECONDS:-1}" \
        --repeat "${SCALING_REPEAT:-2}" --encrypt "${SCALING_ENCRYPT:-none,cpu}" --profile \
        --dir "$D" --save "$D/scaling-$tag-$size.json"
      echo "== $tag $size B: $((SECONDS - start)) s" | tee -a "$OUT/$f"
      saved+=("$tag-$size")
    done
  done
  [ -n "$DRY" ] && return
  # One JSON object: "binary-size" -> that run's report.
  {
    echo "{"
    local i=0 key
    for key in "${saved[@]}"; do
      [ -s "$D/scaling-$key.json" ] || continue
      [ $i -gt 0 ] && echo ","
      printf '"%s": ' "$key"
      cat "$D/scaling-$key.json"
      rm -f "$D/scaling-$key.json"
      i=$((i + 1))
    done
    echo "}"
  } > "$OUT/scaling.json"
}

phase_seeds() {
  local f=seeds.txt s
  local S=("$B/gvault" bench primitive --pinned --min-ms 200)
  for s in $seeds; do
    echo "== seed item $s" | tee -a "$OUT/$f"
    case $s in
      000)
        # One job of 4 blocks (the seed's "1 block": the fixed cost of a
        # call) and of 256 Ki blocks (128 MiB), 512 bytes a block.
        run $f "${S[@]}" --ops crc32,tea-ctr --sizes 512 --total 2K
        run $f "${S[@]}" --ops crc32,tea-ctr --sizes 512 --total 128M ;;
      000-lsm)
        calibrate_once $f
        run $f "${PIN[@]}" "$B/gvault" bench lsm --seed-000 \
          --encrypt none,cpu,gpu,auto,cpu-index,gpu-index,auto-index --repeat 2 --max-bytes 128M --dir "$D" ;;
      001)
        run $f "$B/gvault" bench seed001 ;;
      002)
        # The seed's data sizes, one buffer each (4 segments of a quarter).
        run $f "${S[@]}" --ops aes256ctr --sizes 256K --total 1M
        run $f "${S[@]}" --ops aes256ctr --sizes 1M --total 4M
        run $f "${S[@]}" --ops aes256ctr --sizes 4M --total 16M ;;
      003)
        # The seed's Table I sizes: 4 KiB to 256 MiB in one job each.
        run $f "${S[@]}" --ops blowfish-ctr --sizes 1K --total 4K
        run $f "${S[@]}" --ops blowfish-ctr --sizes 100K --total 400K
        run $f "${S[@]}" --ops blowfish-ctr --sizes 1M --total 4M
        run $f "${S[@]}" --ops blowfish-ctr --sizes 16M --total 64M
        run $f "${S[@]}" --ops blowfish-ctr --sizes 64M --total 256M ;;
    esac
  done
}

phase_rsa() {
  local f=rsa.txt
  # auto's column prices RSA by the calibrated GPU figures.
  calibrate_once $f
  run $f "$B/rsa-gpu-tests" --include-ignored --test-threads=1 --nocapture
  run $f "$B/gvault" bench rsa ${RSA_BENCH_FLAGS:---quick} --save "$OUT/rsa.json"
}

phase_service() {
  local f=service.txt
  calibrate_once $f
  run $f "$B/service-gpu-tests" --include-ignored --test-threads=1 --nocapture
  run $f "$B/gvault" bench service ${SERVICE_FLAGS:-} --save "$OUT/service.json" --plot "$OUT/service.png"
  run $f "$B/gvault" bench service --zero-copy --sizes "${SERVICE_ZC_SIZES:-64K,1M,16M}" \
    --clients 1,16,64 --save "$OUT/service-zc.json" --plot "$OUT/service-zc.png"
  run $f "$B/gvault" bench service --shared-key --ops aes256gcm-seal,sha256 --sizes 4K \
    --clients 1,64 --save "$OUT/service-shared-key.json"
  # Seed 004's setting: every job on the GPU, where batching saves launches.
  run $f "$B/gvault" bench service --accel gpu --shared-key --ops aes256gcm-seal,sha256 \
    --sizes 4K,64K --clients 1,64 --save "$OUT/service-gpu.json"
}

phase_multi() {
  local f=multi.txt all n
  n=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
  all=$(seq -s, 0 $((n - 1)))
  echo "== $n GPUs: $all" | tee -a "$OUT/$f"
  run $f "$B/gpu-tests" --include-ignored concurrent_jobs_spread_over_every_gpu --test-threads=1 --nocapture
  run $f "$B/gvault" bench primitive --every-gpu --no-single-core --total 1G \
    --ops "${MULTI_PRIM_OPS:-aes256gcm-seal,blake3,sha256,fastcdc-blake3}" \
    --sizes "${MULTI_PRIM_SIZES:-1M,64M}" --save "$OUT/multi-primitive.json"
  [ "${MULTI_SERVICE:-1}" = 0 ] && return
  run $f "$B/service-gpu-tests" --include-ignored a_gpu_daemon --test-threads=1
  for v in 0 "$all"; do
    run $f env CUDA_VISIBLE_DEVICES="$v" "$B/gvault" bench service --accel gpu --shared-key \
      --ops "${MULTI_OPS:-sha256,aes256gcm-seal,fastcdc-blake3,rsa-private}" --sizes "${MULTI_SIZES:-64K,1M}" --clients 1,64 \
      --save "$OUT/multi-gpus-${v//,/}.json"
  done
}

# watchdog SECONDS CMD...: runs CMD; if it is still running after SECONDS,
# prints every thread's stack (cuda-gdb, when installed; then SIGABRT, which
# Python's faulthandler answers with its threads' tracebacks) and kills it.
watchdog() {
  local limit=$1 pid i gdb
  shift
  "$@" &
  pid=$!
  for ((i = 0; i < limit; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; return; }
    sleep 1
  done
  echo "== still running after $limit s: stacks, then killed: $*"
  gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
  local target
  target=$(pgrep -P "$pid" | tail -1)
  [ -n "$gdb" ] && timeout 90 "$gdb" -p "${target:-$pid}" -batch \
    -ex "thread apply all bt 25" 2>&1 | grep -v "^\[New LWP\|^$" | head -400
  pkill -ABRT -P "$pid"; kill -ABRT "$pid" 2>/dev/null
  sleep 3
  pkill -KILL -P "$pid"; kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  return 124
}

phase_rocks() {
  local f=rocks.txt
  local flags=(${ROCKS_FLAGS:---workloads fillseq,fillrandom,readrandom,readseq --value-sizes 100,4K,64K --threads 1,16 --duration 1 --cache-mb 512 --sync off --repeat 2 --max-bytes 256M})
  if [ ! -x "$B/rocks-lsm" ] || [ ! -f "$B/compare.py" ]; then
    echo "== no $B/rocks-lsm or $B/compare.py: the rocks phase needs both" | tee -a "$OUT/$f"
    status=1
    return
  fi
  [ -n "$DRY" ] || rm -rf "$D/gvault" "$D/rocksdb"
  run $f "${PIN[@]}" "$B/gvault" bench lsm "${flags[@]}" --dir "$D/gvault" --save "$OUT/rocks-gvault.json"
  [ -n "$DRY" ] || rm -rf "$D/gvault"
  run $f "${PIN[@]}" "$B/rocks-lsm" "${flags[@]}" --dir "$D/rocksdb" --save "$OUT/rocks-rocksdb.json"
  [ -n "$DRY" ] || rm -rf "$D/rocksdb"
  run $f python3 "$B/compare.py" "$OUT/rocks-gvault.json" "$OUT/rocks-rocksdb.json"
}

phase_python() {
  local f=python.txt site=/tmp/gvault-site d=${CKPT_DIR:-/tmp/gvault-ckpt}
  run $f python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" \
    .gpu-py/gvault-*.whl || return
  run $f watchdog "${PY_TEST_S:-240}" env PYTHONPATH="$site" PYTHONUNBUFFERED=1 \
    python3 -X faulthandler python/tests/test_gpu.py || return
  local workers=
  case "${CKPT_WORKERS:-auto}" in *[!0-9]*) ;; *) workers="--workers $CKPT_WORKERS" ;; esac
  if [ "${CKPT_RUST:-1}" != 0 ]; then
    [ -n "$DRY" ] || { rm -rf "$d"; mkdir -p "$d"; }
    run $f watchdog "${CKPT_S:-400}" $B/gvault bench checkpoint \
      --gib "${CKPT_GIB:-20}" --dir "$d" --gpus "${CKPT_GPUS:-1}" $workers \
      --save "$OUT/bench-checkpoint.json"
  fi
  if [ "${CKPT_PY:-1}" != 0 ]; then
    [ -n "$DRY" ] || { rm -rf "$d"; mkdir -p "$d"; }
    run $f watchdog "${CKPT_S:-400}" env PYTHONPATH="$site" PYTHONUNBUFFERED=1 \
      python3 -X faulthandler python/bench/checkpoint.py \
      --gib "${CKPT_GIB:-20}" --dir "$d" ${CKPT_SKIP:+--skip "$CKPT_SKIP"} --gpus "${CKPT_GPUS:-1}" --workers "${CKPT_WORKERS:-auto}" \
      --out "$OUT/checkpoint.json"
  fi
  [ -n "$DRY" ] || rm -rf "$d"
}

for p in "${phases[@]}"; do
  echo "=== phase $p ($(date -u +%H:%M:%S))"
  "phase_$p"
done
echo "gpu.sh status: $status"
exit $status
