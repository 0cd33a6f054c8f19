//! The one text form of a Finding, printed alike by `check`, `generate`, `bench`, a headless
//! launch and a headless replay: each finding with its target and draft evidence side by side,
//! the offending keys highlighted, and its remedies numbered with their keys and changes.
//! ANSI styling is the caller's choice (`--color`, read by `ColorChoice`).

use std::fmt::Write as _;
use std::io::IsTerminal;

use crossterm::style::{Color, Stylize};

use crate::finding::{Evidence, Finding, Severity, Side};

/// Text wider than this is wrapped; evidence columns wider than this stack instead.
const WIDTH: usize = 100;
const GAP: &str = "  │  ";

/// Whether (and how) to style text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paint {
    pub color: bool,
}

/// `--color auto|always|never`: whether text output is styled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorChoice {
    /// Colour only for a terminal, and never when `NO_COLOR` is set (no-color.org).
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether output to a stream is styled; `terminal` says whether the stream is one.
    pub fn colors(self, terminal: bool) -> bool {
        match self {
            ColorChoice::Auto => terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            ColorChoice::Always => true,
            ColorChoice::Never => false,
        }
    }

    /// Make the choice the process's: crossterm drops colours by itself when `NO_COLOR` is
    /// set, which `always` overrides (the console's theme and `Paint` honour `NO_COLOR` under
    /// `auto` already).
    pub fn install(self) {
        if self == ColorChoice::Always {
            crossterm::style::force_color_output(true);
        }
    }
}

impl Paint {
    pub fn for_stdout(choice: ColorChoice) -> Paint {
        Paint { color: choice.colors(std::io::stdout().is_terminal()) }
    }

    pub fn for_stderr(choice: ColorChoice) -> Paint {
        Paint { color: choice.colors(std::io::stderr().is_terminal()) }
    }

    fn styled(self, text: &str, color: Color, bold: bool) -> String {
        match (self.color, bold) {
            (false, _) => text.to_string(),
            (true, true) => text.with(color).bold().to_string(),
            (true, false) => text.with(color).to_string(),
        }
    }

    fn severity(self, s: Severity) -> String {
        let color = match s {
            Severity::Error => Color::Red,
            Severity::Warning => Color::Yellow,
            Severity::Info => Color::Cyan,
        };
        self.styled(s.name(), color, true)
    }

    /// An offending key.
    fn key(self, key: &str) -> String {
        self.styled(key, Color::Magenta, true)
    }

    fn dim(self, text: &str) -> String {
        self.styled(text, Color::DarkGrey, false)
    }
}

/// A line of a column: its plain width and its styled text.
struct Cell {
    width: usize,
    text: String,
}

impl Cell {
    fn plain(text: String) -> Cell {
        Cell { width: text.chars().count(), text }
    }
}

/// `text` with its control characters escaped (`\u{1b}`), so that a string from a file (an
/// architecture, a path) cannot move the cursor, set the window title or clear the screen.
pub fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect())
}

/// `escaped`, but line breaks and tabs pass: for text that has lines of its own (generated
/// text, a log line, an error message).
pub fn escaped_keeping_lines(text: &str) -> std::borrow::Cow<'_, str> {
    let hostile = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(hostile) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.chars().map(|c| if hostile(c) { c.escape_default().to_string() } else { c.to_string() }).collect())
}

/// The distinct files of some evidence, in order.
fn files<'a>(evidence: &[&'a Evidence]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for e in evidence {
        if !out.contains(&e.file.as_str()) {
            out.push(&e.file);
        }
    }
    out
}

/// One side's evidence as `key = value` lines, under its label; when the side cites several
/// files, each run of lines is headed by the file's name.
fn column(label: &str, evidence: &[&Evidence], paint: Paint) -> Vec<Cell> {
    let several = files(evidence).len() > 1;
    let mut cells = vec![Cell::plain(label.to_string())];
    let mut file = None;
    for e in evidence {
        if several && file != Some(&e.file) {
            file = Some(&e.file);
            let name = std::path::Path::new(&e.file).file_name().map_or(e.file.clone(), |n| n.to_string_lossy().into_owned());
            let name = escaped(&name).into_owned();
            cells.push(Cell { width: name.chars().count() + 1, text: format!("{}:", paint.dim(&name)) });
        }
        let key = if e.key.is_empty() { "(whole file)".into() } else { escaped(&e.key) };
        let key = key.as_ref();
        let value = e.value.to_string();
        cells.push(Cell { width: 2 + key.chars().count() + 3 + value.chars().count(), text: format!("  {} = {value}", paint.key(key)) });
    }
    cells
}

