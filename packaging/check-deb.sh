#!/usr/bin/env bash
# Checks the Debian package on a booted Debian 12 system without touching
# the host: boots ROOT (a Debian 12 tree with systemd) with systemd-nspawn,
# in a network namespace of its own and with every change in a throwaway
# overlay, and inside it
#
#   - installs DEB: the unit neither enabled nor started and clean to
#     `systemd-analyze verify`, the configuration mode 0600, `esparto
#     check-config` happy with it;
#   - with an IKE connection configured: `systemctl start` returns once the
#     daemon is ready (TUN device, UDP 500 and 4500, control socket, found
#     by `esparto status` through the configuration, the TUN steering
#     program loaded), which keeps CAP_NET_ADMIN alone; a second
#     connection added to the file, `systemctl reload` returns once the
#     same daemon has loaded it, and fails (the daemon running on) for a
#     broken file; `systemctl stop` removes its device,
#     socket, routes and rules;
#   - an instance of the template, esparto@v6, with an IPv6 peer beside
#     it: its own device, sockets and state directory from its name,
#     reloaded and stopped apart from the first;
#   - without CAP_NET_ADMIN in the unit: the start fails with status 78,
#     the log names the capability, nothing is created, no restart;
#   - `dpkg -r` stops the daemon and keeps the configuration; `dpkg -P`
#     removes the rest, and the file system is as before the install.
#
#   packaging/check-deb.sh target/debian/esparto_VERSION_amd64.deb [ROOT]
#
# ROOT defaults to /var/tmp/esparto-deb-root, made with debootstrap if it
# does not exist. Needs root, systemd-nspawn (systemd-container) and
# debootstrap; `make deb-check` builds the package and runs this.
set -euo pipefail

deb=${1:?usage: packaging/check-deb.sh DEB [ROOT]}
root=${2:-/var/tmp/esparto-deb-root}
[[ -f "$deb" ]] || { echo "check-deb: no package at $deb" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "check-deb: needs root (systemd-nspawn)" >&2; exit 1; }

if [[ ! -x "$root/lib/systemd/systemd" ]]; then
  echo "check-deb: making a Debian 12 root with systemd in $root (debootstrap)" >&2
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,iproute2 \
    bookworm "$root" http://deb.debian.org/debian >/dev/null
fi

work=$(mktemp -d /tmp/esparto-check-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$deb" "$work/esparto.deb"
: >"$work/log"

cat >"$work/esparto-check.service" <<'EOF'
[Unit]
Description=Esparto package check
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/check/inside.sh
StandardOutput=append:/check/log
StandardError=append:/check/log
EOF

cat >"$work/inside.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
fail() {
  echo "FAIL: $*"
  journalctl -u esparto --no-pager -n 60
  journalctl -u "esparto@*" --no-pager -n 30
  echo FAIL >/check/result
  exit 1
}
ok() { echo "ok: $*"; }
prop() { systemctl show -p "$1" --value esparto; }
# Every file outside what changes on its own (logs, caches, timers).
snapshot() {
  find /etc /usr /var/lib /run/esparto -xdev 2>/dev/null \
    | grep -vE '^/var/lib/(systemd/(timers|random-seed|catalog)|dpkg/[a-z]+-old$|apt/)' | sort
}
running() { grep -qx esparto /proc/[0-9]*/comm 2>/dev/null; }
wait_until() { # SECONDS COMMAND…
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < deadline)) || return 1; sleep 0.2; done
}

before=$(snapshot)

dpkg -i /check/esparto.deb || fail "dpkg -i"
[[ $(systemctl is-enabled esparto) == disabled ]] || fail "enabled on install: $(systemctl is-enabled esparto)"
systemctl is-active --quiet esparto && fail "started on install"
[[ $(stat -c %a /etc/esparto/esparto.toml) == 600 ]] || fail "configuration mode $(stat -c %a /etc/esparto/esparto.toml)"
esparto check-config || fail "check-config on the installed configuration"
ls /usr/share/man/man8/esparto-run.8* >/dev/null || fail "no manual page"
systemd-analyze verify --man=no esparto.service || fail "systemd-analyze verify esparto.service"  # no man(1) here
ok "installed: unit disabled, inactive and verified, configuration 0600 and valid, manual pages"

