//! Embeds the demo pair (testdata/demo/{target,draft}/*) when it is present, so `specdeck`
//! with no arguments works from any directory. Without it the binary builds all the same and
//! says at run time that it has no demo.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata").join("demo");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files: Vec<(String, String)> = Vec::new();
    for side in ["target", "draft"] {
        let dir = root.join(side);
        println!("cargo:rerun-if-changed={}", dir.display());
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut names: Vec<_> = entries.flatten().filter(|e| e.path().is_file()).collect();
        names.sort_by_key(|e| e.file_name());
        for entry in names {
            let name = format!("{side}/{}", entry.file_name().to_string_lossy());
            files.push((name, entry.path().display().to_string()));
        }
    }
    let complete = ["target/config.json", "draft/config.json"].iter().all(|f| files.iter().any(|(n, _)| n == f));
    let mut out = String::from("/// The demo pair's files (relative path, bytes); empty when testdata/demo was absent.\n");
    out.push_str("pub const DEMO_FILES: &[(&str, &[u8])] = &[\n");
    if complete {
        for (name, path) in &files {
            writeln!(out, "    ({name:?}, include_bytes!({path:?})),").unwrap();
        }
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("demo_files.rs");
    std::fs::write(dest, out).unwrap();
}
