//! A refused negotiation says what was received and what is configured,
//! on both ends: IKE proposals in IKE_SA_INIT, ESP proposals and traffic
//! selectors for the first Child SA (IKE_AUTH).

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::*;
use crate::proposal::{Proposal, Protocol};

/// The log lines written while `f` runs.
fn logged(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(sub, f);
    let bytes = buf.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

/// Initiator MOON with the usual configuration, responder SUN changed by
/// `tweak_r`; run one initiation and return the log.
fn negotiate(tweak_r: fn(&mut ConnectionConfig)) -> String {
    logged(|| {
        let mut p = Pair {
            i: endpoint(1, MOON, SUN, "@moon", "@sun"),
            r: endpoint_with(2, SUN, MOON, "@sun", "@moon", tweak_r),
            now: Instant::now(),
            ike: IkeSaId(0),
        };
        p.ike = p.i.initiate(p.now, "gw", None).unwrap();
        pump(&mut p);
    })
}

fn line<'a>(log: &'a str, what: &str) -> &'a str {
    log.lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?} in:\n{log}"))
}

#[test]
fn ike_proposal_mismatch_names_both_sides() {
    let log = negotiate(|c| c.proposals = Proposal::parse_list(Protocol::Ike, "aes128-sha256-modp2048").unwrap());
    let r = line(&log, "IKE_SA_INIT: no proposal chosen");
    assert!(
        r.contains("received proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519, configured proposals: IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048"),
        "{r}"
    );
    let i = line(&log, "IKE_SA_INIT refused");
    assert!(i.contains("the peer accepts none of our configured proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519"), "{i}");
}

#[test]
fn esp_proposal_mismatch_names_both_sides() {
    let log = negotiate(|c| {
        c.children[0].esp_proposals = Proposal::parse_list(Protocol::Esp, "aes128-sha256").unwrap();
    });
    let r = line(&log, "CHILD_SA request refused, no proposal chosen");
    assert!(
        r.contains("received proposals: ESP:AES_GCM_16_256/NO_EXT_SEQ, configured proposals: ESP:AES_CBC_128/HMAC_SHA2_256_128/NO_EXT_SEQ"),
        "{r}"
    );
    let i = line(&log, "CHILD_SA refused by the peer (NO_PROPOSAL_CHOSEN)");
    assert!(i.contains("configured proposals: ESP:AES_GCM_16_256/NO_EXT_SEQ"), "{i}");
}

#[test]
fn selector_mismatch_names_both_sides() {
    let log = negotiate(|c| {
        c.children[0] = ChildConfig::new("net", "10.2.0.0/16", "10.9.0.0/16", "aes256gcm16").unwrap();
    });
    let r = line(&log, "CHILD_SA request refused, traffic selectors unacceptable");
    assert!(
        r.contains("received TS 10.1.0.0/16 === 10.2.0.0/16, configured 10.9.0.0/16 === 10.2.0.0/16"),
        "{r}"
    );
    let i = line(&log, "CHILD_SA refused by the peer (TS_UNACCEPTABLE)");
    assert!(i.contains("configured TS 10.1.0.0/16 === 10.2.0.0/16"), "{i}");
}