# One IKE connection that waits for its peer: UDP 500 must be bound.
cat >/etc/esparto/esparto.toml <<'TOML'
[daemon]
workers = 2
[connections.site]
remote_addrs = ["192.0.2.2"]
local.auth = "psk"
local.id = "@west.example"
remote.auth = "psk"
remote.id = "@east.example"
[connections.site.children.lan]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
[secrets.site]
ids = ["@west.example", "@east.example"]
secret = "a check of the package, not a real secret"
TOML
esparto check-config || fail "check-config on the IKE configuration"
routing() { ip rule; ip -6 rule; ip route show table all; ip -6 route show table all; }
routing_before=$(routing)

systemctl start esparto || fail "systemctl start"
[[ $(prop ActiveState) == active ]] || fail "not active after start: $(prop ActiveState)"
pid=$(prop MainPID)
status_text=$(prop StatusText)
[[ $status_text == "running: 1 connection(s), 2 worker(s), TUN device esparto0" ]] || fail "STATUS=: $status_text"
ip link show esparto0 >/dev/null || fail "no TUN device once ready"
ss -Huln | grep -q ':500 ' || fail "UDP 500 not bound once ready"
ss -Huln | grep -q ':4500 ' || fail "UDP 4500 not bound once ready"
esparto status --json >/dev/null || fail "esparto status (socket found through the configuration)"
grep -qx 'CapEff:	0000000000001000' "/proc/$pid/status" || fail "$(grep Cap "/proc/$pid/status")"
grep -qx 'CapBnd:	0000000000001000' "/proc/$pid/status" || fail "$(grep Cap "/proc/$pid/status")"
grep -qx 'NoNewPrivs:	1' "/proc/$pid/status" || fail "no_new_privs not set"
journalctl -u esparto --no-pager -o cat | grep -F "kernel's flow learning" \
  && fail "the TUN steering program was not loaded under the unit (CAP_BPF, bpf(2))"
ok "started: ready with esparto0, UDP 500/4500, the control socket, the TUN steering program; CAP_NET_ADMIN alone (status: $status_text)"

# A second connection, then a reload: RELOADING=1 … READY=1 with the new
# status, from the same process.
cat >>/etc/esparto/esparto.toml <<'TOML'
[connections.branch]
remote_addrs = ["192.0.2.3"]
local.auth = "psk"
local.id = "@west.example"
remote.auth = "psk"
remote.id = "@branch.example"
[connections.branch.children.lan]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.3.0.0/16"]
[secrets.branch]
ids = ["@west.example", "@branch.example"]
secret = "another check of the package, not a real secret"
TOML
systemctl reload esparto || fail "systemctl reload"
status_text=$(prop StatusText)
[[ $status_text == "running: 2 connection(s), 2 worker(s), TUN device esparto0" ]] || fail "STATUS= after reload: $status_text"
[[ $(prop ActiveState) == active && $(prop MainPID) == "$pid" ]] || fail "reload changed the daemon"
journalctl -u esparto --no-pager -o cat | grep -q 'reloading the configuration' || fail "no reload in the log"
esparto status >/dev/null || fail "status after reload"
ok "reloaded: same daemon ($pid), a connection added (status: $status_text)"

# A broken file: `systemctl reload` fails, saying why; the daemon keeps
# what it runs.
cp /etc/esparto/esparto.toml /etc/esparto/esparto.toml.good
echo 'workrs = 3' >>/etc/esparto/esparto.toml
systemctl reload esparto 2>/dev/null && fail "systemctl reload of a broken file succeeded"
journalctl -u esparto --no-pager -o cat | grep -q "workrs: unknown key" || fail "the refused reload's error is not in the journal"
[[ $(prop ActiveState) == active && $(prop MainPID) == "$pid" ]] || fail "a refused reload changed the daemon"
[[ $(prop StatusText) == "$status_text" ]] || fail "STATUS= after a refused reload: $(prop StatusText)"
mv /etc/esparto/esparto.toml.good /etc/esparto/esparto.toml
ok "a broken file: systemctl reload fails with the error, the daemon runs on"

