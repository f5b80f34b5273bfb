//! Fuzz the IPComp view/Repr; a parsed header re-emits with the flags octet
//! zeroed and everything else identical.
#![no_main]

use esparto_wire::ipcomp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ipcomp::Packet::new_checked(data) else {
        return;
    };
    let _ = ipcomp::CpiClass::of(p.cpi());
    let Ok(r) = ipcomp::Repr::parse(&p) else {
        assert_eq!(ipcomp::CpiClass::of(p.cpi()), ipcomp::CpiClass::Reserved);
        return;
    };
    let mut out = data.to_vec();
    r.emit(&mut ipcomp::Packet::new_unchecked(&mut out[..]))
        .expect("emit");
    let mut want = data.to_vec();
    want[1] = 0;
    assert_eq!(out, want);
});
