//! Layouts: a TOML tree of rows and columns naming the panes, in the style of bottom's
//! `[[row]]` / `[[row.child]]` files. Top-level rows stack vertically; the children of a
//! row sit side by side; their children stack vertically again, and so on.
//!
//! ```toml
//! [[row]]
//! ratio = 3
//!   [[row.child]]
//!   pane = "phases"
//!   [[row.child]]
//!   pane = ["diagnosis", "generate"]   # one place, showing whichever is relevant
//! [[row]]
//! length = 1
//!   [[row.child]]
//!   pane = "status"
//! ```
//!
//! `ratio` shares the space left after the fixed `length`s (default ratio 1). A bad file
//! gives an error naming the file and the line.

use std::path::Path;

use ratatui::layout::{Constraint, Direction, Layout as Splitter, Rect};
use serde::Deserialize;
use toml::Spanned;

use super::text::{line_of_offset, located};
use crate::model::open::{read_text_capped, SETTINGS_LIMIT};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PaneKind {
    Phases,
    Gpus,
    Log,
    Diagnosis,
    Generate,
    Serving,
    Status,
}

impl PaneKind {
    pub const ALL: [PaneKind; 7] =
        [PaneKind::Phases, PaneKind::Gpus, PaneKind::Log, PaneKind::Diagnosis, PaneKind::Generate, PaneKind::Serving, PaneKind::Status];

    pub fn name(self) -> &'static str {
        match self {
            PaneKind::Phases => "phases",
            PaneKind::Gpus => "gpus",
            PaneKind::Log => "log",
            PaneKind::Diagnosis => "diagnosis",
            PaneKind::Generate => "generate",
            PaneKind::Serving => "serving",
            PaneKind::Status => "status",
        }
    }

    pub fn from_name(name: &str) -> Option<PaneKind> {
        PaneKind::ALL.into_iter().find(|p| p.name() == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Ratio(u32),
    Length(u16),
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A place on screen showing one of these panes.
    Panes(Vec<PaneKind>),
    /// Children laid out across the parent's direction.
    Split(Vec<(Size, Node)>),
}

/// A leaf of the layout: one place on screen and the panes it can show.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub panes: Vec<PaneKind>,
    pub area: Rect,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub name: String,
    rows: Vec<(Size, Node)>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}", located(file, *line, message))]
pub struct LayoutError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

