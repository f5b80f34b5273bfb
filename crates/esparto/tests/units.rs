//! The template unit `esparto@.service` is `esparto.service` but for the
//! lines that name the instance: a setting changed in one and not the
//! other fails here.

use std::path::Path;

fn unit(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The unit's settings and section headers, in order (comments and blank
/// lines dropped).
fn settings(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

#[test]
fn the_template_is_the_unit_but_for_the_instance() {
    let (plain, template) = (unit("esparto.service"), unit("esparto@.service"));
    let want: Vec<String> = settings(&plain)
        .into_iter()
        .map(|l| match l {
            "Description=Esparto IPsec gateway (userspace ESP, IKEv2)" => format!("{l}, instance %i"),
            "ExecStart=/usr/sbin/esparto run --config /etc/esparto/esparto.toml" => {
                "ExecStart=/usr/sbin/esparto --instance %i run".into()
            }
            "ExecReload=/usr/sbin/esparto reload --config /etc/esparto/esparto.toml" => {
                "ExecReload=/usr/sbin/esparto --instance %i reload".into()
            }
            "RuntimeDirectory=esparto" | "StateDirectory=esparto" => format!("{l} esparto/%i"),
            l => l.into(),
        })
        .collect();
    let got: Vec<&str> = settings(&template);
    assert_eq!(got, want);
}
