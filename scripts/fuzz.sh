#!/usr/bin/env bash
# Coverage-guided fuzzing of gvault's decoders (fuzz/, libFuzzer).
#
#   scripts/fuzz.sh TARGET|all SECONDS   run each target for SECONDS, growing
#                                        its corpus in fuzz/corpus/TARGET/
#   scripts/fuzz.sh list                 the targets
#   scripts/fuzz.sh stats                executions per target, summed over
#                                        every run in fuzz/runs.tsv
#   scripts/fuzz.sh min TARGET|all       minimise a corpus (libFuzzer -merge)
#   scripts/fuzz.sh build                the instrumented driver only
#
# Environment: FUZZ_KEEP=0 keeps the corpus as it is (new inputs go to a
# temporary directory and the run is not logged: CI); FUZZ_BIN runs that driver binary as it is (no
# build: a long soak keeps its copy); FUZZ_MAX_LEN caps input length
# (libFuzzer's default: the corpus's longest; shorter inputs run faster);
# FUZZ_RSS_MB [2048] is the memory limit (an
# allocation beyond it is a finding); FUZZ_TIMEOUT [10] seconds per input.
# Every run appends a line to fuzz/runs.tsv (date, target, seconds,
# executions, coverage, features, corpus size, result), so executions add up
# across runs; crashes land in fuzz/artifacts/TARGET/ and the script exits 1.
# A crash becomes a regression test by copying its input into
# fuzz/regressions/TARGET/ (replayed by `cargo test -p gvault-fuzz`).
#
# Engine: libFuzzer through libfuzzer-sys, built on the stable toolchain
# with the sanitizer-coverage pass (-Cpasses=sancov-module) instead of
# cargo-fuzz's nightly-only sanitizers; overflow checks and debug
# assertions are on, so an arithmetic overflow is a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

triple=$(rustc -vV | sed -n 's/^host: //p')
target_dir=fuzz/target
bin=${FUZZ_BIN:-$target_dir/$triple/release/gvault-fuzz}

usage() { sed -n '2,9p' "$0" >&2; exit 2; }

build() {
  [ -z "${FUZZ_BIN:-}" ] || return 0
  # --target keeps the instrumentation off build scripts and proc macros,
  # which do not link libFuzzer.
  RUSTFLAGS="-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    -Cllvm-args=-sanitizer-coverage-stack-depth \
    -Cdebug-assertions -Coverflow-checks" \
  CARGO_TARGET_DIR=$target_dir \
    cargo build --release --target "$triple" -p gvault-fuzz --features libfuzzer --bin gvault-fuzz
}

targets() {
  # The registry in fuzz/src/lib.rs is the list.
  grep -oP '^\s+name: "\K[a-z0-9_]+(?=",)' fuzz/src/lib.rs
}

run_one() {
  local t=$1 secs=$2 corpus=fuzz/corpus/$1 log
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  log=$(mktemp)
  local dirs=("$corpus")
  if [ "${FUZZ_KEEP:-1}" = 0 ]; then
    local scratch; scratch=$(mktemp -d)
    dirs=("$scratch" "$corpus")
  fi
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  local rc=0
  GVAULT_FUZZ_TARGET=$t "$bin" "${dirs[@]}" \
    -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -malloc_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 \
    ${FUZZ_MAX_LEN:+-max_len=$FUZZ_MAX_LEN} \
    >"$log" 2>&1 || rc=$?
  local execs cov ft size result=ok
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oP 'cov: \K[0-9]+' "$log" | tail -1 || true)
  ft=$(grep -oP 'ft: \K[0-9]+' "$log" | tail -1 || true)
  size=$(find "$corpus" -type f | wc -l)
  if [ "$rc" != 0 ]; then
    result=crash
    tail -40 "$log" >&2
  fi
  # Soaks are recorded; short CI runs (FUZZ_KEEP=0) are not.
  [ "${FUZZ_KEEP:-1}" = 0 ] ||
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$secs" \
      "${execs:-0}" "${cov:-0}" "${ft:-0}" "$size" "$result" >>fuzz/runs.tsv
  printf '%-16s %6ss %10s execs  cov %-6s ft %-6s corpus %-5s %s\n' "$t" "$secs" \
    "${execs:-0}" "${cov:-0}" "${ft:-0}" "$size" "$result"
  rm -f "$log"
  [ "$result" = ok ]
}

minimise() {
  local t=$1 corpus=fuzz/corpus/$1 fresh
  fresh=$(mktemp -d)
  GVAULT_FUZZ_TARGET=$t "$bin" -merge=1 "$fresh" "$corpus" >/dev/null 2>&1
  rm -rf "$corpus" && mkdir -p "$corpus" && cp "$fresh"/* "$corpus"/ && rm -rf "$fresh"
  echo "$t: $(find "$corpus" -type f | wc -l) inputs"
}

[ $# -ge 1 ] || usage
stats() {
  # Last coverage and corpus size per target, executions and seconds summed.
  printf "%-16s %14s %8s %5s %8s %8s %7s %7s\n" target executions seconds runs \
    coverage features corpus crashed
  awk -F'\t' 'NR > 1 { e[$2] += $4; s[$2] += $3; n[$2]++; c[$2] = $5; f[$2] = $6;
      k[$2] = $7; if ($8 != "ok") bad[$2]++ }
    END { for (t in e) printf "%-16s %14d %8d %5d %8d %8d %7d %7d\n", t, e[t], s[t], n[t],
            c[t], f[t], k[t], bad[t] }' fuzz/runs.tsv | sort
}

case $1 in
  list) targets; exit 0 ;;
  stats) stats; exit 0 ;;
  build) build; exit 0 ;;
  min)
    [ $# -eq 2 ] || usage
    build
    if [ "$2" = all ]; then for t in $(targets); do minimise "$t"; done; else minimise "$2"; fi
    exit 0 ;;
esac
[ $# -eq 2 ] || usage
[[ $2 =~ ^[0-9]+$ ]] || usage
if [ "$1" != all ] && ! targets | grep -qx "$1"; then
  echo "unknown target $1; scripts/fuzz.sh list names them" >&2
  exit 2
fi
build
[ -f fuzz/runs.tsv ] || printf 'date\ttarget\tseconds\texecutions\tcoverage\tfeatures\tcorpus\tresult\n' >fuzz/runs.tsv
failed=0
if [ "$1" = all ]; then
  for t in $(targets); do run_one "$t" "$2" || failed=1; done
else
  run_one "$1" "$2" || failed=1
fi
exit $failed
