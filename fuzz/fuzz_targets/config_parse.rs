//! Fuzz the configuration loader: any text is a valid `Config` or a list of
//! errors that each name a line and column inside the text — never a panic.
//! A config that loads must hold what the loader promises (SPIs outside the
//! reserved range, keys of exactly the suite's KEYMAT length).
//!
//! Seed it with the examples for faster coverage:
//!   cargo +nightly fuzz run config_parse ../examples
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match esparto::config::parse_str(text, "fuzz.toml") {
        Ok(c) => {
            for conn in &c.connections {
                for child in &conn.children {
                    if let Some(st) = &child.static_sas {
                        assert!(!st.pairs.is_empty());
                        for p in &st.pairs {
                            assert!(p.in_spi >= 256 && p.out_spi >= 256);
                            assert_eq!(p.in_key.len(), st.suite.keymat_len());
                            assert_eq!(p.out_key.len(), st.suite.keymat_len());
                        }
                    }
                }
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            let lines = text.split('\n').count();
            for e in &errors {
                assert!(e.line >= 1 && e.line <= lines, "{e}");
                assert!(e.column >= 1, "{e}");
                assert!(!e.message.is_empty());
            }
        }
    }
});
