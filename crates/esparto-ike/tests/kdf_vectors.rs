//! RFC 7296 key derivation against the NIST SP 800-135 IKEv2 KDF vectors
//! in `tests/vectors/ikev2_kdf.txt` (SHA-1 and SHA-256 PRFs).

#![allow(clippy::unwrap_used)]

use esparto_crypto::ike::Prf;
use esparto_ike::keys::{child_keymat, ike_keymat, rekey_skeyseed, skeyseed};
use std::collections::HashMap;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn cases() -> Vec<(Prf, HashMap<String, String>)> {
    let text = include_str!("vectors/ikev2_kdf.txt");
    let mut out: Vec<(Prf, HashMap<String, String>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(h) = line
            .strip_prefix("[prf = ")
            .and_then(|l| l.strip_suffix(']'))
        {
            let prf = match h {
                "sha1" => Prf::HmacSha1,
                "sha256" => Prf::HmacSha256,
                other => panic!("unknown prf {other}"),
            };
            out.push((prf, HashMap::new()));
            continue;
        }
        let (k, v) = line.split_once(" = ").unwrap();
        out.last_mut()
            .unwrap()
            .1
            .insert(k.to_string(), v.to_string());
    }
    out
}

#[test]
fn nist_ikev2_kdf_vectors() {
    let cases = cases();
    assert_eq!(cases.len(), 2);
    for (prf, c) in cases {
        let b = |k: &str| hex(&c[k]);
        let len: usize = c["DKMlen"].parse().unwrap();
        let (ni, nr, g, g_new) = (b("Ni"), b("Nr"), b("g^ir"), b("g^ir (new)"));
        let spi_i = u64::from_be_bytes(b("SPIi").try_into().unwrap());
        let spi_r = u64::from_be_bytes(b("SPIr").try_into().unwrap());

        let seed = skeyseed(prf, &ni, &nr, &g);
        assert_eq!(seed.as_slice(), b("SKEYSEED"), "{prf:?} SKEYSEED");
        let dkm = ike_keymat(prf, seed.as_slice(), &ni, &nr, spi_i, spi_r, len).unwrap();
        assert_eq!(dkm.as_slice(), b("DKM"), "{prf:?} DKM");
        let sk_d = &dkm.as_slice()[..prf.key_len()];
        let child = child_keymat(prf, sk_d, None, &ni, &nr, len).unwrap();
        assert_eq!(
            child.as_slice(),
            b("DKM(Child SA)"),
            "{prf:?} DKM(Child SA)"
        );
        let child_dh = child_keymat(prf, sk_d, Some(&g_new), &ni, &nr, len).unwrap();
        assert_eq!(
            child_dh.as_slice(),
            b("DKM(Child SA D-H)"),
            "{prf:?} DKM(Child SA D-H)"
        );
        let rekey = rekey_skeyseed(prf, sk_d, &g_new, &ni, &nr);
        assert_eq!(
            rekey.as_slice(),
            b("SKEYSEED(Rekey)"),
            "{prf:?} SKEYSEED(Rekey)"
        );
    }
}
