#!/usr/bin/env python3
"""Builds the hex packets in this directory.

They are written the way a capture would show them (real field values,
correct checksums). Checksums are computed here by a separate, naive
RFC 1071 implementation, so the Rust code is tested against an independent
one. Run from this directory: python3 make_testdata.py
"""
import struct, ipaddress

def csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF

def v4(src, dst, proto, payload, ident=0x1c46, flags=0x4000, ttl=64, tos=0, options=b""):
    ihl = 5 + len(options) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos, ihl * 4 + len(payload), ident, flags, ttl, proto, 0,
                    ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed) + options
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload

def ph4(src, dst, proto, length):
    return ipaddress.IPv4Address(src).packed + ipaddress.IPv4Address(dst).packed + struct.pack("!BBH", 0, proto, length)

def ph6(src, dst, proto, length):
    return ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + struct.pack("!I3xB", length, proto)

def udp(sport, dport, data, ph):
    u = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    c = csum(ph(8 + len(data)) + u) or 0xFFFF
    return u[:6] + struct.pack("!H", c) + u[8:]

def write(name, comment, data):
    with open(name, "w") as f:
        for line in comment.strip().splitlines():
            f.write("# " + line + "\n")
        for i in range(0, len(data), 16):
            f.write(" ".join("%02x" % x for x in data[i:i + 16]) + "\n")

# --- IPv4 UDP DNS query for example.com A ---
dns = bytes.fromhex("abcd01000001000000000000") + b"\x07example\x03com\x00" + struct.pack("!HH", 1, 1)
s, d = "192.168.1.10", "192.168.1.1"
write("ipv4_udp_dns.hex", "IPv4/UDP DNS query 192.168.1.10:54321 -> 192.168.1.1:53, A example.com, DF, TTL 64",
      v4(s, d, 17, udp(54321, 53, dns, lambda n: ph4(s, d, 17, n))))

# --- IPv4 with Router Alert option carrying IGMPv2 membership report ---
igmp = struct.pack("!BBH4s", 0x16, 0, 0, ipaddress.IPv4Address("239.1.2.3").packed)
igmp = igmp[:2] + struct.pack("!H", csum(igmp)) + igmp[4:]
write("ipv4_options_igmp.hex", "IPv4 with Router Alert option (RFC 2113), IGMPv2 report for 239.1.2.3, TTL 1",
      v4("10.0.0.5", "239.1.2.3", 2, igmp, ident=0, flags=0, ttl=1, tos=0xc0, options=bytes([0x94, 4, 0, 0])))

# --- IPv4 TCP SYN with Linux-style options ---
s, d = "10.1.0.2", "10.2.0.3"
opts = struct.pack("!BBH", 2, 4, 1460) + bytes([4, 2]) + struct.pack("!BBII", 8, 10, 0x0a0b0c0d, 0) + bytes([1, 3, 3, 7])
tcp = struct.pack("!HHIIBBHHH", 40000, 443, 0x12345678, 0, (5 + len(opts) // 4) << 4, 0x02, 64240, 0, 0) + opts
tcp = tcp[:16] + struct.pack("!H", csum(ph4(s, d, 6, len(tcp)) + tcp)) + tcp[18:]
write("ipv4_tcp_syn_options.hex",
      "IPv4/TCP SYN 10.1.0.2:40000 -> 10.2.0.3:443, seq 0x12345678, win 64240,\n"
      "options MSS 1460, SACK permitted, timestamps 0x0a0b0c0d/0, NOP, window scale 7",
      v4(s, d, 6, tcp, ident=0xbeef))

# --- IPv4 ICMP echo request (56 bytes of data, like ping) ---
data = bytes(range(0x10, 0x10 + 48)) + struct.pack("!Q", 0x0123456789abcdef)
icmp = struct.pack("!BBHHH", 8, 0, 0, 0x4242, 1) + data
icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
write("ipv4_icmp_echo.hex", "IPv4 ICMP echo request 10.1.0.2 -> 10.2.0.3, id 0x4242 seq 1, 56 data bytes",
      v4("10.1.0.2", "10.2.0.3", 1, icmp, ident=0x0001))

# --- IPv6 Hop-by-Hop (Router Alert + PadN) + Fragment (first, M=1) + UDP (SIP) ---
s6, d6 = "2001:db8:1::10", "2001:db8:2::20"
sip = b"OPTIONS sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8:1::10]:5060\r\n"
# The UDP length covers the whole original datagram; only a first piece is here.
full_len = 8 + len(sip) + 1000
full = struct.pack("!HHHH", 5060, 5061, full_len, 0) + sip + b"\0" * 1000
c = csum(ph6(s6, d6, 17, full_len) + full) or 0xFFFF
first = (full[:6] + struct.pack("!H", c) + full[8:])[:8 + len(sip) - (8 + len(sip)) % 8]
hbh = bytes([44, 0]) + bytes([5, 2, 0, 0]) + bytes([1, 0])  # Router Alert (MLD=0) + PadN(0)
frag = struct.pack("!BBHI", 17, 0, (0 << 3) | 1, 0xcafef00d)
payload = hbh + frag + first
hdr = struct.pack("!IHBB16s16s", (6 << 28) | (0xb8 << 20) | 0x54321, len(payload), 0, 64,
                  ipaddress.IPv6Address(s6).packed, ipaddress.IPv6Address(d6).packed)
write("ipv6_hbh_frag_udp.hex",
      "IPv6 2001:db8:1::10 -> 2001:db8:2::20, TC 0xb8 (EF), flow 0x54321, hop limit 64,\n"
      "Hop-by-Hop (Router Alert) + Fragment (offset 0, M=1, id 0xcafef00d) + first piece of UDP 5060 -> 5061",
      hdr + payload)

# --- IPv6 ICMPv6 echo request (like ping -6) ---
s6, d6 = "fe80::1c2d:3e4f:5a6b:7c8d", "2001:db8:2::20"
data = bytes(range(0x20, 0x20 + 32))
icmp = struct.pack("!BBHHH", 128, 0, 0, 0x1d2c, 7) + data
icmp = icmp[:2] + struct.pack("!H", csum(ph6(s6, d6, 58, len(icmp)) + icmp)) + icmp[4:]
hdr = struct.pack("!IHBB16s16s", 6 << 28, len(icmp), 58, 64,
                  ipaddress.IPv6Address(s6).packed, ipaddress.IPv6Address(d6).packed)
write("ipv6_icmpv6_echo.hex", "IPv6 ICMPv6 echo request fe80::1c2d:3e4f:5a6b:7c8d -> 2001:db8:2::20, id 0x1d2c seq 7, 32 data bytes",
      hdr + icmp)
