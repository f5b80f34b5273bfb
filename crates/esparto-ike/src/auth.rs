//! Pre-shared key authentication (RFC 7296 §2.15).
//!
//! ```text
//! AUTH = prf( prf(Shared Secret, "Key Pad for IKEv2"), <SignedOctets>)
//! InitiatorSignedOctets = RealMessage1 | NonceRData | MACedIDForI
//! ResponderSignedOctets = RealMessage2 | NonceIData | MACedIDForR
//! MACedIDForI = prf(SK_pi, RestOfInitIDPayload)
//! MACedIDForR = prf(SK_pr, RestOfRespIDPayload)
//! ```
//!
//! After IKE_INTERMEDIATE exchanges (RFC 9242 §3.3.2) both signed octet
//! strings end with `IntAuth = IntAuth_i | IntAuth_r | IKE_AUTH_MID`,
//! passed in as `int_auth` (empty otherwise).
//!
//! RealMessage1/2 are the IKE_SA_INIT request/response exactly as sent;
//! "RestOfInitIDPayload" is the ID payload body (ID Type, three RESERVED
//! octets, data). Each side signs its own first message with the *peer's*
//! nonce, which binds the AUTH to this exchange and this peer, and MACs
//! its identity with its SK_p, which binds the identity to the keys.
//! Verification compares in constant time.

use esparto_crypto::ike::{Prf, PrfOutput};
use esparto_wire::ike::IdRepr;

/// "Key Pad for IKEv2", 17 ASCII octets without a terminator (§2.15).
const KEY_PAD: &[u8] = b"Key Pad for IKEv2";

/// The AUTH value one side sends: `real_message` is its own IKE_SA_INIT
/// message, `peer_nonce` the other side's nonce, `sk_p` its own SK_p
/// (SK_pi for the initiator), `id` its own ID payload.
pub fn psk_auth(
    prf: Prf,
    psk: &[u8],
    (real_message, int_auth): (&[u8], &[u8]),
    peer_nonce: &[u8],
    sk_p: &[u8],
    id: &IdRepr<'_>,
) -> PrfOutput {
    let mut body = [0u8; 4];
    body[0] = id.id_type.0;
    let maced_id = prf.prf_parts(sk_p, &[&body, id.data]);
    let key = prf.prf(psk, KEY_PAD);
    prf.prf_parts(
        key.as_slice(),
        &[real_message, peer_nonce, maced_id.as_slice(), int_auth],
    )
}

/// The octets a signature covers (§2.15): `real_message | peer_nonce |
/// prf(sk_p, RestOfIDPayload)`, as for a PSK but signed instead of MACed.
pub fn signed_octets(
    prf: Prf,
    (real_message, int_auth): (&[u8], &[u8]),
    peer_nonce: &[u8],
    sk_p: &[u8],
    id: &IdRepr<'_>,
) -> Vec<u8> {
    let mut body = [0u8; 4];
    body[0] = id.id_type.0;
    let maced_id = prf.prf_parts(sk_p, &[&body, id.data]);
    let mut out =
        Vec::with_capacity(real_message.len() + peer_nonce.len() + maced_id.as_slice().len() + int_auth.len());
    out.extend_from_slice(real_message);
    out.extend_from_slice(peer_nonce);
    out.extend_from_slice(maced_id.as_slice());
    out.extend_from_slice(int_auth);
    out
}

/// Verify a received AUTH value (constant-time comparison).
pub fn verify_psk_auth(
    prf: Prf,
    psk: &[u8],
    signed: (&[u8], &[u8]),
    peer_nonce: &[u8],
    sk_p: &[u8],
    id: &IdRepr<'_>,
    received: &[u8],
) -> bool {
    psk_auth(prf, psk, signed, peer_nonce, sk_p, id).ct_eq(received)
}

#[cfg(test)]
mod tests {
    use super::*;
    use esparto_wire::ike::IdType;

    #[test]
    fn matches_the_formula_written_out() {
        // Computed the long way with concatenations, as §2.15 writes it.
        let prf = Prf::HmacSha256;
        let id = IdRepr {
            id_type: IdType::FQDN,
            data: b"moon",
        };
        let (psk, msg, nonce, skp) = (b"secret", [1u8; 100], [2u8; 32], [3u8; 32]);
        let mut rest = vec![2, 0, 0, 0];
        rest.extend_from_slice(b"moon");
        let maced = prf.prf(&skp, &rest);
        let mut signed = msg.to_vec();
        signed.extend_from_slice(&nonce);
        signed.extend_from_slice(maced.as_slice());
        let want = prf.prf(prf.prf(psk, b"Key Pad for IKEv2").as_slice(), &signed);
        let got = psk_auth(prf, psk, (&msg, &[]), &nonce, &skp, &id);
        assert_eq!(got.as_slice(), want.as_slice());
        assert!(verify_psk_auth(
            prf,
            psk,
            (&msg, &[]),
            &nonce,
            &skp,
            &id,
            want.as_slice()
        ));
        assert!(!verify_psk_auth(
            prf,
            b"wrong",
            (&msg, &[]),
            &nonce,
            &skp,
            &id,
            want.as_slice()
        ));
        assert!(!verify_psk_auth(
            prf,
            psk,
            (&msg, &[]),
            &nonce,
            &skp,
            &id,
            &want.as_slice()[1..]
        ));
    }
}
