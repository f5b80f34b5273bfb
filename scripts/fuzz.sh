#!/usr/bin/env bash
# Longer fuzz runs, as `make fuzz` and `make fuzz-all` start them (docs/FUZZING.md).
#
#   scripts/fuzz.sh SECONDS TARGET...   run each target in turn for SECONDS
#   scripts/fuzz.sh SECONDS all         every target of fuzz/Cargo.toml
#   scripts/fuzz.sh report TARGET...|all  the summary lines of the last runs again
#
# Each run starts from the committed seeds (fuzz/seeds/TARGET, read only)
# and the corpus of earlier runs (fuzz/corpus/TARGET, where new inputs go;
# gitignored). The build is cargo-fuzz's default (optimized,
# AddressSanitizer) with debug assertions and overflow checks on (-a). Runs are niced (FUZZ_NICE, default `nice -n 19`);
# extra libFuzzer flags come from FUZZ_ARGS (e.g. FUZZ_ARGS=-jobs=2).
# The log of each run is kept in fuzz/logs/TARGET.log; a crash stops the
# loop, leaves its input in fuzz/artifacts/TARGET/, and exits non-zero.
#
# Prints one line per target: executions, executions per second,
# libFuzzer's final `cov:` (edges) and `ft:` (features), the corpus it
# ended with (inputs, bytes), the execution that last added coverage, and
# when that was (from the average rate): a last find near the end means
# coverage was still growing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs=${1:?usage: scripts/fuzz.sh SECONDS TARGET...|all}
shift
[ $# -gt 0 ] || { echo "usage: scripts/fuzz.sh SECONDS TARGET...|all" >&2; exit 2; }
if [ "$1" = all ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
else
  targets=("$@")
fi
read -r -a nice_cmd <<<"${FUZZ_NICE:-nice -n 19}"
read -r -a extra <<<"${FUZZ_ARGS:-}"

mkdir -p logs
# One line from a run's log. libFuzzer separates "#N" and the event by a tab.
row() {
  local t=$1 log=logs/$1.log done_line execs rate cov ft corp last at
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$done_line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$done_line")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$done_line")
  last=$(grep -E '^#[0-9]+[[:space:]]+NEW' "$log" | tail -n 1 | sed -nE 's/^#([0-9]+).*/\1/p' || true)
  last=${last:-0}
  at=$(( ${rate:-0} > 0 ? last / rate : 0 ))
  printf '%-17s %12s %8s %6s %7s %14s %11s (%5ss)\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "#$last" "$at"
}

printf '%-17s %12s %8s %6s %7s %14s %20s\n' target execs exec/s cov ft corpus "last new"
for t in "${targets[@]}"; do
  if [ "$secs" = report ]; then
    row "$t"
    continue
  fi
  mkdir -p "corpus/$t" "seeds/$t"
  log="logs/$t.log"
  if ! "${nice_cmd[@]}" cargo +nightly fuzz run -a "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$secs" -print_final_stats=1 "${extra[@]}" >"$log" 2>&1; then
    echo "$t: FAILED (see fuzz/$log; the input is in fuzz/artifacts/$t/)"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -n 8
    exit 1
  fi
  row "$t"
done
