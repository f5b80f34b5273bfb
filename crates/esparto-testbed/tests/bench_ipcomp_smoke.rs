//! `esparto-testbed bench ipcomp --quick --json` end to end on one shaped
//! link: the run succeeds, its JSON parses into the report type, every
//! cell was measured with TCP bytes delivered and gateway CPU counted,
//! `ipcomp = yes` sent text compressed, `no` compressed nothing, adaptive
//! (no `link_mbps`) found the shaped link saturated and compressed text, random
//! data was never sent compressed, and the three targets are evaluated.
//!
//! About 20 s with a release build; needs root, iproute2 (ip, tc) (SKIP
//! otherwise). The figures themselves are not checked: the machine is
//! shared, and a smoke run's windows are short.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use esparto_bench::bench::corpus::Corpus;
use esparto_testbed::bench::ipcomp::{Mode, Report};
use esparto_testbed::skip;

#[test]
fn quick_json_run_on_a_shaped_link() {
    if skip("bench_ipcomp_smoke", false) {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_esparto-testbed"))
        .args(["bench", "ipcomp", "--quick", "--json", "--links", "50", "--seconds", "1", "--warmup", "0.3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}\n{}", out.status, String::from_utf8_lossy(&out.stdout));
    let r: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON: {e}\n{}", String::from_utf8_lossy(&out.stdout)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.options.quick);
    assert_eq!(r.options.corpora, [Corpus::Text, Corpus::Random]);
    // One link × three modes × two corpora, each measured once.
    assert_eq!(r.cells.len(), 6, "{:?}", r.cells);
    for c in &r.cells {
        assert_eq!(c.link.mbps, Some(50));
        assert_eq!(c.samples.len(), 1, "{c:?}");
        let s = &c.samples[0];
        assert!(s.bytes > 0 && s.mbps > 0.0, "{c:?}");
        assert!(s.gateway_s_per_gb.is_some_and(|x| x > 0.0), "{c:?}");
        match (c.mode, c.corpus) {
            (Mode::No, _) => assert_eq!((s.compressed, s.state.as_str()), (0, ""), "{c:?}"),
            (Mode::Yes, Corpus::Text) => {
                assert!(s.compressed > 0 && s.bytes_saved > 0, "text with ipcomp = yes: {c:?}");
                assert_eq!(s.state, "compressing");
            }
            // Adaptive without `link_mbps` measures the shaped link as the
            // bottleneck (its send queue stands) and compresses text: most
            // of the window's packets go compressed.
            (Mode::Adaptive, Corpus::Text) => {
                assert!(s.compressed > s.skipped, "adaptive text on a 50 Mbit/s link: {c:?}");
                assert_eq!(s.state, "compressing", "{c:?}");
            }
            // Random bytes never shrink: every packet goes as it is.
            (_, Corpus::Random) => assert_eq!(s.compressed, 0, "{c:?}"),
            _ => {}
        }
    }
    // Only the 50 Mbit/s text figure and the every-cell one can be
    // evaluated here (no unshaped link in this run).
    assert!(r.targets.slow_link_text.met.is_some() && r.targets.slow_link_text.measured.is_some());
    assert!(r.targets.fast_link_random.met.is_none());
    assert!(r.targets.never_worse.met.is_some());
}
