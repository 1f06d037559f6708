//! ppscope: make the Linux networking page_pool visible.
//!
//! One pipeline, each folder one layer (see `ARCHITECTURE.md` at the repository root):
//!
//! ```text
//! probes/ (kernel hooks → RawSample) ─┐
//! recording (a file of RawSamples) ───┼─► pipeline::assemble ─► snapshot::Snapshot ─► report/, export/, the TUI
//! advice/scenario (simulated pools) ──┘   (model/ + advice/)
//! ```
//!
//! - [`snapshot`]: the output types every face reads, and the health verdict;
//! - [`model`]: pure: samples in, snapshot parts out;
//! - [`advice`]: burst profiles, the page_pool simulator, ring-size advice;
//! - [`pipeline`]: the one assembly of a snapshot from a window of samples;
//! - [`probes`]: the hook table, attaching, reading the maps;
//! - [`host`]: BTF, kallsyms, netlink, ethtool: what the running host says;
//! - [`source`]: live, replay, simulation and remote agent as one stream of snapshots;
//! - [`recording`]: the file format of `ppscope record`;
//! - [`export`]: the agent: metrics, HTTP, the collection loop;
//! - [`report`]: `diagnose`, `doctor` and `simulate` output.
//!
//! These pages are the developers' map, read with `cargo doc --document-private-items`: a
//! folder's overview names its private files too.
#![allow(rustdoc::private_intra_doc_links)]
pub mod advice;
pub mod args;
pub mod export;
pub mod host;
pub mod model;
pub mod pipeline;
pub mod probes;
pub mod recording;
pub mod report;
pub mod snapshot;
pub mod source;
#[doc(hidden)]
pub mod testing;
pub mod units;

/// The layers of the library in order: a module may use only itself and the ones before it
/// (ARCHITECTURE.md). Checked by a test over the sources, so a new import that goes the wrong
/// way fails `cargo test`.
#[cfg(test)]
const LAYERS: &[&str] = &[
    "units",
    "args",
    "snapshot",
    "host",
    "model",
    "advice",
    "pipeline",
    "probes",
    "recording",
    "source",
    "report",
    "export",
];

#[cfg(test)]
mod layering {
    use std::{fs, path::Path};

    use super::LAYERS;

    /// The top-level modules a source file names through `crate::` (comments and its test
    /// module left out).
    fn crate_modules(text: &str) -> Vec<String> {
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let ident = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let mut out = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::x, b, c::{y, z}}`: the names at the group's top level.
                let mut depth = 0;
                let mut start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        c if start && (c.is_ascii_alphabetic() || c == '_') => {
                            out.push(ident(&group[j..]));
                            start = false;
                        }
                        _ => {}
                    }
                }
            } else {
                out.push(ident(rest));
            }
        }
        out
    }

    fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                visit(&p, files);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }

    #[test]
    fn every_module_uses_only_the_layers_before_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        visit(&src, &mut files);
        let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
        let mut wrong = Vec::new();
        let mut checked = 0;
        for f in &files {
            let rel = f.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let top = top.trim_end_matches(".rs");
            // The crate root, test support and test modules in their own files.
            if matches!(top, "lib" | "testing") || rel.ends_with("tests.rs") {
                continue;
            }
            let me = rank(top).unwrap_or_else(|| panic!("{top} is not in LAYERS"));
            for used in crate_modules(&fs::read_to_string(f).unwrap()) {
                checked += 1;
                match rank(&used) {
                    Some(r) if r > me => {
                        wrong.push(format!("{} uses crate::{used}", rel.display()))
                    }
                    _ => {}
                }
            }
        }
        assert!(checked > 50, "the check found only {checked} imports");
        assert!(
            wrong.is_empty(),
            "imports up the layers:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn the_import_reader_sees_groups_and_paths() {
        let text = "use crate::{\n    host::netlink::{A, B},\n    model,\n};\nfn f() { crate::export::x(); } // crate::report\n#[cfg(test)]\nuse crate::source;";
        assert_eq!(crate_modules(text), ["host", "model", "export"]);
    }
}
