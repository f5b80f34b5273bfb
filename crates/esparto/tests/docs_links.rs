//! The documents the package installs link only to what it installs: the
//! installed tree is worked out from the Debian package's assets
//! (`[package.metadata.deb]` in this crate's Cargo.toml), and every
//! relative link of every installed Markdown file must resolve inside it.
//! `make install` installs the same layout (the Makefile's install rule).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// `path` with `.` and `..` folded away (no file system access).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Every installed file: (its path in the installed tree, its source).
fn installed() -> Vec<(PathBuf, PathBuf)> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let doc: toml_edit::Document<String> = manifest.parse().unwrap();
    let assets = doc["package"]["metadata"]["deb"]["assets"].as_array().unwrap();
    let mut out = Vec::new();
    for a in assets {
        let a = a.as_array().unwrap();
        let (src, dest) = (a.get(0).unwrap().as_str().unwrap(), a.get(1).unwrap().as_str().unwrap());
        // Built files (the binary, the manual pages) are not documents.
        if src.starts_with("target/") {
            continue;
        }
        let src = crate_dir.join(src);
        // A file name pattern `*.ext`, as cargo-deb takes them.
        let sources: Vec<PathBuf> = match src.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("*.")) {
            Some(ext) => std::fs::read_dir(src.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .collect(),
            None => vec![src],
        };
        for s in sources {
            let to = match dest.strip_suffix('/') {
                Some(dir) => Path::new(dir).join(s.file_name().unwrap()),
                None => PathBuf::from(dest),
            };
            out.push((to, s));
        }
    }
    out
}

/// The targets of `[text](target)` links in `md`, outside code.
fn links(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans may show link syntax; they are not links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_link_of_an_installed_document_resolves_in_the_installed_tree() {
    let files = installed();
    let paths: BTreeSet<PathBuf> = files.iter().map(|(to, _)| to.clone()).collect();
    let dirs: BTreeSet<PathBuf> = paths.iter().flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf)).collect();
    let docs: Vec<&(PathBuf, PathBuf)> = files.iter().filter(|(to, _)| to.extension().is_some_and(|e| e == "md")).collect();
    assert!(docs.len() >= 5, "the package installs the documents: {docs:?}");
    let mut dangling = Vec::new();
    for (to, src) in docs {
        let text = std::fs::read_to_string(src).unwrap();
        for link in links(&text) {
            let target = link.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let resolved = normal(&to.parent().unwrap().join(target));
            if !paths.contains(&resolved) && !dirs.contains(&resolved) {
                dangling.push(format!("{}: {link} (→ {})", to.display(), resolved.display()));
            }
        }
    }
    assert!(dangling.is_empty(), "links that do not resolve in the installed tree:\n{}", dangling.join("\n"));
}

#[test]
fn the_link_reader_finds_links_and_skips_code() {
    let md = "see [a](docs/A.md#x) and `[b](nope.md)`\n```\n[c](nope.md)\n```\n[d](../e/)";
    assert_eq!(links(md), ["docs/A.md#x", "../e/"]);
    assert_eq!(normal(Path::new("usr/doc/docs/../examples/x")), Path::new("usr/doc/examples/x"));
}
