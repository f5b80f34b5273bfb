//! Loader tests.
#[test]
fn tmp_examples() {
    for f in ["static-west.toml", "static-east.toml", "site-to-site-psk.toml"] {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(f);
        match super::load(&p) { Ok(c) => println!("{f}: OK {:?}", c.connections.len()), Err(e) => println!("{e}") }
    }
}
