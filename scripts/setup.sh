#!/usr/bin/env bash
# Installs what `make demo` and `make test` need on a fresh Debian 12 machine:
# the Debian packages that provide every program in scripts/programs.txt
# (iproute2, ethtool, iperf3, strongSwan with kernel-libipsec for the interop
# tests, …) and strongSwan's plugins, then the Rust components (clippy;
# nightly + cargo-fuzz for the fuzz targets). Ends by checking that every
# listed program is there. Idempotent and quiet when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

# program -> package, from the one list of external programs.
PROGRAMS=()
PACKAGES=()
while read -r prog pkg _group; do
  [[ -z "$prog" || "$prog" == \#* ]] && continue
  PROGRAMS+=("$prog")
  PACKAGES+=("$pkg")
done < scripts/programs.txt
# Libraries and plugins (no program of their own to check).
PACKAGES+=(
  libcharon-extra-plugins libstrongswan-standard-plugins libstrongswan-extra-plugins
)
mapfile -t PACKAGES < <(printf '%s\n' "${PACKAGES[@]}" | sort -u)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages: ${missing[*]} (run as root to install them)"
  else
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
# charon must not run as a system service: the tests start their own instances.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet strongswan-starter 2>/dev/null; then
  systemctl stop strongswan-starter || true
fi

if ! command -v cargo >/dev/null 2>&1; then
  [[ -x "$HOME/.cargo/bin/cargo" ]] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { log "cargo not found: install Rust with rustup (https://rustup.rs)"; exit 1; }

if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || { log "adding clippy"; rustup component add clippy >/dev/null; }
  if ! rustup toolchain list | grep -q '^nightly'; then
    log "installing the nightly toolchain (for cargo-fuzz)"
    rustup toolchain install nightly --profile minimal >/dev/null
  fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi

# Every program the code runs must now be there.
absent=()
for prog in "${PROGRAMS[@]}"; do
  if [[ "$prog" == /* ]]; then [[ -x "$prog" ]] || absent+=("$prog")
  else command -v "$prog" >/dev/null 2>&1 || absent+=("$prog"); fi
done
if ((${#absent[@]})); then
  log "still missing after set-up: ${absent[*]} (see scripts/programs.txt)"
  exit 1
fi