# A second daemon beside it: the instance v6 of esparto@.service, an IPv6
# peer, its own routing table and rule priorities; socket, device and
# state directory from its name.
cat >/etc/esparto/v6.toml <<'TOML'
[daemon]
workers = 1
routing_table = 221
routing_table_prio = 223
[connections.site6]
remote_addrs = ["fd00:99::2"]
local.auth = "psk"
local.id = "@west6.example"
remote.auth = "psk"
remote.id = "@east6.example"
[connections.site6.children.lan]
local_ts = ["fd00:1::/64"]
remote_ts = ["fd00:2::/64"]
[secrets.site6]
ids = ["@west6.example", "@east6.example"]
secret = "a check of the instance, not a real secret"
TOML
chmod 600 /etc/esparto/v6.toml
iprop() { systemctl show -p "$1" --value esparto@v6; }
systemd-analyze verify --man=no esparto@v6.service || fail "systemd-analyze verify esparto@v6.service"
esparto --instance v6 check-config || fail "check-config of instance v6"
systemctl start esparto@v6 || { journalctl -u esparto@v6 --no-pager -n 40; fail "systemctl start esparto@v6"; }
[[ $(iprop StatusText) == "running: 1 connection(s), 1 worker(s), TUN device esp-v6" ]] || fail "esparto@v6 STATUS=: $(iprop StatusText)"
ip link show esp-v6 >/dev/null || fail "no TUN device esp-v6"
[[ -S /run/esparto/v6/esparto.sock && -S /run/esparto/v6/charon.vici ]] || fail "instance sockets: $(ls -la /run/esparto/v6)"
[[ -d /var/lib/esparto/v6 ]] || fail "no state directory /var/lib/esparto/v6"
ss -Huln | grep -qF '[::]:500 ' || fail "instance v6: UDP 500 (IPv6) not bound"
# Whole outputs first: `grep -q` stops reading at its match, and under
# pipefail a writer cut short fails the pipeline.
s6=$(esparto --instance v6 status --json) || fail "esparto --instance v6 status"
grep -Eq '"tun": *"esp-v6"' <<<"$s6" || fail "esparto --instance v6 status: not the instance: $s6"
s4=$(esparto status --json) || fail "esparto status, the first daemon, after the instance started"
grep -Eq '"tun": *"esparto0"' <<<"$s4" || fail "esparto status: not the first daemon"
systemctl reload esparto@v6 || fail "systemctl reload esparto@v6"
[[ $(prop ActiveState) == active && $(prop MainPID) == "$pid" ]] || fail "the first daemon changed when the instance started"
systemctl stop esparto@v6 || fail "systemctl stop esparto@v6"
ip link show esp-v6 >/dev/null 2>&1 && fail "TUN device esp-v6 left after stop"
[[ -e /run/esparto/v6/esparto.sock ]] && fail "instance control socket left after stop"
ok "instance v6 (esparto@v6): beside esparto, IPv6 peer, esp-v6, /run/esparto/v6, /var/lib/esparto/v6; reloaded, stopped"

systemctl stop esparto || fail "systemctl stop"
[[ $(prop ActiveState) == inactive && $(prop Result) == success && $(prop ExecMainStatus) == 0 ]] \
  || fail "stop: $(prop ActiveState) $(prop Result) status $(prop ExecMainStatus)"
ip link show esparto0 >/dev/null 2>&1 && fail "TUN device left after stop"
[[ -e /run/esparto/esparto.sock ]] && fail "control socket left after stop"
compgen -G '/run/esparto/*.lock' >/dev/null && fail "lock files left after stop: $(ls /run/esparto)"
left=$(diff <(echo "$routing_before") <(routing))
[[ -z $left ]] || fail "routes or rules left after stop:
$left"
ok "stopped: exit 0; device, socket, lock files, routes and rules gone"

