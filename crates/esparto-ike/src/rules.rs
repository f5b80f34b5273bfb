//! Which payloads each exchange may carry, as a table (strongSwan's
//! `message.c` habit), beside the RFC 7296 diagrams it encodes.
//!
//! ```text
//! IKE_SA_INIT      HDR, SAi1, KEi, Ni  -->  <--  HDR, SAr1, KEr, Nr, [CERTREQ]     (§1.2)
//! IKE_AUTH         HDR, SK {IDi, [CERT,] [CERTREQ,] [IDr,] AUTH, SAi2, TSi, TSr}  -->
//!                  <--  HDR, SK {IDr, [CERT,] AUTH, SAr2, TSi, TSr}               (§1.2)
//! CREATE_CHILD_SA  HDR, SK {SA, Ni, [KEi], TSi, TSr}  -->
//!                  <--  HDR, SK {SA, Nr, [KEr], TSi, TSr}                         (§1.3.1)
//! INFORMATIONAL    HDR, SK {[N,] [D,] [CP,] ...}  -->  <--  HDR, SK {[N,] [D,] [CP], ...}  (§1.4)
//! ```
//!
//! The table gives, per exchange and direction, whether the payloads sit
//! inside SK and how many of each known type may appear. Responses get
//! lenient minimums because an error response is just a Notify (§2.21);
//! the task that processes a response checks what it needs. A message
//! that breaks the table is answered with INVALID_SYNTAX if it is an
//! authenticated request and dropped otherwise (§2.21, §3.10.1:
//! INVALID_SYNTAX "may only be returned for and in an encrypted packet if
//! the Message ID and cryptographic checksum were valid"). Unknown,
//! non-critical payload types are always allowed: §2.5 says to skip them.

use esparto_wire::ike::{ExchangeType, PayloadRepr, PayloadType};

/// Bounds for one payload type.
#[derive(Debug, Clone, Copy)]
struct Rule {
    payload: PayloadType,
    min: u8,
    max: u8,
}

const N: u8 = u8::MAX;

const fn r(payload: PayloadType, min: u8, max: u8) -> Rule {
    Rule { payload, min, max }
}

/// Rules for one exchange type in one direction.
#[derive(Debug)]
struct ExchangeRules {
    exchange: ExchangeType,
    response: bool,
    encrypted: bool,
    rules: &'static [Rule],
}

use PayloadType as P;

