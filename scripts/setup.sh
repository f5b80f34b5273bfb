#!/usr/bin/env bash
# Installs what `make demo` and `make test` need on a fresh Debian 12 machine:
# the Debian packages that provide the programs in scripts/programs.txt
# (iproute2, ethtool, iperf3, strongSwan with kernel-libipsec for the interop
# tests, …) and strongSwan's plugins; Rust with rustup if there is no cargo
# (Debian 12's rustc is older than the workspace's rust-version); then the
# Rust components (clippy; nightly + cargo-fuzz for the fuzz targets) and
# strongSwan's Python `vici` package for the VICI client test. Ends
# by checking that every listed program is there. Idempotent and quiet when
# everything is present. The Makefile puts ~/.cargo/bin on PATH, so a Rust
# installed here serves the `make` that ran it.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

# The groups of scripts/programs.txt to install: what `make demo` and `make
# test` need, plus any named on the command line (`scripts/setup.sh package`
# for `make deb-check`).
WANTED_GROUPS=(setup build testbed strongswan vici "$@")

# program -> package, from the one list of external programs.
PROGRAMS=()
PACKAGES=()
while read -r prog pkg group; do
  [[ -z "$prog" || "$prog" == \#* ]] && continue
  [[ " ${WANTED_GROUPS[*]} " == *" $group "* ]] || continue
  PROGRAMS+=("$prog")
  PACKAGES+=("$pkg")
done < scripts/programs.txt
# Libraries, plugins and files (no program of their own to check):
# strongSwan's plugins; the CA certificates; netbase's /etc/protocols,
# through which charon resolves the protocol of a selector (`[udp/53]`).
PACKAGES+=(
  libcharon-extra-plugins libstrongswan-standard-plugins libstrongswan-extra-plugins
  ca-certificates netbase
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
if ! command -v cargo >/dev/null 2>&1; then
  # rustup-init itself, from where https://sh.rustup.rs fetches it, checked
  # against the SHA-256 published beside it.
  log "installing Rust (rustup, stable toolchain) into $HOME/.cargo"
  url="https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  tmp=$(mktemp -d)
  curl --proto '=https' --tlsv1.2 -sSf -o "$tmp/rustup-init" "$url"
  want=$(curl --proto '=https' --tlsv1.2 -sSf "$url.sha256" | cut -d' ' -f1)
  if [[ $(sha256sum "$tmp/rustup-init" | cut -d' ' -f1) != "$want" ]]; then
    log "rustup-init from $url does not match its SHA-256"; rm -rf "$tmp"; exit 1
  fi
  chmod +x "$tmp/rustup-init"
  "$tmp/rustup-init" -y --quiet --no-modify-path --profile minimal --default-toolchain stable >/dev/null
  rm -rf "$tmp"
  export PATH="$HOME/.cargo/bin:$PATH"
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

# strongSwan's Python `vici` package, pinned, in a venv of its own: the
# interpreter scripts/programs.txt names (.../vici-VERSION/bin/python). It
# comes from PyPI; without a way there the VICI client test says SKIP and
# names it, and nothing else depends on it.
for prog in "${PROGRAMS[@]}"; do
  [[ "$prog" =~ ^(/opt/esparto-testbed/vici-([0-9.]+))/bin/python$ ]] || continue
  venv=${BASH_REMATCH[1]} version=${BASH_REMATCH[2]}
  "$prog" -c 'import vici' 2>/dev/null && continue
  if [[ $(id -u) -ne 0 ]]; then log "missing $venv (run as root to make it)"; continue; fi
  log "installing Python vici $version (PyPI) into $venv"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check "vici==$version"; }; then
    log "could not install vici $version from PyPI into $venv: the VICI client test will SKIP"
    rm -rf "$venv"
  fi
done

# Every program the code runs must now be there (the vici venv aside, above).
absent=()
for prog in "${PROGRAMS[@]}"; do
  [[ "$prog" == /opt/esparto-testbed/vici-* ]] && continue
  if [[ "$prog" == /* ]]; then [[ -x "$prog" ]] || absent+=("$prog")
  else command -v "$prog" >/dev/null 2>&1 || absent+=("$prog"); fi
done
if ((${#absent[@]})); then
  log "still missing after set-up: ${absent[*]} (see scripts/programs.txt)"
  exit 1
fi