/// The layouts shipped in the binary, by name.
pub const BUILTIN: [(&str, &str); 3] = [
    ("default", include_str!("../../layouts/default.toml")),
    ("compact", include_str!("../../layouts/compact.toml")),
    ("wide", include_str!("../../layouts/wide.toml")),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LayoutFile {
    row: Option<Vec<Spanned<NodeDef>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDef {
    pane: Option<Spanned<OneOrMany>>,
    ratio: Option<Spanned<u32>>,
    length: Option<Spanned<u16>>,
    child: Option<Vec<Spanned<NodeDef>>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

struct Parser<'a> {
    file: &'a str,
    text: &'a str,
    seen: Vec<(PaneKind, usize)>,
}

impl Parser<'_> {
    fn error(&self, offset: usize, message: impl Into<String>) -> LayoutError {
        LayoutError { file: self.file.to_string(), line: line_of_offset(self.text, offset), message: message.into() }
    }

    fn nodes(&mut self, defs: &[Spanned<NodeDef>]) -> Result<Vec<(Size, Node)>, LayoutError> {
        defs.iter().map(|d| self.node(d)).collect()
    }

    fn node(&mut self, def: &Spanned<NodeDef>) -> Result<(Size, Node), LayoutError> {
        let at = def.span().start;
        let d = def.get_ref();
        let size = match (&d.ratio, &d.length) {
            (Some(_), Some(l)) => return Err(self.error(l.span().start, "give either `ratio` or `length`, not both")),
            (Some(r), None) if *r.get_ref() == 0 => return Err(self.error(r.span().start, "`ratio` must be at least 1")),
            (Some(r), None) => Size::Ratio(*r.get_ref()),
            (None, Some(l)) => Size::Length(*l.get_ref()),
            (None, None) => Size::Ratio(1),
        };
        let node = match (&d.pane, &d.child) {
            (Some(p), Some(_)) => return Err(self.error(p.span().start, "a node has either `pane` or children, not both")),
            (None, None) => return Err(self.error(at, "a node needs `pane = \"…\"` or children")),
            (None, Some(children)) if children.is_empty() => return Err(self.error(at, "a node has no children")),
            (None, Some(children)) => Node::Split(self.nodes(children)?),
            (Some(p), None) => Node::Panes(self.panes(p)?),
        };
        Ok((size, node))
    }

    fn panes(&mut self, spec: &Spanned<OneOrMany>) -> Result<Vec<PaneKind>, LayoutError> {
        let at = spec.span().start;
        let names: Vec<&str> = match spec.get_ref() {
            OneOrMany::One(n) => vec![n],
            OneOrMany::Many(ns) => ns.iter().map(String::as_str).collect(),
        };
        if names.is_empty() {
            return Err(self.error(at, "`pane` lists no pane"));
        }
        let mut panes = Vec::new();
        for name in names {
            let pane = PaneKind::from_name(name).ok_or_else(|| {
                let known: Vec<_> = PaneKind::ALL.iter().map(|p| p.name()).collect();
                self.error(at, format!("unknown pane {name:?} (known: {})", known.join(", ")))
            })?;
            let line = line_of_offset(self.text, at);
            if let Some((_, first)) = self.seen.iter().find(|(p, _)| *p == pane) {
                return Err(self.error(at, format!("pane {name:?} appears twice (first on line {first})")));
            }
            self.seen.push((pane, line));
            panes.push(pane);
        }
        Ok(panes)
    }
}

impl Layout {
    /// Parse a layout file's text; `file` names it in errors.
    pub fn parse(name: &str, file: &str, text: &str) -> Result<Layout, LayoutError> {
        let mut parser = Parser { file, text, seen: Vec::new() };
        let parsed: LayoutFile =
            toml::from_str(text).map_err(|e| parser.error(e.span().map(|s| s.start).unwrap_or(0), e.message().trim_end().to_string()))?;
        let rows = match parsed.row {
            Some(rows) if !rows.is_empty() => parser.nodes(&rows)?,
            _ => return Err(parser.error(0, "the layout has no [[row]]")),
        };
        Ok(Layout { name: name.to_string(), rows })
    }

    pub fn builtin(name: &str) -> Option<Layout> {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        Some(Layout::parse(name, &format!("layouts/{name}.toml"), text).expect("built-in layouts are valid"))
    }

    /// A built-in name (`default`, `compact`, `wide`) or a path to a layout file.
    pub fn resolve(name_or_path: &str) -> Result<Layout, LayoutError> {
        if let Some(layout) = Layout::builtin(name_or_path) {
            return Ok(layout);
        }
        let path = Path::new(name_or_path);
        let text = read_text_capped(path, SETTINGS_LIMIT).map_err(|e| LayoutError {
            file: name_or_path.to_string(),
            line: 0,
            message: format!("not a built-in layout (default, compact, wide) and cannot be read: {e}"),
        })?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| name_or_path.to_string());
        Layout::parse(&name, name_or_path, &text)
    }

    /// The layouts `L` cycles through: the chosen one first, then the other built-ins.
    pub fn cycle_starting_with(first: Layout) -> Vec<Layout> {
        let mut all = vec![first];
        for (name, _) in BUILTIN {
            if all.iter().all(|l| l.name != name) {
                all.push(Layout::builtin(name).expect("built-in"));
            }
        }
        all
    }

    /// The panes of each slot, in file order (the focus order).
    pub fn slot_panes(&self) -> Vec<Vec<PaneKind>> {
        self.slots(Rect::new(0, 0, 0, 0)).into_iter().map(|s| s.panes).collect()
    }

    /// Every slot with its area inside `area`.
    pub fn slots(&self, area: Rect) -> Vec<Slot> {
        let mut out = Vec::new();
        split(&self.rows, Direction::Vertical, area, &mut out);
        out
    }
}

