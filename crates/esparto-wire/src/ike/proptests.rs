//! Property tests: `parse(emit(x)) == x` for every Repr and whole messages,
//! and arbitrary bytes never panic the parsers.

#![allow(clippy::unwrap_used)]

use super::*;
use core::net::IpAddr;
use proptest::prelude::*;

fn spi() -> impl Strategy<Value = Spi> {
    prop_oneof![
        Just(Spi::None),
        any::<u32>().prop_map(Spi::U32),
        any::<u64>().prop_map(Spi::U64)
    ]
}

fn transform() -> impl Strategy<Value = TransformRepr> {
    (1u8..=5, any::<u16>(), proptest::option::of(any::<u16>())).prop_map(|(k, id, kl)| {
        TransformRepr {
            kind: TransformType(k),
            id,
            key_length: kl,
            unknown_attribute: false,
        }
    })
}

fn proposal() -> impl Strategy<Value = ProposalRepr> {
    (
        any::<u8>(),
        1u8..=3,
        spi(),
        proptest::collection::vec(transform(), 1..8),
    )
        .prop_map(|(number, p, spi, transforms)| ProposalRepr {
            number,
            protocol: ProtocolId(p),
            spi,
            transforms,
        })
}

fn sa() -> impl Strategy<Value = SaRepr> {
    proptest::collection::vec(proposal(), 1..5).prop_map(|proposals| SaRepr { proposals })
}

fn selector() -> impl Strategy<Value = TrafficSelectorRepr> {
    let v4 =
        (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
    let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
        .prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
    (any::<u8>(), any::<u16>(), any::<u16>(), prop_oneof![v4, v6]).prop_map(
        |(ip_protocol, start_port, end_port, (start_addr, end_addr))| TrafficSelectorRepr {
            ip_protocol,
            start_port,
            end_port,
            start_addr,
            end_addr,
        },
    )
}

fn ts() -> impl Strategy<Value = TsRepr> {
    proptest::collection::vec(selector(), 1..6).prop_map(|selectors| TsRepr { selectors })
}

/// Owned data for the borrowing Reprs: (kind, a small int, bytes).
fn payload_seed() -> impl Strategy<Value = (u8, u16, Vec<u8>, SaRepr, TsRepr, Vec<u32>)> {
    (
        0u8..12,
        any::<u16>(),
        proptest::collection::vec(any::<u8>(), 16..64),
        sa(),
        ts(),
        proptest::collection::vec(any::<u32>(), 0..5),
    )
}

fn build(seed: &(u8, u16, Vec<u8>, SaRepr, TsRepr, Vec<u32>)) -> PayloadRepr<'_> {
    let (kind, n, bytes, sa, ts, spis) = seed;
    match kind {
        0 => PayloadRepr::Sa(sa.clone()),
        1 => PayloadRepr::Ke(KeRepr {
            group: *n,
            data: bytes,
        }),
        2 => PayloadRepr::IdI(IdRepr {
            id_type: IdType(*n as u8),
            data: bytes,
        }),
        3 => PayloadRepr::IdR(IdRepr {
            id_type: IdType(*n as u8),
            data: bytes,
        }),
        4 => PayloadRepr::Auth(AuthRepr {
            method: AuthMethod(*n as u8),
            data: bytes,
        }),
        5 => PayloadRepr::Nonce(NonceRepr { data: bytes }),
        6 => PayloadRepr::Notify(NotifyRepr {
            protocol: ProtocolId(3),
            spi: Spi::U32(u32::from(*n)),
            kind: NotifyType(*n),
            data: bytes,
        }),
        7 if spis.is_empty() => PayloadRepr::Delete(DeleteRepr {
            protocol: ProtocolId::IKE,
            spis: vec![],
        }),
        7 => PayloadRepr::Delete(DeleteRepr {
            protocol: ProtocolId::ESP,
            spis: spis.clone(),
        }),
        8 => PayloadRepr::VendorId(VendorIdRepr { data: bytes }),
        9 => PayloadRepr::TsI(ts.clone()),
        10 => PayloadRepr::TsR(ts.clone()),
        _ => PayloadRepr::Other {
            payload_type: PayloadType::CERTREQ,
            body: bytes,
        },
    }
}

