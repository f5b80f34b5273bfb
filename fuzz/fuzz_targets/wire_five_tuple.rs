//! Fuzz `FiveTuple::extract`: never panics, and a tuple it returns is
//! consistent — the address family matches the version nibble, and a
//! minimal packet rebuilt from the tuple extracts to the same tuple.
#![no_main]

use core::net::IpAddr;

use esparto_wire::ip::{FiveTuple, IpVersion, proto};
use esparto_wire::ipv6::ext;
use esparto_wire::{ipv4, ipv6};
use libfuzzer_sys::fuzz_target;

/// Upper-layer bytes that carry `t`'s "ports" the way `extract` reads them.
fn l4(t: &FiveTuple) -> Vec<u8> {
    let mut v = Vec::with_capacity(8);
    match t.proto {
        proto::ICMP | proto::ICMPV6 => v.extend([t.src_port as u8, t.dst_port as u8, 0, 0]),
        _ => {
            v.extend(t.src_port.to_be_bytes());
            v.extend(t.dst_port.to_be_bytes());
        }
    }
    v.extend([0u8; 4]);
    v
}

fn is_ext_header(p: u8) -> bool {
    matches!(
        p,
        ext::HOP_BY_HOP
            | ext::ROUTING
            | ext::FRAGMENT
            | ext::AH
            | ext::DEST_OPTS
            | ext::HIP
            | ext::SHIM6
            | ext::EXPERIMENTAL_1
            | ext::EXPERIMENTAL_2
    )
}

fn rebuild(t: &FiveTuple) -> Vec<u8> {
    match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let body = l4(t);
            let r = ipv4::Repr {
                src_addr: s,
                dst_addr: d,
                protocol: t.proto,
                payload_len: body.len(),
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident: 0,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
            };
            let mut v = vec![0u8; r.buffer_len()];
            let mut p = ipv4::Packet::new_unchecked(&mut v[..]);
            r.emit(&mut p).expect("emit");
            p.payload_mut().copy_from_slice(&body);
            v
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            // An extension-header number as the protocol only comes out of a
            // non-initial fragment; rebuild one (its ports are 0).
            let (next, body) = if is_ext_header(t.proto) {
                assert_eq!((t.src_port, t.dst_port), (0, 0));
                (ext::FRAGMENT, vec![t.proto, 0, 0, 8, 0, 0, 0, 1])
            } else {
                (t.proto, l4(t))
            };
            let r = ipv6::Repr {
                src_addr: s,
                dst_addr: d,
                next_header: next,
                payload_len: body.len(),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            };
            let mut v = vec![0u8; r.buffer_len()];
            let mut p = ipv6::Packet::new_unchecked(&mut v[..]);
            r.emit(&mut p).expect("emit");
            p.payload_mut().copy_from_slice(&body);
            v
        }
        _ => panic!("mixed address families in {t:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(t) = FiveTuple::extract(data) else {
        return;
    };
    match IpVersion::of(data).expect("extract succeeded") {
        IpVersion::V4 => assert!(t.src.is_ipv4() && t.dst.is_ipv4()),
        IpVersion::V6 => assert!(t.src.is_ipv6() && t.dst.is_ipv6()),
    }
    if matches!(t.proto, proto::ICMP | proto::ICMPV6) {
        assert!(t.src_port <= 255 && t.dst_port <= 255);
    }
    let again = FiveTuple::extract(&rebuild(&t)).expect("rebuilt packet extracts");
    assert_eq!(again, t);
});
