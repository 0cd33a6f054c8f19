//! The layering DESIGN.md states, held against the code: the files of src/ reach each other only
//! downwards through the layer table below, in no circle, and only the commands layer names clap.
//! Paths are read as text (`use crate::…`, `super::…` and inline `crate::…` paths), test modules
//! left out, so a rule broken in code fails here before it spreads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom; a file may name files of its own layer or of a lower one.
const LAYERS: &[(&str, &[&str])] = &[
    ("core", &["phase", "spec", "finding", "finding_text", "event", "knobs"]),
    ("model", &["model"]),
    ("backend", &["backend"]),
    ("engine", &["engine", "telemetry", "recorder"]),
    ("preflight", &["preflight"]),
    ("replay", &["replay"]),
    ("front ends", &["console", "server", "cudacheck", "testkit", "demo"]),
    ("commands", &["commands", "lib", "main"]),
];

struct Source {
    module: Vec<String>,
    is_mod_file: bool,
    /// The text before the first `#[cfg(test)]`: test modules sit at the end of their file.
    code: String,
}

fn sources() -> BTreeMap<PathBuf, Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let code = match text.lines().position(|l| l.trim_start().starts_with("#[cfg(test)]")) {
                Some(n) => text.lines().take(n).collect::<Vec<_>>().join("\n"),
                None => text,
            };
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            // A test module in a file of its own (`#[cfg(test)] mod tests;`) is test code throughout.
            let code = if module.last().is_some_and(|m| m == "tests") { String::new() } else { code };
            let is_mod_file = matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main"));
            if is_mod_file && module.len() > 1 {
                module.pop();
            }
            (rel, Source { module, is_mod_file, code })
        })
        .collect()
}

/// `a::{b, c::{d, e}}` as whole paths.
fn expand(prefix: &[String], body: &str, out: &mut Vec<Vec<String>>) {
    let (mut depth, mut item) = (0, String::new());
    for ch in body.chars().chain([',']) {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            let it = std::mem::take(&mut item);
            let it = it.trim();
            if it.is_empty() {
                continue;
            }
            if let Some((head, rest)) = it.split_once("::{") {
                let mut p = prefix.to_vec();
                p.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
                expand(&p, rest.strip_suffix('}').unwrap_or(rest), out);
            } else {
                let name = it.split(" as ").next().unwrap();
                out.push(prefix.iter().cloned().chain(name.split("::").map(String::from)).collect());
            }
        } else {
            item.push(ch);
        }
    }
}

/// Every file each file names.
fn edges(files: &BTreeMap<PathBuf, Source>) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let by_module: BTreeMap<&[String], &PathBuf> = files.iter().map(|(p, s)| (s.module.as_slice(), p)).collect();
    let grouped = regex::Regex::new(r"(?s)\buse\s+(crate|super(?:::super)*)::\{(.*?)\};").unwrap();
    let inline = regex::Regex::new(r"\b(crate|super(?:::super)*)::((?:[A-Za-z_][A-Za-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut out = BTreeMap::new();
    for (path, src) in files {
        let mut named: Vec<(String, Vec<String>)> = Vec::new();
        for c in grouped.captures_iter(&src.code) {
            let mut paths = Vec::new();
            expand(&[], &c[2], &mut paths);
            named.extend(paths.into_iter().map(|p| (c[1].to_string(), p)));
        }
        for c in inline.captures_iter(&src.code) {
            named.push((c[1].to_string(), c[2].split("::").map(String::from).collect()));
        }
        let mut targets = BTreeSet::new();
        for (root, parts) in named {
            let full: Vec<String> = if root == "crate" {
                parts
            } else {
                let ups = root.matches("super").count();
                let mut base = src.module.clone();
                if !src.is_mod_file {
                    base.pop();
                }
                base.truncate(base.len().saturating_sub(ups - 1));
                base.into_iter().chain(parts).collect()
            };
            if let Some(target) = (1..=full.len()).rev().find_map(|n| by_module.get(&full[..n])) {
                if *target != path {
                    targets.insert((*target).clone());
                }
            }
        }
        out.insert(path.clone(), targets);
    }
    out
}

fn layer_of(src: &Source) -> usize {
    let top = src.module.first().map(String::as_str).unwrap_or("lib");
    LAYERS.iter().position(|(_, names)| names.contains(&top)).unwrap_or_else(|| panic!("src/{top}: in no layer of tests/layers.rs"))
}

#[test]
fn every_file_names_only_its_own_layer_or_lower_ones() {
    let files = sources();
    let mut wrong = Vec::new();
    for (from, targets) in edges(&files) {
        let here = layer_of(&files[&from]);
        for to in targets {
            let there = layer_of(&files[&to]);
            if there > here {
                wrong.push(format!("src/{} ({}) names src/{} ({})", from.display(), LAYERS[here].0, to.display(), LAYERS[there].0));
            }
        }
    }
    assert!(wrong.is_empty(), "upward imports:\n{}", wrong.join("\n"));
}

#[test]
fn no_import_circles_among_files() {
    let files = sources();
    let graph = edges(&files);
    // Tarjan's strongly connected components, iteration order fixed by the BTreeMap.
    struct Walk<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        circles: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().position(|x| *x == v).unwrap();
                let comp: Vec<String> = self.stack.drain(at..).map(|p| format!("src/{}.rs", p.display())).collect();
                if comp.len() > 1 {
                    self.circles.push(comp);
                }
            }
        }
    }
    let mut walk = Walk { graph: &graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), circles: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    assert!(walk.circles.is_empty(), "import circles: {:?}", walk.circles);
}

#[test]
fn the_backend_knows_no_application_types() {
    let files = sources();
    let graph = edges(&files);
    let app = ["phase", "event", "finding", "spec", "engine", "console", "preflight", "replay", "testkit", "commands", "cudacheck"];
    let mut wrong = Vec::new();
    for (from, targets) in &graph {
        if files[from].module.first().map(String::as_str) != Some("backend") {
            continue;
        }
        for to in targets {
            if app.contains(&files[to].module[0].as_str()) {
                wrong.push(format!("src/{} names src/{}", from.display(), to.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn only_the_commands_layer_knows_clap() {
    let files = sources();
    let offenders: Vec<String> = files
        .iter()
        .filter(|(_, s)| s.module.first().map(String::as_str) != Some("commands"))
        .filter(|(_, s)| s.code.contains("clap::") || s.code.contains("crate::commands::"))
        .map(|(p, _)| format!("src/{}.rs", p.display()))
        .collect();
    assert!(offenders.is_empty(), "clap or the CLI types outside src/commands/: {offenders:?}");
}

/// The reader itself: a grouped `use` and a `super` path resolve to the files they name.
#[test]
fn the_reader_resolves_grouped_and_relative_paths() {
    let mut paths = Vec::new();
    expand(&["a".into()], "b, c::{d, e as f}, g::h", &mut paths);
    assert_eq!(paths, vec![vec!["a", "b"], vec!["a", "c", "d"], vec!["a", "c", "e"], vec!["a", "g", "h"]]);
    let files = sources();
    let graph = edges(&files);
    let backend_mod = PathBuf::from("backend/mod");
    assert!(graph[&backend_mod].contains(&PathBuf::from("model/checkpoint")), "{:?}", graph[&backend_mod]);
}
