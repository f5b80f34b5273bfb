#!/usr/bin/env bash
# Interoperability of esparto-ike with strongSwan 5.9 (charon + swanctl),
# on the wire, in two network namespaces joined by a veth pair.
#
#   ns ikeint-e: 192.0.2.1  examples/ike_peer (esparto-ike endpoint, "moon")
#   ns ikeint-s: 192.0.2.2  charon with kernel-libipsec ("sun")
#
# Usage (as root):  tests/interop/strongswan.sh [scenario...]
# Scenarios: init resp algs wrongpsk child encap delete dpd rekey rekey_ours
#            rekey_ours_resp ike_ours ike_theirs timers (default: all)
# Needs: strongswan-charon strongswan-swanctl libcharon-extra-plugins
#        libstrongswan-standard-plugins libstrongswan-extra-plugins,
#        and the example built:
#        cargo build -p esparto-ike --example ike_peer
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
: "${CARGO_TARGET_DIR:=$HERE/../../../../target}"
BIN=${BIN:-$CARGO_TARGET_DIR/debug/examples/ike_peer}
[ -x "$BIN" ] || { echo "build the example first: cargo build -p esparto-ike --example ike_peer"; exit 2; }
[ -x /usr/lib/ipsec/charon ] || { echo "SKIP: no strongSwan (/usr/lib/ipsec/charon)"; exit 0; }

W=$(mktemp -d /tmp/ike-interop.XXXXXX)
NE=ikeint-e NS=ikeint-s
E_IP=192.0.2.1 S_IP=192.0.2.2
PSK="interop shared secret"
FAILS=0 PASSES=0