fn header(exchange: u8, flags: (bool, bool), spis: (u64, u64), mid: u32) -> HeaderRepr {
    HeaderRepr {
        spi_i: spis.0,
        spi_r: spis.1,
        next_payload: PayloadType::NONE,
        exchange: ExchangeType(exchange),
        initiator: flags.0,
        response: flags.1,
        message_id: mid,
        length: 0,
    }
}

proptest! {
    #[test]
    fn sa_round_trip(sa in sa()) {
        let mut b = vec![0u8; sa.buffer_len()];
        sa.emit(&mut b).unwrap();
        prop_assert_eq!(SaRepr::parse(&b).unwrap(), sa);
    }

    #[test]
    fn ts_round_trip(ts in ts()) {
        let mut b = vec![0u8; ts.buffer_len()];
        ts.emit(&mut b).unwrap();
        prop_assert_eq!(TsRepr::parse(&b).unwrap(), ts);
    }

    #[test]
    fn message_round_trip(
        seeds in proptest::collection::vec(payload_seed(), 0..8),
        ex in 34u8..=37, flags in any::<(bool, bool)>(), spis in any::<(u64, u64)>(), mid in any::<u32>(),
    ) {
        let payloads: Vec<_> = seeds.iter().map(build).collect();
        let h = header(ex, flags, spis, mid);
        let mut out = Vec::new();
        emit_message(&h, &payloads, &mut out).unwrap();
        let m = Message::parse(&out).unwrap();
        prop_assert_eq!(m.payloads, payloads);
        prop_assert_eq!(m.header.message_id, mid);
        prop_assert_eq!((m.header.spi_i, m.header.spi_r), spis);
        prop_assert_eq!((m.header.initiator, m.header.response), flags);
        prop_assert_eq!(m.sk, None);
    }

    #[test]
    fn encrypted_round_trip(
        seeds in proptest::collection::vec(payload_seed(), 0..6),
        iv_len in 0usize..17, icv_len in 0usize..33, block_size in 1usize..17,
    ) {
        let payloads: Vec<_> = seeds.iter().map(build).collect();
        let layout = SkLayout { iv_len, icv_len, block_size };
        let mut out = Vec::new();
        let off = emit_encrypted(&header(35, (true, false), (1, 2), 1), &payloads, &layout, &mut out).unwrap();
        let m = Message::parse(&out).unwrap();
        let sk = m.sk.unwrap();
        prop_assert_eq!(sk.offset, off);
        sk.check(&layout).unwrap();
        let start = sk.iv_offset() + iv_len;
        let end = sk.offset + GENERIC_HEADER_LEN + sk.body_len - icv_len;
        let plain = strip_padding(&out[start..end]).unwrap();
        prop_assert_eq!(parse_payloads(sk.first_inner, plain).unwrap(), payloads);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Message::parse(&data);
        let _ = parse_payloads(PayloadType::SA, &data);
        let _ = SaRepr::parse(&data);
        let _ = TsRepr::parse(&data);
        let _ = DeleteRepr::parse(&data);
        let _ = NotifyRepr::parse(&data);
        let _ = strip_padding(&data);
    }

    #[test]
    fn arbitrary_bytes_behind_valid_header_never_panic(
        first in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut out = Vec::new();
        emit_message(&header(35, (true, false), (1, 2), 0), &[], &mut out).unwrap();
        out[16] = first;
        out.extend_from_slice(&body);
        let len = out.len() as u32;
        out[24..28].copy_from_slice(&len.to_be_bytes());
        let _ = Message::parse(&out);
    }

    #[test]
    fn mutated_messages_never_panic(
        seeds in proptest::collection::vec(payload_seed(), 1..5),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let payloads: Vec<_> = seeds.iter().map(build).collect();
        let mut out = Vec::new();
        emit_message(&header(34, (true, false), (1, 0), 0), &payloads, &mut out).unwrap();
        for (at, v) in flips {
            let n = out.len();
            out[at % n] ^= v;
        }
        let _ = Message::parse(&out);
    }
}