fn split(children: &[(Size, Node)], direction: Direction, area: Rect, out: &mut Vec<Slot>) {
    let constraints = children.iter().map(|(size, _)| match *size {
        Size::Ratio(r) => Constraint::Fill(r as u16),
        Size::Length(l) => Constraint::Length(l),
    });
    let areas = Splitter::new(direction, constraints).split(area);
    let across = match direction {
        Direction::Vertical => Direction::Horizontal,
        Direction::Horizontal => Direction::Vertical,
    };
    for ((_, node), rect) in children.iter().zip(areas.iter()) {
        match node {
            Node::Panes(panes) => out.push(Slot { panes: panes.clone(), area: *rect }),
            Node::Split(grand) => split(grand, across, *rect, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_cover_every_pane() {
        for (name, _) in BUILTIN {
            let layout = Layout::builtin(name).unwrap();
            let mut panes: Vec<PaneKind> = layout.slot_panes().concat();
            panes.sort();
            assert_eq!(panes, PaneKind::ALL.to_vec(), "{name}");
        }
    }

    #[test]
    fn rows_stack_and_children_sit_side_by_side() {
        let text = "[[row]]\nratio = 1\n[[row.child]]\npane = \"phases\"\n[[row.child]]\nratio = 2\npane = \"log\"\n\
                    [[row]]\nlength = 1\n[[row.child]]\npane = \"status\"\n";
        let layout = Layout::parse("t", "t.toml", text).unwrap();
        let slots = layout.slots(Rect::new(0, 0, 90, 11));
        assert_eq!(slots[0], Slot { panes: vec![PaneKind::Phases], area: Rect::new(0, 0, 30, 10) });
        assert_eq!(slots[1], Slot { panes: vec![PaneKind::Log], area: Rect::new(30, 0, 60, 10) });
        assert_eq!(slots[2], Slot { panes: vec![PaneKind::Status], area: Rect::new(0, 10, 90, 1) });
    }

    #[test]
    fn nested_children_alternate_direction() {
        let text = "[[row]]\n[[row.child]]\n[[row.child.child]]\npane = \"phases\"\n[[row.child.child]]\npane = \"gpus\"\n\
                    [[row.child]]\npane = [\"diagnosis\", \"generate\"]\n";
        let layout = Layout::parse("t", "t.toml", text).unwrap();
        let slots = layout.slots(Rect::new(0, 0, 40, 20));
        assert_eq!(slots[0].area, Rect::new(0, 0, 20, 10));
        assert_eq!(slots[1].area, Rect::new(0, 10, 20, 10));
        assert_eq!(slots[2], Slot { panes: vec![PaneKind::Diagnosis, PaneKind::Generate], area: Rect::new(20, 0, 20, 20) });
    }

    fn error(text: &str) -> String {
        Layout::parse("bad", "layouts/bad.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn bad_layouts_name_the_file_and_line() {
        assert_eq!(
            error("[[row]]\n[[row.child]]\npane = \"phases\"\n[[row.child]]\npane = \"gpu\"\n"),
            "layouts/bad.toml:5: unknown pane \"gpu\" (known: phases, gpus, log, diagnosis, generate, serving, status)"
        );
        assert_eq!(
            error("[[row]]\n[[row.child]]\npane = \"log\"\n[[row]]\n[[row.child]]\npane = \"log\"\n"),
            "layouts/bad.toml:6: pane \"log\" appears twice (first on line 3)"
        );
        assert_eq!(error("[[row]]\nratio = 0\n[[row.child]]\npane = \"log\"\n"), "layouts/bad.toml:2: `ratio` must be at least 1");
        assert_eq!(
            error("[[row]]\nratio = 2\nlength = 3\n[[row.child]]\npane = \"log\"\n"),
            "layouts/bad.toml:3: give either `ratio` or `length`, not both"
        );
        assert_eq!(error("# nothing\n"), "layouts/bad.toml:1: the layout has no [[row]]");
        assert!(error("[[row]]\n\n[[row.child]]\npanes = \"log\"\n").starts_with("layouts/bad.toml:4: unknown field `panes`"));
        assert!(error("[[row]]\nratio = \"big\"\n").starts_with("layouts/bad.toml:2: "));
        assert!(error("[[row]\n").starts_with("layouts/bad.toml:1: "));
    }

    #[test]
    fn a_node_without_pane_or_children_is_reported_where_it_starts() {
        let err = error("[[row]]\n[[row.child]]\npane = \"log\"\n\n[[row.child]]\nratio = 2\n");
        assert!(err.starts_with("layouts/bad.toml:"), "{err}");
        assert!(err.ends_with(": a node needs `pane = \"…\"` or children"), "{err}");
    }

    #[test]
    fn resolve_takes_names_or_paths() {
        assert_eq!(Layout::resolve("wide").unwrap().name, "wide");
        let err = Layout::resolve("/nonexistent/x.toml").unwrap_err();
        assert!(err.to_string().starts_with("/nonexistent/x.toml: not a built-in layout"), "{err}");
    }
}