fn evidence_block(out: &mut String, f: &Finding, paint: Paint) {
    let of = |side: Side| -> Vec<&Evidence> { f.evidence.iter().filter(|e| e.side == side).collect() };
    let (target, draft) = (of(Side::Target), of(Side::Draft));
    for (side, evidence) in [(Side::Target, &target), (Side::Draft, &draft)] {
        if !evidence.is_empty() {
            let _ = writeln!(out, "    {:<7}{}", side.name(), paint.dim(&escaped(&files(evidence).join(", "))));
        }
    }
    let left = column("target", &target, paint);
    let right = column("draft", &draft, paint);
    let left_width = left.iter().map(|c| c.width).max().unwrap_or(0);
    let right_width = right.iter().map(|c| c.width).max().unwrap_or(0);
    let side_by_side = !target.is_empty() && !draft.is_empty() && 4 + left_width + GAP.chars().count() + right_width <= WIDTH;
    if side_by_side {
        for i in 0..left.len().max(right.len()) {
            let (l, r) = (left.get(i), right.get(i));
            let pad = left_width - l.map_or(0, |c| c.width);
            let _ = writeln!(out, "    {}{}{GAP}{}", l.map_or("", |c| c.text.as_str()), " ".repeat(pad), r.map_or("", |c| c.text.as_str()));
        }
    } else {
        // Stacked: the file legend above already labels each side.
        let both = !target.is_empty() && !draft.is_empty();
        for (cells, present) in [(left, !target.is_empty()), (right, !draft.is_empty())] {
            for c in cells.iter().skip(usize::from(!both)).filter(|_| present) {
                let _ = writeln!(out, "    {}", c.text);
            }
        }
    }
    for side in [Side::Launch, Side::Log] {
        for e in of(side) {
            let _ = writeln!(out, "    {:<7}{} = {}  {}", side.name(), paint.key(&e.key), e.value, paint.dim(&format!("({})", e.file)));
        }
    }
}

/// Word-wrap `text` to `WIDTH`, each line indented by `indent` spaces.
fn wrap(out: &mut String, text: &str, indent: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        let word = escaped(word);
        let word = word.as_ref();
        if !line.is_empty() && indent + line.chars().count() + 1 + word.chars().count() > WIDTH {
            let _ = writeln!(out, "{}{line}", " ".repeat(indent));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{}{line}", " ".repeat(indent));
    }
}

/// A finding as text, each line ending in a newline: the severity, id and phase, the message
/// wrapped, the target and draft evidence side by side, and the numbered fixes under a heading
/// that names the command taking `--apply ID` (`Some("specdeck check")`), or the flag alone.
pub fn text(f: &Finding, paint: Paint, apply_with: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}[{}] at {}", paint.severity(f.severity), paint.key(&f.id), f.phase);
    wrap(&mut out, &f.message, 2);
    if !f.evidence.is_empty() {
        out.push('\n');
        evidence_block(&mut out, f, paint);
    }
    if !f.remedies.is_empty() {
        let command = apply_with.map(|c| format!("{c} ")).unwrap_or_default();
        let _ = writeln!(out, "\n  fixes ({command}--apply ID):");
        for (i, r) in f.remedies.iter().enumerate() {
            let _ = writeln!(out, "    {}. {} [{}]", i + 1, paint.key(&r.id), r.key);
            wrap(&mut out, &r.description, 7);
            for c in &r.changes {
                let _ = writeln!(out, "         {}", c.describe());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Remedy;
    use crate::phase::PhaseId;
    use crate::spec::SpecChange;

    fn finding() -> Finding {
        Finding::new("vocab-mismatch", Severity::Error, PhaseId::DrafterInit, "Vocabularies differ.")
            .with_evidence(Evidence::new(Side::Target, "t/config.json", "/vocab_size", 256))
            .with_evidence(Evidence::new(Side::Draft, "d/config.json", "/vocab_size", 300))
    }

    #[test]
    fn evidence_sits_side_by_side_without_colour() {
        assert_eq!(
            text(&finding(), Paint { color: false }, None),
            "error[vocab-mismatch] at drafter-init\n  Vocabularies differ.\n\n    target t/config.json\n    draft  d/config.json\n    \
             target               │  draft\n      /vocab_size = 256  │    /vocab_size = 300\n"
        );
    }

    #[test]
    fn the_fixes_heading_names_the_command_that_applies_them() {
        let change = SpecChange::SetFlag { flag: "--context-length".into(), value: "128".into() };
        let remedy = Remedy { id: "clamp".into(), key: "--context-length".into(), description: "Clamp it.".into(), changes: vec![change] };
        let f = Finding::new("ctx", Severity::Warning, PhaseId::Preflight, "Too long.").with_remedy(remedy);
        let fixes = "\n  fixes (FROM--apply ID):\n    1. clamp [--context-length]\n       Clamp it.\n         --context-length 128\n";
        let head = "warning[ctx] at preflight\n  Too long.\n";
        assert_eq!(
            text(&f, Paint { color: false }, Some("specdeck generate")),
            format!("{head}{}", fixes.replace("FROM", "specdeck generate "))
        );
        assert_eq!(text(&f, Paint { color: false }, None), format!("{head}{}", fixes.replace("FROM", "")));
    }

    #[test]
    fn colour_highlights_the_keys_and_severity() {
        let out = text(&finding(), Paint { color: true }, None);
        let key = "/vocab_size".with(Color::Magenta).bold().to_string();
        assert!(key.starts_with('\u{1b}'), "{key:?}");
        assert_eq!(out.matches(&key).count(), 2, "{out}");
        assert!(out.starts_with(&"error".with(Color::Red).bold().to_string()), "{out}");
        // Columns stay aligned: padding counts the visible width, not the escape codes.
        let plain = |s: &str| s.split('\u{1b}').map(|p| p.split_once('m').map_or(p, |(_, t)| t)).collect::<String>();
        assert_eq!(plain(&out), text(&finding(), Paint { color: false }, None));
    }
}
