//! What the data plane knows of a peer's liveness.
//!
//! RFC 7296 §2.4: "If there has only been outgoing traffic on all of the
//! SAs associated with an IKE SA, it is essential to confirm liveness of
//! the other endpoint", that is, a liveness check is needed only when
//! nothing came back. ESP that authenticated on any of an IKE SA's Child
//! SAs proves the peer is there as well as an INFORMATIONAL answer does,
//! so the engine asks, before each liveness check `dpd_delay` calls for,
//! when the data plane last accepted ESP on each of the SA's Child SAs
//! (strongSwan asks the kernel the same, `query_sa` use times). The engine
//! reads no clock and sees no packet: the daemon answers from the
//! workers' own last-packet times.

use std::time::Instant;

/// When the data plane last accepted ESP on an inbound SA.
pub trait InboundActivity {
    /// The time of the last authenticated packet on the inbound SA `spi`
    /// (`None`: none yet, or not known).
    fn last_inbound(&self, spi: u32) -> Option<Instant>;
}

/// No data plane to ask: liveness comes from IKE messages alone.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoActivity;

impl InboundActivity for NoActivity {
    fn last_inbound(&self, _spi: u32) -> Option<Instant> {
        None
    }
}
