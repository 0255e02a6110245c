#!/usr/bin/env bash
# Soak of the store's crash and concurrency tests: many seeds at once, for a
# machine with more cores than CI's two (rare interleavings, such as a key
# retired under a table still being written, show up in thousands of kills,
# not in CI's hundred).
#   here:  scripts/stress.sh --build                 (test binaries into .stress/)
#   there: STRESS_SECONDS=300 scripts/stress.sh      (results under $OUT)
# Each loop runs one test binary with one test and a fresh CRASH_SEED until
# the time is up; failures keep their output. Exit status 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--build" ]; then
  set -e
  mkdir -p .stress
  for t in crash encryption reseal corruption model; do
    bin=$(cargo test --release -p gvault-store --test "$t" --no-run --message-format=json 2>/dev/null \
          | python3 -c 'import sys,json; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable")]')
    cp "$bin" ".stress/$t"
  done
  strip .stress/* 2>/dev/null || true
  ls -la .stress
  exit 0
fi

OUT=${OUT:-/tmp/gvault-stress-out}
mkdir -p "$OUT"
B=.stress
SECONDS_LEFT=${STRESS_SECONDS:-300}
JOBS=${STRESS_JOBS:-$(nproc)}
end=$(($(date +%s) + SECONDS_LEFT))
# binary:test pairs, taken round-robin by the loops (the model test's
# rotation thread races user operations; its seeds are fixed, its timing not).
cases=(
  "crash:kill_and_recover_index_only"
  "crash:kill_and_recover::encrypted"
  "crash:kill_and_recover::plain"
  "encryption:"
  "reseal:"
  "corruption:"
  "model:random_operations_match_a_btreemap_while_keys_rotate"
)

loop() {
  local j=$1 i=0 pass=0 fail=0
  while [ "$(date +%s)" -lt "$end" ]; do
    local c=${cases[$(((j + i) % ${#cases[@]}))]}
    local bin=${c%%:*} test=${c#*:} seed=$((j * 100000 + i))
    local args=(--test-threads=2)
    [ -n "$test" ] && args+=(--exact "$test")
    if CRASH_SEED=$seed timeout 300 "$B/$bin" "${args[@]}" > "$OUT/run-$j.txt" 2>&1; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      mv "$OUT/run-$j.txt" "$OUT/fail-$bin-${test//:/_}-seed$seed.txt"
    fi
    i=$((i + 1))
  done
  rm -f "$OUT/run-$j.txt"
  echo "loop $j: $pass passed, $fail failed"
}

echo "stress: $JOBS loops for ${SECONDS_LEFT}s on $(nproc) cores, $(date -u)"
for j in $(seq 1 "$JOBS"); do loop "$j" > "$OUT/loop-$j.txt" & done
wait
cat "$OUT"/loop-*.txt
fails=$(ls "$OUT"/fail-* 2>/dev/null | wc -l)
echo "failed runs: $fails"
for f in "$OUT"/fail-*; do
  [ -e "$f" ] || continue
  echo "== $f"; grep -E "panicked|Corruption|Error" "$f" | head -5
done
[ "$fails" -eq 0 ]