# Bad input: the unit without CAP_NET_ADMIN.
mkdir -p /run/systemd/system/esparto.service.d
printf '[Service]\nCapabilityBoundingSet=\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_BPF CAP_SETPCAP\n' \
  >/run/systemd/system/esparto.service.d/no-net-admin.conf
systemctl daemon-reload
systemctl start esparto && fail "started without CAP_NET_ADMIN"
sleep 5 # RestartSec=2s: a restart would have happened by now
[[ $(prop ExecMainStatus) == 78 ]] || fail "exit status $(prop ExecMainStatus), not 78"
[[ $(prop NRestarts) == 0 ]] || fail "restarted $(prop NRestarts) times"
journalctl -u esparto --no-pager -o cat | grep -F 'esparto run needs CAP_NET_ADMIN (to create the TUN device esparto0' \
  || fail "the refusal does not name CAP_NET_ADMIN"
ip link show esparto0 >/dev/null 2>&1 && fail "TUN device created without CAP_NET_ADMIN"
# The instance's directory stays (RuntimeDirectoryPreserve=yes), empty.
[[ -z $(ls -A /run/esparto | grep -vx v6) && -z $(ls -A /run/esparto/v6) ]] || fail "left in /run/esparto: $(ls -AR /run/esparto)"
[[ $(routing) == "$routing_before" ]] || fail "routes or rules changed without CAP_NET_ADMIN"
rm -r /run/systemd/system/esparto.service.d
systemctl daemon-reload
systemctl reset-failed esparto
ok "without CAP_NET_ADMIN: refused with status 78, not restarted, nothing created"

systemctl start esparto || fail "start before removal"
systemctl start esparto@v6 || fail "esparto@v6 start before removal"
dpkg -r esparto || fail "dpkg -r"
wait_until 10 eval '! running' || fail "daemon or instance still running after dpkg -r"
ip link show esparto0 >/dev/null 2>&1 && fail "TUN device left after dpkg -r"
ip link show esp-v6 >/dev/null 2>&1 && fail "instance TUN device left after dpkg -r"
[[ -f /etc/esparto/esparto.toml && -f /etc/esparto/v6.toml ]] || fail "dpkg -r removed a configuration"
[[ -e /usr/sbin/esparto ]] && fail "binary left after dpkg -r"
ok "removed: daemon and instance stopped, configurations kept"
# The instance's file is the operator's, not the package's: purge keeps it.
rm /etc/esparto/v6.toml

dpkg -P esparto || fail "dpkg -P"
after=$(snapshot)
left=$(diff <(echo "$before") <(echo "$after"))
[[ -z $left ]] || fail "the file system differs after purge:
$left"
ok "purged: the file system is as before the install"
echo PASS >/check/result
EOF
chmod +x "$work/inside.sh"

echo "check-deb: booting $root (private network, changes in a throwaway overlay)" >&2
# --keep-unit --register=no: nothing asked of the host's systemd, which the
# host need not run. CAP_BPF and bpf(2), which nspawn's own system call
# filter leaves out: for the daemon's TUN steering program.
rc=0
timeout 600 systemd-nspawn --quiet --keep-unit --register=no --directory="$root" --volatile=overlay \
  --private-network --capability=CAP_BPF --system-call-filter=bpf --machine="esparto-check-$$" \
  --bind="$work:/check" --bind-ro="$work/esparto-check.service:/etc/systemd/system/esparto-check.service" \
  --boot systemd.wants=esparto-check.service >"$work/console" 2>&1 </dev/null || rc=$?
cat "$work/log"
if [[ $(cat "$work/result" 2>/dev/null) != PASS ]]; then
  echo "check-deb: FAILED (systemd-nspawn exit $rc); console:" >&2
  tail -n 40 "$work/console" >&2
  exit 1
fi
echo "check-deb: PASS" >&2
