#!/usr/bin/env bash
# Installs what `make demo` and `make test` need on a fresh Debian 12 machine:
# Debian packages (iproute2, iperf3, strongSwan with kernel-libipsec for the
# interop tests), the Rust components (clippy; nightly + cargo-fuzz for the
# fuzz targets). Idempotent and quiet when everything is already there.
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }

PACKAGES=(
  build-essential pkg-config iproute2 iputils-ping iperf3 procps kmod
  strongswan-charon strongswan-swanctl libcharon-extra-plugins
  libstrongswan-standard-plugins libstrongswan-extra-plugins
)

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