cleanup() {
    stop_charon
    ip netns del $NE 2>/dev/null; ip netns del $NS 2>/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT

ip netns del $NE 2>/dev/null; ip netns del $NS 2>/dev/null
ip netns add $NE && ip netns add $NS
ip link add ikeint-ve type veth peer name ikeint-vs
ip link set ikeint-ve netns $NE && ip link set ikeint-vs netns $NS
ip -n $NE addr add $E_IP/24 dev ikeint-ve && ip -n $NE link set ikeint-ve up && ip -n $NE link set lo up
ip -n $NS addr add $S_IP/24 dev ikeint-vs && ip -n $NS link set ikeint-vs up && ip -n $NS link set lo up
# libipsec routes the remote subnet via its TUN device and wants a local
# address inside the local selectors.
ip -n $NS addr add 10.2.0.1/16 dev lo && ip -n $NS addr add 10.22.0.1/16 dev lo

CHARON_PID=
start_charon() { # $1 = extra swanctl connection options, $2 = ike proposals, $3 = esp proposals, $4 = psk
    stop_charon
    mkdir -p "$W/run" "$W/swanctl"
    for d in x509 x509ca x509ocsp x509aa x509ac x509crl pubkey private rsa ecdsa bliss pkcs8 pkcs12; do mkdir -p "$W/swanctl/$d"; done
    cat > "$W/strongswan.conf" <<EOC
charon {
  load = random nonce openssl aes sha1 sha2 hmac kdf gcm chapoly curve25519 gmp pem pkcs1 x509 pubkey kernel-libipsec kernel-netlink socket-default vici
  install_routes = no
  filelog {
    interop {
      path = $W/charon.log
      default = 1
      ike = 2
      chd = 4
      cfg = 2
      net = 1
      append = no
      flush_line = yes
    }
  }
  plugins { vici { socket = unix://$W/charon.vici } }
}
EOC
    cat > "$W/swanctl/swanctl.conf" <<EOC
connections {
  sun {
    local_addrs = $S_IP
    remote_addrs = $E_IP
    proposals = $2
    mobike = no
    version = 2
    $1
    local { auth = psk
            id = @sun.example }
    remote { auth = psk
             id = @moon.example }
    children {
      net { local_ts = 10.2.0.0/16
            remote_ts = 10.1.0.0/16
            esp_proposals = $3
            ${CHILD_OPTS:-} }
      net2 { local_ts = 10.22.0.0/16
             remote_ts = 10.11.0.0/16
             esp_proposals = ${ESP2:-$3} }
    }
  }
}
secrets { ike-1 { id-1 = @moon.example
                  id-2 = @sun.example
                  secret = "$4" } }
EOC
    : > "$W/charon.log"
    rm -f "$W/charon.vici"
    ip netns exec $NS sh -c "mount --bind '$W/run' /run && STRONGSWAN_CONF='$W/strongswan.conf' exec /usr/lib/ipsec/charon" > "$W/charon.out" 2>&1 &
    CHARON_PID=$!
    for _ in $(seq 50); do [ -S "$W/charon.vici" ] && break; sleep 0.1; done
    local ok=
    for _ in $(seq 10); do swan --load-all >/dev/null 2>&1 && { ok=1; break; }; sleep 0.2; done
    [ -n "$ok" ] || { echo "swanctl --load-all failed"; cat "$W/charon.out"; }
}
stop_charon() {
    [ -n "$CHARON_PID" ] && kill "$CHARON_PID" 2>/dev/null && wait "$CHARON_PID" 2>/dev/null
    CHARON_PID=
}
swan() { ip netns exec $NS env SWANCTL_DIR="$W/swanctl" STRONGSWAN_CONF="$W/strongswan.conf" swanctl "$1" --uri "unix://$W/charon.vici" "${@:2}"; }

peer() { # esparto side, runs in the foreground for --seconds
    ip netns exec $NE "$BIN" --local $E_IP --remote $S_IP --local-id @moon.example --remote-id @sun.example \
        --psk "${EPSK:-$PSK}" --local-ts 10.1.0.0/16 --remote-ts 10.2.0.0/16 "$@"
}

check() { # name, condition...
    local name=$1; shift
    if "$@"; then echo "  ok   $name"; PASSES=$((PASSES+1)); else echo "  FAIL $name"; FAILS=$((FAILS+1)); fi
}
has() { grep -qF -- "$1" "$2"; }

# Keys: charon (chd 4) logs "encryption initiator key => N bytes" (and
# "integrity ...") hex dumps for the first Child SA. KEYMAT per direction is
# encryption key then integrity key (RFC 7296 §2.17); "initiator" keys
# protect traffic from the exchange initiator. Compare exactly.
keys_match() { # $1 = esparto output, $2 = esparto's role (initiator|responder)
    python3 - "$W/charon.log" "$1" "$2" <<'PY'
import re, sys
log = open(sys.argv[1]).read().splitlines()
keys = {}; cur = None
for line in log:
    m = re.search(r'(encryption|integrity) (initiator|responder) key => (\d+) bytes', line)
    if m:
        cur = (m.group(1), m.group(2)); n = int(m.group(3))
        if cur in keys:          # only the first Child SA
            cur = None; continue
        keys[cur] = ['', n]; continue
    m = re.search(r'CHD\]\s+\d+: ((?:[0-9A-F]{2} )+)', line)
    if cur and m and len(keys[cur][0]) < 2 * keys[cur][1]:
        keys[cur][0] += m.group(1).replace(' ', '').lower()
    elif not m:
        cur = None
d = lambda who: keys.get(('encryption', who), [''])[0] + keys.get(('integrity', who), [''])[0]
line = next(l for l in open(sys.argv[2]) if l.startswith('KEYS'))
inkey = re.search(r'inkey=([0-9a-f]+)', line).group(1)
outkey = re.search(r'outkey=([0-9a-f]+)', line).group(1)
i_dir, r_dir = d('initiator'), d('responder')
ok = (outkey, inkey) == (i_dir, r_dir) if sys.argv[3] == 'initiator' else (inkey, outkey) == (i_dir, r_dir)
if not ok:
    print('   esparto in/out:', inkey, outkey); print('   charon  i/r   :', i_dir, r_dir)
sys.exit(0 if ok and i_dir else 1)
PY
}

scenario_init() {
    echo "== esparto initiates, strongSwan responds (aes256gcm16-prfsha256-x25519 / aes256gcm16)"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 4 --print-keys > "$W/e.out" 2>&1
    check "esparto IKE_SA up" has IKE_UP "$W/e.out"
    check "esparto CHILD_SA up" has "CHILD_UP child=net" "$W/e.out"
    check "charon CHILD_SA established" has "CHILD_SA net{1} established" "$W/charon.log"
    check "charon narrowed nothing (10.2.0.0/16 === 10.1.0.0/16)" has "10.2.0.0/16 === 10.1.0.0/16" "$W/charon.log"
    check "Child SA keys equal charon's" keys_match "$W/e.out" initiator
    cp "$W/e.out" "$W/init.e.out"; cp "$W/charon.log" "$W/init.charon.log"
}

scenario_resp() {
    echo "== strongSwan initiates, esparto responds"
    start_charon "" aes128-sha256-ecp256 aes128-sha256 "$PSK"
    peer --seconds 5 --print-keys --ike aes128-sha256-ecp256 --esp aes128-sha256 > "$W/e.out" 2>&1 &
    local p=$!; sleep 0.5
    swan --initiate --child net --timeout 4 > "$W/init.out" 2>&1
    wait $p
    check "esparto IKE_SA up as responder" has IKE_UP "$W/e.out"
    check "esparto CHILD_SA up" has "CHILD_UP child=net" "$W/e.out"
    check "charon: initiate completed successfully" has "completed successfully" "$W/init.out"
    check "Child SA keys equal charon's" keys_match "$W/e.out" responder
}

scenario_algs() {
    for combo in "aes256-sha256-modp2048 aes256-sha256" "chacha20poly1305-prfsha256-x25519 chacha20poly1305" \
                 "aes256gcm16-prfsha384-ecp256 aes128gcm16" "aes128-sha256-modp3072 aes128-sha1" \
                 "aes256gcm16-prfsha512-ecp384 aes256gcm16"; do
        set -- $combo
        echo "== algorithms $1 / $2 (both directions)"
        start_charon "" "$1" "$2" "$PSK"
        peer --initiate --seconds 4 --print-keys --ike "$1" --esp "$2" > "$W/e.out" 2>&1
        check "$1 initiator: CHILD_SA up" has "CHILD_UP child=net" "$W/e.out"
        check "$1 initiator: keys equal" keys_match "$W/e.out" initiator
        start_charon "" "$1" "$2" "$PSK"
        peer --seconds 5 --print-keys --ike "$1" --esp "$2" > "$W/e.out" 2>&1 &
        local p=$!; sleep 0.5
        swan --initiate --child net --timeout 4 > "$W/init.out" 2>&1
        wait $p
        check "$1 responder: CHILD_SA up" has "CHILD_UP child=net" "$W/e.out"
        check "$1 responder: keys equal" keys_match "$W/e.out" responder
    done
}

scenario_wrongpsk() {
    echo "== wrong PSK, both directions"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "a different secret"
    peer --initiate --seconds 4 > "$W/e.out" 2>&1
    check "esparto initiator: AuthFailed RejectedByPeer" has "RejectedByPeer" "$W/e.out"
    check "esparto initiator: no CHILD_SA" bash -c "! grep -q CHILD_UP '$W/e.out'"
    check "charon: our AUTH did not verify (MAC mismatched)" grep -q "MAC mismatched" "$W/charon.log"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "a different secret"
    peer --seconds 5 > "$W/e.out" 2>&1 &
    local p=$!; sleep 0.5
    swan --initiate --child net --timeout 4 > "$W/init.out" 2>&1
    wait $p
    check "esparto responder: AuthFailed BadAuth" has "BadAuth" "$W/e.out"
    check "charon: received AUTHENTICATION_FAILED" has "AUTHENTICATION_FAILED" "$W/charon.log"
}

scenario_child() {
    echo "== CREATE_CHILD_SA: a second child with PFS, both directions"
    ESP2=aes128gcm16-x25519 start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 5 --print-keys --child2-esp aes128gcm16-x25519 --child2-local-ts 10.11.0.0/16 --child2-remote-ts 10.22.0.0/16 > "$W/e.out" 2>&1
    check "esparto: second child up" has "CHILD_UP child=net2" "$W/e.out"
    check "charon: net2 established" has "CHILD_SA net2{2} established" "$W/charon.log"
    ESP2=aes128gcm16-x25519 start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --seconds 6 --child2-esp aes128gcm16-x25519 --child2-local-ts 10.11.0.0/16 --child2-remote-ts 10.22.0.0/16 > "$W/e.out" 2>&1 &
    local p=$!; sleep 0.5
    swan --initiate --child net --timeout 4 > /dev/null 2>&1
    swan --initiate --child net2 --timeout 4 > "$W/init.out" 2>&1
    wait $p
    check "esparto responder: second child up" has "CHILD_UP child=net2" "$W/e.out"
    check "charon: net2 initiate ok" has "completed successfully" "$W/init.out"
}

scenario_encap() {
    echo "== strongSwan forces UDP encapsulation (encap = yes)"
    start_charon "encap = yes" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 4 > "$W/e.out" 2>&1
    check "esparto: child with encap=true on 4500" has "encap=true local=$E_IP:4500" "$W/e.out"
    echo "== esparto forces UDP encapsulation"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --encap --seconds 4 > "$W/e.out" 2>&1
    check "esparto: encap=true" has "encap=true" "$W/e.out"
    check "charon: sees a NAT (faked by us)" grep -q "remote host is behind NAT" "$W/charon.log"
}

scenario_delete() {
    echo "== INFORMATIONAL delete, both directions"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 4 --terminate-after 2 > "$W/e.out" 2>&1
    check "esparto: IKE SA deleted (Terminated)" has "reason: Terminated" "$W/e.out"
    check "charon: deleted on our request" grep -q "received DELETE for IKE_SA\|deleting IKE_SA" "$W/charon.log"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 5 > "$W/e.out" 2>&1 &
    local p=$!; sleep 2
    swan --terminate --child net --timeout 3 > /dev/null 2>&1
    sleep 0.5
    swan --terminate --ike sun --timeout 3 > /dev/null 2>&1
    wait $p
    check "esparto: child deleted by peer" grep -q "ChildSaDeleted.*DeletedByPeer" "$W/e.out"
    check "esparto: IKE SA deleted by peer" grep -q "IkeSaDeleted.*DeletedByPeer" "$W/e.out"
}

scenario_dpd() {
    echo "== strongSwan liveness checks (dpd_delay = 2s) answered"
    start_charon "dpd_delay = 2s" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 7 > "$W/e.out" 2>&1
    check "esparto: SA still up" bash -c "! grep -q IkeSaDeleted '$W/e.out'"
    check "charon: sent DPD" grep -q "sending DPD request" "$W/charon.log"
    echo "== esparto liveness checks (--dpd 2)"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --dpd 2 --seconds 6 > "$W/e.out" 2>&1
    check "esparto: SA still up" bash -c "! grep -q IkeSaDeleted '$W/e.out'"
    check "charon: answered INFORMATIONAL" grep -q "generating INFORMATIONAL response" "$W/charon.log"
}

# The SPIs charon lists (`swanctl --list-sas`) against esparto's output:
# charon's inbound SPI of its only INSTALLED "net" CHILD_SA must be our
# outbound SPI of our last "net" CHILD_UP and vice versa (charon 5.9 keeps
# a rekeyed SA listed as DELETED for a few seconds, for late packets); with
# $3 = an IKE SPI (ours), the IKE SA line must carry it.
sas_match() { # $1 = esparto output, $2 = list-sas output, [$3 = our IKE SPI]
    python3 - "$1" "$2" "${3:-}" <<'PY'
import re, sys
ups = [l for l in open(sys.argv[1]) if l.startswith('CHILD_UP child=net ')]
if not ups:
    print('   no CHILD_UP'); sys.exit(1)
ours_in = re.search(r' in=([0-9a-f]{8})', ups[-1]).group(1)
ours_out = re.search(r' out=([0-9a-f]{8})', ups[-1]).group(1)
text = open(sys.argv[2]).read()
blocks = re.split(r'^(?=\s+net: #)', text, flags=re.M)
live = ''.join(b for b in blocks if re.match(r'\s+net: #\d+, reqid \d+, INSTALLED', b))
c_in = re.findall(r'^\s+in\s+([0-9a-f]{8})', live, re.M)
c_out = re.findall(r'^\s+out\s+([0-9a-f]{8})', live, re.M)
ok = c_in == [ours_out] and c_out == [ours_in]
ike = sys.argv[3]
if ike:
    ok = ok and re.search(r'IKEv2, .*' + ike, text) is not None
if not ok:
    print('   esparto in/out:', ours_in, ours_out, 'IKE', ike)
    print('   charon  in/out:', c_in, c_out)
    print(''.join('   | ' + l + '\n' for l in text.splitlines()))
sys.exit(0 if ok else 1)
PY
}
# The number of lines matching $1 in $2 is at least $3.
at_least() { [ "$(grep -c -- "$1" "$2")" -ge "$3" ]; }
last_ike_spi() { grep -o 'IKE_REKEYED old=[0-9a-f]* new=[0-9a-f]*' "$1" | tail -1 | sed 's/.*new=//'; }

scenario_rekey() {
    echo "== strongSwan rekeys the Child SA (swanctl --rekey --child, REKEY_SA), esparto responds"
    for esp in aes256gcm16 aes128gcm16-x25519; do
        start_charon "" aes256gcm16-prfsha256-x25519 "$esp" "$PSK"
        peer --initiate --seconds 7 --esp "$esp" > "$W/e.out" 2>&1 &
        local p=$!; sleep 2
        swan --rekey --child net > "$W/rk.out" 2>&1
        sleep 1.5
        swan --list-sas > "$W/sas.out" 2>&1
        wait $p
        check "$esp: esparto announces the new SA as a rekey, outbound held back" grep -q "CHILD_UP child=net .*rekeys=[0-9a-f]\{8\} active=false" "$W/e.out"
        check "$esp: esparto switches outbound when charon deletes the old SA" grep -q "ChildSaOutboundActive" "$W/e.out"
        check "$esp: esparto: old SA deleted as Rekeyed" grep -q "CHILD_DOWN .*reason=Rekeyed" "$W/e.out"
        check "$esp: charon lists the new SPIs only" sas_match "$W/e.out" "$W/sas.out"
    done
}

scenario_rekey_ours() {
    echo "== esparto rekeys the Child SA (rekey_child), strongSwan responds; ± PFS"
    for esp in aes256gcm16 aes128gcm16-x25519 aes128-sha256-ecp256; do
        start_charon "" aes256gcm16-prfsha256-x25519 "$esp" "$PSK"
        peer --initiate --seconds 6 --esp "$esp" --rekey-child-after 2 > "$W/e.out" 2>&1 &
        local p=$!; sleep 4
        swan --list-sas > "$W/sas.out" 2>&1
        wait $p
        check "$esp: esparto: new SA replaces the old, sent on at once" grep -q "CHILD_UP child=net .*rekeys=[0-9a-f]\{8\} active=true" "$W/e.out"
        check "$esp: esparto: old SA deleted as Rekeyed" grep -q "CHILD_DOWN .*reason=Rekeyed" "$W/e.out"
        check "$esp: charon: rekey answered" grep -q "CHILD_SA net{2} established" "$W/charon.log"
        check "$esp: charon lists the new SPIs only" sas_match "$W/e.out" "$W/sas.out"
        case $esp in *-x25519|*-ecp256)
            check "$esp: charon used PFS for the rekey" grep -q "ESP:.*/\(CURVE_25519\|ECP_256\)" "$W/sas.out";;
        esac
    done
}

scenario_rekey_ours_resp() {
    echo "== strongSwan initiates; esparto (responder) rekeys the Child SA and the IKE SA"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --seconds 8 --rekey-child-after 2 --rekey-ike-after 4 > "$W/e.out" 2>&1 &
    local p=$!; sleep 0.5
    swan --initiate --child net --timeout 4 > /dev/null 2>&1
    sleep 5
    swan --list-sas > "$W/sas.out" 2>&1
    wait $p
    check "esparto: Child SA rekeyed" grep -q "CHILD_UP child=net .*rekeys=[0-9a-f]\{8\} active=true" "$W/e.out"
    check "esparto: IKE SA rekeyed" grep -q "IKE_REKEYED" "$W/e.out"
    check "esparto: nothing deleted but the rekeyed Child SA" bash -c "! grep 'CHILD_DOWN\|IkeSaDeleted' '$W/e.out' | grep -vq 'reason=Rekeyed'"
    check "charon lists our new IKE SPI and Child SPIs" sas_match "$W/e.out" "$W/sas.out" "$(last_ike_spi "$W/e.out")"
}

scenario_ike_ours() {
    echo "== esparto rekeys the IKE SA (rekey_ike), strongSwan responds"
    for ike in aes256gcm16-prfsha256-x25519 aes128-sha256-ecp256; do
        start_charon "" "$ike" aes256gcm16 "$PSK"
        peer --initiate --seconds 7 --ike "$ike" --rekey-ike-after 2 --rekey-child-after 4 > "$W/e.out" 2>&1 &
        local p=$!; sleep 5.5
        swan --list-sas > "$W/sas.out" 2>&1
        wait $p
        check "$ike: esparto: IKE SA rekeyed" grep -q "IKE_REKEYED" "$W/e.out"
        check "$ike: esparto: Child SA survived, then rekeyed over the new IKE SA" grep -q "CHILD_UP child=net .*rekeys=[0-9a-f]\{8\}" "$W/e.out"
        check "$ike: charon: one IKE SA, ours" sas_match "$W/e.out" "$W/sas.out" "$(last_ike_spi "$W/e.out")"
        check "$ike: charon: the old IKE SA is gone" bash -c "[ \$(grep -c ESTABLISHED '$W/sas.out') -eq 1 ]"
    done
}

scenario_ike_theirs() {
    echo "== strongSwan rekeys the IKE SA (swanctl --rekey --ike), esparto responds, both roles"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --initiate --seconds 6 > "$W/e.out" 2>&1 &
    local p=$!; sleep 2
    swan --rekey --ike sun > "$W/rk.out" 2>&1
    sleep 1.5
    swan --list-sas > "$W/sas.out" 2>&1
    wait $p
    check "esparto initiator: IKE_REKEYED" grep -q "IKE_REKEYED" "$W/e.out"
    check "esparto initiator: Child SA kept" bash -c "! grep -q CHILD_DOWN '$W/e.out'"
    check "charon lists our new IKE SPI, same Child SPIs" sas_match "$W/e.out" "$W/sas.out" "$(last_ike_spi "$W/e.out")"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16 "$PSK"
    peer --seconds 7 > "$W/e.out" 2>&1 &
    p=$!; sleep 0.5
    swan --initiate --child net --timeout 4 > /dev/null 2>&1
    sleep 1
    swan --rekey --ike sun > "$W/rk.out" 2>&1
    sleep 1.5
    swan --rekey --child net > "$W/rk.out" 2>&1
    sleep 1.5
    swan --list-sas > "$W/sas.out" 2>&1
    wait $p
    check "esparto responder: IKE_REKEYED" grep -q "IKE_REKEYED" "$W/e.out"
    check "esparto responder: Child SA rekeyed over the new IKE SA" grep -q "CHILD_UP child=net .*rekeys=" "$W/e.out"
    check "charon lists our new IKE SPI and Child SPIs" sas_match "$W/e.out" "$W/sas.out" "$(last_ike_spi "$W/e.out")"
}

scenario_timers() {
    echo "== lifetimes: esparto rekeys the Child SA every ~3 s and the IKE SA every ~5 s"
    start_charon "" aes256gcm16-prfsha256-x25519 aes256gcm16-x25519 "$PSK"
    peer --initiate --seconds 13 --esp aes256gcm16-x25519 --child-rekey-time 3 --ike-rekey-time 5 > "$W/e.out" 2>&1 &
    local p=$!; sleep 12
    swan --list-sas > "$W/sas.out" 2>&1
    wait $p
    check "esparto: at least 3 Child SA rekeys" at_least "CHILD_UP child=net .*rekeys=[0-9a-f]" "$W/e.out" 3
    check "esparto: at least 2 IKE SA rekeys" at_least "IKE_REKEYED" "$W/e.out" 2
    check "esparto: no failure" bash -c "! grep -q 'ChildSaFailed\|IkeSaDeleted' '$W/e.out'"
    check "charon: one IKE SA, one CHILD_SA, the current ones" sas_match "$W/e.out" "$W/sas.out" "$(last_ike_spi "$W/e.out")"
}

SCEN=${*:-init resp algs wrongpsk child encap delete dpd rekey rekey_ours rekey_ours_resp ike_ours ike_theirs timers}
for s in $SCEN; do "scenario_$s"; done
echo "interop: $PASSES passed, $FAILS failed (logs in $W${KEEP:+, kept})"
[ $FAILS -eq 0 ]
