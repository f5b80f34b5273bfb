#!/usr/bin/env bash
# Proves that scripts/setup.sh is all a fresh Debian 12 machine needs: in a
# minimal Debian 12 root (debootstrap --variant=minbase: no iproute2, no
# compiler, no make, no Rust), a clean clone of this repository's HEAD,
# then `scripts/setup.sh` and `make TARGET` for each target (default: demo,
# then test) inside it as root, as README.md's quick start says — setup.sh
# installs the Debian packages, Rust, nightly and cargo-fuzz and checks
# every program of scripts/programs.txt, and the targets run to the end.
# Each step's time is printed at the end.
#
#   scripts/check-setup.sh [TARGETS] [ROOT]     TARGETS: e.g. "demo test" (the default), "test"
#
# ROOT: a Debian 12 root to use, made with debootstrap if it holds none,
# and kept; by default a new directory under /var/tmp, removed at the end
# unless KEEP=1. The chroot runs in a mount namespace of
# its own; it shares the host's network (apt and rustup download), and the
# test bed's network namespaces are named esp-<pid>-… and removed by it, as
# on the host. Needs root and debootstrap (`scripts/setup.sh package`).
set -euo pipefail
cd "$(dirname "$0")/.."

targets=${1:-demo test}
made=0
if [[ -n ${2:-} ]]; then root=$2; else root=$(mktemp -d /var/tmp/esparto-setup-root.XXXXXX); made=1; fi
[[ $(id -u) -eq 0 ]] || { echo "check-setup: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "check-setup: needs debootstrap (scripts/setup.sh package)" >&2; exit 1; }
[[ -z $(git status --porcelain --untracked-files=no) ]] \
  || echo "check-setup: uncommitted changes are not in the clone (it is of HEAD)" >&2

cleanup() {
  if [[ $made == 1 && ${KEEP:-0} != 1 ]]; then rm -rf --one-file-system "$root"; else echo "check-setup: kept $root" >&2; fi
}
trap cleanup EXIT

if [[ ! -x "$root/usr/bin/apt-get" ]]; then
  echo "check-setup: debootstrap --variant=minbase bookworm $root" >&2
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
fi
echo "check-setup: $(grep -c '^Package:' "$root/var/lib/dpkg/status") Debian packages in the fresh root" >&2
for prog in make ip ethtool iperf3 cc cargo; do
  if chroot "$root" /bin/sh -c "command -v $prog" >/dev/null 2>&1; then
    echo "check-setup: $prog is already in the fresh root" >&2
  fi
done

rm -rf "$root/src/esparto"
git clone --quiet --no-hardlinks "$PWD" "$root/src/esparto"
# The host's network set-up, which a machine of its own would have: its
# resolver, and the certificate authorities it trusts beyond Debian's (a
# TLS-intercepting proxy's), which the ca-certificates package that setup.sh
# installs takes in.
cp /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi

echo "check-setup: scripts/setup.sh, then make ${targets// /, make } in the fresh root" >&2
# The steps, each timed, as a script inside the root.
cat > "$root/src/check-steps.sh" <<'STEPS'
#!/bin/bash
set -euo pipefail
cd /src/esparto
t=$SECONDS; scripts/setup.sh; times=("scripts/setup.sh $((SECONDS - t)) s")
for tg in $TARGETS; do
  t=$SECONDS; make "$tg"; times+=("make $tg $((SECONDS - t)) s")
done
printf 'check-setup: passed in the fresh root: %s\n' "$(IFS=,; echo "${times[*]}")" >&2
STEPS
chmod +x "$root/src/check-steps.sh"
# A mount namespace of its own: /proc, /sys, /dev and the namespaces' bind
# mounts go when the command ends.
unshare --mount --propagation private /bin/bash -euo pipefail -c '
  root=$1; targets=$2
  # The root a mount point, as / is on a machine (ip netns makes / a slave).
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/run"
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb PATH=/usr/sbin:/usr/bin:/sbin:/bin TARGETS="$targets" \
    /src/check-steps.sh
' check-setup "$root" "$targets"
