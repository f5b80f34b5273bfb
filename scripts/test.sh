#!/usr/bin/env bash
# Every test of the project, as `make test` runs it (CI too, via .ci/run).
#   1. clippy with warnings as errors;
#   2. unit, property and known-answer tests of every crate, and the netns
#      tests (they need root; as another user they report SKIP);
#   3. each fuzz target for a short time (FUZZ_SECONDS, default 5).
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-5}
step() { printf '\n=== %s\n' "$*"; }
t0=$SECONDS

# The daemon's fault-injection test hook (a worker that panics on demand,
# crates/esparto/src/daemon/fault.rs) is built for the tests only.
TEST_FEATURES=(--features esparto/fault-injection)

step "clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy --workspace --all-targets --quiet "${TEST_FEATURES[@]}" -- -D warnings

step "tests"
# One cargo run for the whole workspace: it builds the `esparto` binary that
# the test bed's tests (crates/esparto-testbed) find next to their own.
cargo test --workspace --quiet "${TEST_FEATURES[@]}"

step "fuzz smoke runs (${FUZZ_SECONDS}s each)"
# Smoke runs use a debug build without a sanitizer: it builds in a third of
# the time, and keeps overflow checks and debug assertions on (the parsers
# are safe Rust, so AddressSanitizer adds little). Long runs (`make fuzz`,
# scripts/fuzz.sh) use an optimized ASan build with debug assertions.
FUZZ_FLAGS=(--dev -s none)
if ! out=$(cd fuzz && cargo +nightly fuzz build "${FUZZ_FLAGS[@]}" 2>&1); then
  echo "$out" | tail -n 40; exit 1
fi
targets=$(cd fuzz && cargo +nightly fuzz list)
# Each run starts from the committed seeds only, not from fuzz/corpus:
# libFuzzer replays a whole corpus before it looks at the clock, so the
# corpora that long runs grow would make these runs as long as they are
# large. New inputs go to a directory removed afterwards.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in $targets; do
  printf '%-24s ' "$t"
  mkdir -p "$scratch/$t"
  if out=$(cd fuzz && cargo +nightly fuzz run "${FUZZ_FLAGS[@]}" "$t" "$scratch/$t" "seeds/$t" -- -max_total_time="$FUZZ_SECONDS" 2>&1); then
    grep -Eo '#[0-9]+[[:space:]]+DONE.*' <<<"$out" | tail -n 1 || echo ok
  else
    echo "FAILED"; echo "$out" | tail -n 40; exit 1
  fi
done

step "all tests passed in $((SECONDS - t0)) s"
