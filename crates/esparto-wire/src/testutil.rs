//! Test helpers: reading the hex dumps in `testdata/`.

/// Decodes a hex dump: `#` starts a comment to the end of the line,
/// whitespace is ignored.
pub(crate) fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.bytes())
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    assert!(digits.len() % 2 == 0, "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| {
            let s = core::str::from_utf8(p).unwrap_or("zz");
            u8::from_str_radix(s, 16).unwrap_or_else(|_| panic!("bad hex {s:?}"))
        })
        .collect()
}