static RULES: &[ExchangeRules] = &[
    ExchangeRules {
        exchange: ExchangeType::IKE_SA_INIT,
        response: false,
        encrypted: false,
        rules: &[
            r(P::SA, 1, 1),
            r(P::KE, 1, 1),
            r(P::NONCE, 1, 1),
            r(P::NOTIFY, 0, N),
            r(P::VENDOR_ID, 0, N),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::IKE_SA_INIT,
        response: true,
        encrypted: false,
        rules: &[
            r(P::SA, 0, 1),
            r(P::KE, 0, 1),
            r(P::NONCE, 0, 1),
            r(P::NOTIFY, 0, N),
            r(P::VENDOR_ID, 0, N),
            r(P::CERTREQ, 0, N),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::IKE_AUTH,
        response: false,
        encrypted: true,
        rules: &[
            r(P::IDI, 1, 1),
            r(P::CERT, 0, N),
            r(P::CERTREQ, 0, N),
            r(P::IDR, 0, 1),
            r(P::AUTH, 0, 1),
            r(P::SA, 0, 1),
            r(P::TSI, 0, 1),
            r(P::TSR, 0, 1),
            r(P::NOTIFY, 0, N),
            r(P::VENDOR_ID, 0, N),
            r(P::CP, 0, 1),
            r(P::EAP, 0, 1),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::IKE_AUTH,
        response: true,
        encrypted: true,
        rules: &[
            r(P::IDR, 0, 1),
            r(P::CERT, 0, N),
            r(P::AUTH, 0, 1),
            r(P::SA, 0, 1),
            r(P::TSI, 0, 1),
            r(P::TSR, 0, 1),
            r(P::NOTIFY, 0, N),
            r(P::VENDOR_ID, 0, N),
            r(P::CP, 0, 1),
            r(P::EAP, 0, 1),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::IKE_INTERMEDIATE,
        response: false,
        encrypted: true,
        rules: &[r(P::KE, 0, 1), r(P::NOTIFY, 0, N), r(P::VENDOR_ID, 0, N)],
    },
    ExchangeRules {
        exchange: ExchangeType::IKE_INTERMEDIATE,
        response: true,
        encrypted: true,
        rules: &[r(P::KE, 0, 1), r(P::NOTIFY, 0, N), r(P::VENDOR_ID, 0, N)],
    },
    ExchangeRules {
        exchange: ExchangeType::CREATE_CHILD_SA,
        response: false,
        encrypted: true,
        rules: &[
            r(P::SA, 1, 1),
            r(P::NONCE, 1, 1),
            r(P::KE, 0, 1),
            r(P::TSI, 0, 1),
            r(P::TSR, 0, 1),
            r(P::NOTIFY, 0, N),
            r(P::VENDOR_ID, 0, N),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::CREATE_CHILD_SA,
        response: true,
        encrypted: true,
        rules: &[
            r(P::SA, 0, 1),
            r(P::NONCE, 0, 1),
            r(P::KE, 0, 1),
            r(P::TSI, 0, 1),
            r(P::TSR, 0, 1),
            r(P::NOTIFY, 0, N),
            r(P::VENDOR_ID, 0, N),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::INFORMATIONAL,
        response: false,
        encrypted: true,
        rules: &[
            r(P::NOTIFY, 0, N),
            r(P::DELETE, 0, N),
            r(P::VENDOR_ID, 0, N),
            r(P::CP, 0, 1),
        ],
    },
    ExchangeRules {
        exchange: ExchangeType::INFORMATIONAL,
        response: true,
        encrypted: true,
        rules: &[
            r(P::NOTIFY, 0, N),
            r(P::DELETE, 0, N),
            r(P::VENDOR_ID, 0, N),
            r(P::CP, 0, 1),
        ],
    },
];

/// How a message breaks the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleViolation {
    /// We do not handle this exchange type.
    UnknownExchange(ExchangeType),
    /// Payloads outside SK where everything must be encrypted, or an SK
    /// payload in IKE_SA_INIT.
    Encryption,
    /// A payload type this exchange may not carry.
    NotAllowed(PayloadType),
    /// Fewer of a type than required.
    Missing(PayloadType),
    /// More of a type than allowed.
    TooMany(PayloadType),
}

/// Whether an exchange's payloads travel inside SK (every exchange but
/// IKE_SA_INIT, §3.14). `None` for exchange types we do not handle.
pub fn is_encrypted(exchange: ExchangeType) -> Option<bool> {
    RULES
        .iter()
        .find(|r| r.exchange == exchange)
        .map(|r| r.encrypted)
}

fn is_known(t: PayloadType) -> bool {
    (33..=48).contains(&t.0) || t == PayloadType::SKF
}

/// Check a parsed message. `outer` are the payloads outside SK, `has_sk`
/// whether there was an SK payload, `inner` the decrypted ones.
pub fn check(
    exchange: ExchangeType,
    response: bool,
    outer: &[PayloadRepr<'_>],
    has_sk: bool,
    inner: &[PayloadRepr<'_>],
) -> Result<(), RuleViolation> {
    let rules = RULES
        .iter()
        .find(|r| r.exchange == exchange && r.response == response)
        .ok_or(RuleViolation::UnknownExchange(exchange))?;
    let payloads = if rules.encrypted {
        // §3.14: the SK payload is the only (and last) payload of these
        // exchanges. Unknown non-critical payloads outside are tolerated.
        if !has_sk || outer.iter().any(|p| is_known(p.payload_type())) {
            return Err(RuleViolation::Encryption);
        }
        inner
    } else {
        if has_sk {
            return Err(RuleViolation::Encryption);
        }
        outer
    };
    for p in payloads {
        let t = p.payload_type();
        if is_known(t) && !rules.rules.iter().any(|r| r.payload == t) {
            return Err(RuleViolation::NotAllowed(t));
        }
    }
    for rule in rules.rules {
        let n = payloads
            .iter()
            .filter(|p| p.payload_type() == rule.payload)
            .count();
        if n < usize::from(rule.min) {
            return Err(RuleViolation::Missing(rule.payload));
        }
        if n > usize::from(rule.max) {
            return Err(RuleViolation::TooMany(rule.payload));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use esparto_wire::ike::{KeRepr, NonceRepr, NotifyRepr, NotifyType, SaRepr};

    const NONCE: [u8; 16] = [1; 16];

    fn init_request() -> Vec<PayloadRepr<'static>> {
        vec![
            PayloadRepr::Sa(SaRepr::default()),
            PayloadRepr::Ke(KeRepr {
                group: 31,
                data: &[1; 32],
            }),
            PayloadRepr::Nonce(NonceRepr { data: &NONCE }),
            PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::NAT_DETECTION_SOURCE_IP,
                &[0; 20],
            )),
        ]
    }

    #[test]
    fn ike_sa_init_request() {
        let p = init_request();
        assert_eq!(
            check(ExchangeType::IKE_SA_INIT, false, &p, false, &[]),
            Ok(())
        );
        assert_eq!(
            check(ExchangeType::IKE_SA_INIT, false, &p[1..], false, &[]),
            Err(RuleViolation::Missing(PayloadType::SA))
        );
        let mut twice = p.clone();
        twice.push(p[1].clone());
        assert_eq!(
            check(ExchangeType::IKE_SA_INIT, false, &twice, false, &[]),
            Err(RuleViolation::TooMany(PayloadType::KE))
        );
        assert_eq!(
            check(ExchangeType::IKE_SA_INIT, false, &p, true, &[]),
            Err(RuleViolation::Encryption)
        );
    }

    #[test]
    fn error_response_is_just_a_notify() {
        let n = [PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::NO_PROPOSAL_CHOSEN,
            &[],
        ))];
        assert_eq!(
            check(ExchangeType::IKE_SA_INIT, true, &n, false, &[]),
            Ok(())
        );
        assert_eq!(check(ExchangeType::IKE_AUTH, true, &[], true, &n), Ok(()));
    }

    #[test]
    fn encrypted_exchanges_need_sk_and_nothing_outside() {
        let n = [PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::INITIAL_CONTACT,
            &[],
        ))];
        assert_eq!(
            check(ExchangeType::INFORMATIONAL, false, &[], true, &[]),
            Ok(())
        );
        assert_eq!(
            check(ExchangeType::INFORMATIONAL, false, &n, true, &[]),
            Err(RuleViolation::Encryption)
        );
        assert_eq!(
            check(ExchangeType::INFORMATIONAL, false, &[], false, &[]),
            Err(RuleViolation::Encryption)
        );
        // A KE payload has no business in INFORMATIONAL.
        let ke = [PayloadRepr::Ke(KeRepr {
            group: 31,
            data: &[1; 32],
        })];
        assert_eq!(
            check(ExchangeType::INFORMATIONAL, false, &[], true, &ke),
            Err(RuleViolation::NotAllowed(PayloadType::KE))
        );
        // IKE_AUTH request without IDi.
        assert_eq!(
            check(ExchangeType::IKE_AUTH, false, &[], true, &n),
            Err(RuleViolation::Missing(PayloadType::IDI))
        );
    }

    #[test]
    fn unknown_noncritical_payloads_are_skipped() {
        let mut p = init_request();
        p.push(PayloadRepr::Other {
            payload_type: PayloadType(200),
            body: &[],
        });
        assert_eq!(
            check(ExchangeType::IKE_SA_INIT, false, &p, false, &[]),
            Ok(())
        );
        assert_eq!(
            check(ExchangeType(99), false, &p, false, &[]),
            Err(RuleViolation::UnknownExchange(ExchangeType(99)))
        );
        assert_eq!(is_encrypted(ExchangeType::IKE_AUTH), Some(true));
        assert_eq!(is_encrypted(ExchangeType::IKE_SA_INIT), Some(false));
    }
}
