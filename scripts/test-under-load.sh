#!/usr/bin/env bash
# Runs test binaries again and again while a CPU hog takes every CPU: the
# check that no test depends on a quiet machine (CI runs on a shared
# 2-vCPU machine).
#
#   scripts/test-under-load.sh [-n RUNS] [--no-hog] [TEST …]
#
# TEST is a cargo test target (`gateway_netns`, `bench_ipcomp_smoke`, …),
# or `lib:CRATE` for a crate's unit tests; without any, every test target
# that depends on time, rates or load (the list below). The hog is one busy
# loop per CPU at nice 0, the same priority as the tests. Each run's output
# goes to target/test-under-load/<test>.<run>.log; the summary lists every
# failed run. Exit status 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

RUNS=10
HOG=1
TESTS=()
while (($#)); do
  case "$1" in
    -n) RUNS=$2; shift 2 ;;
    --no-hog) HOG=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) TESTS+=("$1"); shift ;;
  esac
done

# Every test target whose outcome could depend on time, rates or load:
# namespace tests with real daemons and traffic, the test bed's smoke runs,
# restart, flood and reload tests, and the IKE engine's simulations (a fake
# clock, but listed to prove it).
if ((${#TESTS[@]} == 0)); then
  TESTS=(
    daemon_process_netns gateway_netns ike_netns interop_strongswan interop_strongswan_certs
    metrics_netns netns_adversarial netns_gro_flood netns_ike_flood percpu_netns reload_netns
    restart_netns routing_netns service_netns static_restart_netns starved_netns install_race_netns worker_panic_netns
    steer_netns tun_netns udp_gro_netns worker_failure_netns worker_netns
    bench_ipcomp_smoke bench_setup_smoke bench_tunnel_smoke bench_voip_smoke demo_netns
    testbed_baseline testbed_esparto testbed_strongswan testbed_topology
    lib:esparto lib:esparto-esp lib:esparto-io
  )
fi

FEATURES=(--features esparto/fault-injection)
logdir=target/test-under-load
mkdir -p "$logdir"

# Build everything once, before the hog starts.
cargo test --workspace --no-run --quiet "${FEATURES[@]}" 2>&1 | tail -n 5

hogs=()
stop_hogs() { ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_hogs EXIT
if ((HOG)); then
  for _ in $(seq "$(nproc)"); do
    nice -n 0 sh -c 'while :; do :; done' &
    hogs+=($!)
  done
  echo "hog: ${#hogs[@]} busy loops at nice 0 (pids ${hogs[*]})"
fi

failed=()
for t in "${TESTS[@]}"; do
  if [[ $t == lib:* ]]; then
    sel=(-p "${t#lib:}" --lib)
  else
    sel=(--workspace --test "$t")
  fi
  pass=0; worst=0
  for run in $(seq "$RUNS"); do
    log="$logdir/${t//:/-}.$run.log"
    start=$SECONDS
    feats=("${FEATURES[@]}"); [[ $t == lib:* && $t != lib:esparto ]] && feats=()
    if cargo test --quiet "${feats[@]}" "${sel[@]}" >"$log" 2>&1; then
      pass=$((pass + 1))
    else
      failed+=("$t run $run ($log)")
    fi
    d=$((SECONDS - start)); ((d > worst)) && worst=$d
  done
  printf '%-28s %2d/%d passed, slowest run %3d s\n' "$t" "$pass" "$RUNS" "$worst"
done

if ((${#failed[@]})); then
  printf '\nfailed:\n'; printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "every run passed"
