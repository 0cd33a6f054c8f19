//! Drawing the diagnosis: the finding's message; the target and draft config excerpts side by side with
//! the evidence keys' lines highlighted (marked `▶` too, so it reads without colour); the
//! remedies numbered with the key that applies each and what it changes.

use ratatui::buffer::Buffer;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};
use unicode_width::UnicodeWidthStr;

use super::{seen_text, Diagnosis, SourceFile};
use crate::console::action::Action;
use crate::console::excerpt::window;
use crate::console::keymap::Keymap;
use crate::console::panes::pane::Pane;
use crate::console::text::{truncate, wrap_words};
use crate::event::PhaseState;
use crate::finding::{Evidence, Finding, Severity, Side};
use crate::spec::SpecChange;

const GAP: &str = "│";

/// The pane; with no finding, where the launch's preflight (`preflight`) stands instead.
pub(in crate::console::panes) fn draw(
    pane: &Pane<'_>,
    d: &Diagnosis,
    keymap: &Keymap,
    attempt: u32,
    preflight: Option<PhaseState>,
    buf: &mut Buffer,
) {
    let theme = pane.theme;
    let title = match (d.shown(), d.findings.len()) {
        (Some(f), 1) => format!(" Diagnosis · {} ", f.id),
        (Some(f), n) => format!(" Diagnosis · {} ({}/{n}, ] next) ", f.id, d.selected + 1),
        (None, _) => " Diagnosis ".to_string(),
    };
    let inner = pane.frame(Line::styled(title, theme.title()), buf);
    let Some(finding) = d.shown() else {
        Paragraph::new(Line::styled(idle_text(attempt, preflight), theme.dim())).render(inner, buf);
        return;
    };
    let width = inner.width as usize;
    let height = inner.height as usize;
    let columns = quoted_files(d, finding);
    let message = wrap_words(&finding.message, width);
    let other = other_evidence(pane, d, finding, &columns, width);
    let remedies = remedies(pane, keymap, finding, width);
    let descriptions: usize = remedies.iter().map(|(_, d)| d.len()).sum();
    let arrangement = Arrangement::new(d, finding, &columns, width);
    let marked_rows = arrangement.evidence_rows();

    // Share the height in order of importance: what is wrong (the finding, the files, the
    // keys and both values) first, then the fixes, then context.
    let mut budget = Budget { left: height };
    budget.take(1); // the header: severity and id
    let mut message_rows = budget.take(1);
    let mut excerpt_rows = budget.take(marked_rows);
    let other_rows = budget.take(other.len());
    budget.take(remedies.iter().map(|(lines, _)| lines.len()).sum::<usize>());
    message_rows += budget.take(message.len().min(2).saturating_sub(message_rows));
    let remedy_title = budget.take(1);
    message_rows += budget.take(message.len().min(4).saturating_sub(message_rows));
    if !columns.is_empty() {
        // Three lines of context around each evidence line.
        excerpt_rows += budget.take((marked_rows + 6).saturating_sub(excerpt_rows));
    }
    let gaps = budget.take(2);
    let with_descriptions = descriptions <= budget.left && budget.take(descriptions) == descriptions;
    if !columns.is_empty() {
        excerpt_rows += budget.take(15usize.saturating_sub(excerpt_rows));
    }
    message_rows += budget.take(message.len().saturating_sub(message_rows));

    let mut lines = header(pane, finding, seen_text(d.shown_seen()));
    lines.extend(clip(message, message_rows, width).into_iter().map(Line::raw));
    if gaps > 0 {
        lines.push(Line::raw(""));
    }
    if excerpt_rows > 0 {
        lines.extend(arrangement.excerpts(pane, d, finding, &columns, excerpt_rows));
    }
    lines.extend(other.into_iter().take(other_rows));
    if gaps > 1 {
        lines.push(Line::raw(""));
    }
    if remedy_title > 0 {
        let title = if finding.remedies.is_empty() {
            "No remedy is known for this finding."
        } else if keymap.hint(&Action::ApplyRemedy(1)).is_none() {
            // A replay: nothing here can relaunch, so the remedies are for the next launch.
            "Remedies (for the next launch):"
        } else {
            "Remedies (press the key to apply and relaunch):"
        };
        lines.push(Line::styled(title, theme.title()));
    }
    for (head, description) in remedies {
        lines.extend(head);
        if with_descriptions {
            lines.extend(description);
        }
    }
    // Scrolling stops once the last line is at the bottom.
    let skip = d.scroll.min(lines.len().saturating_sub(height));
    let lines: Vec<Line> = lines.into_iter().skip(skip).collect();
    Paragraph::new(lines).render(inner, buf);
}

/// Rows left to hand out.
struct Budget {
    left: usize,
}

impl Budget {
    /// Take up to `n` rows; returns how many were given.
    fn take(&mut self, n: usize) -> usize {
        let given = n.min(self.left);
        self.left -= given;
        given
    }
}

/// The first `rows` rows of wrapped text, marking a cut with `…`.
fn clip(mut rows_of_text: Vec<String>, rows: usize, width: usize) -> Vec<String> {
    if rows_of_text.len() > rows {
        rows_of_text.truncate(rows);
        if let Some(last) = rows_of_text.pop() {
            rows_of_text.push(truncate(&format!("{last} …"), width));
        }
    }
    rows_of_text
}

fn idle_text(attempt: u32, preflight: Option<PhaseState>) -> String {
    match (attempt, preflight) {
        (0, _) => "Waiting for the first launch…".into(),
        (_, Some(PhaseState::Done)) => "Preflight passed: no mismatch between the drafter and the target.".into(),
        (_, Some(PhaseState::Started)) | (_, None) => "Preflight running…".into(),
        (_, Some(_)) => "No finding was reported for this launch.".into(),
    }
}

fn header<'a>(pane: &Pane<'_>, f: &Finding, seen: Option<String>) -> Vec<Line<'a>> {
    let theme = pane.theme;
    let (word, style) = match f.severity {
        Severity::Error => ("ERROR", theme.error()),
        Severity::Warning => ("WARNING", theme.warning()),
        Severity::Info => ("INFO", theme.dim()),
    };
    let mut spans = vec![
        Span::styled(word, style),
        Span::raw(" "),
        Span::styled(f.id.clone(), theme.title()),
        Span::styled(format!(" · fails at {}", f.phase), theme.dim()),
    ];
    if let Some(seen) = seen {
        spans.push(Span::styled(format!(" · {seen}"), theme.dim()));
    }
    vec![Line::from(spans)]
}

/// The files quoted side by side: the first target file, then the first draft file (or the
/// log for a replayed failure), at most two.
fn quoted_files(d: &Diagnosis, f: &Finding) -> Vec<(Side, String)> {
    let mut files: Vec<(Side, String)> = Vec::new();
    for side in [Side::Target, Side::Draft, Side::Log] {
        let quoted = f.evidence.iter().find(|e| e.side == side && d.files.contains_key(&e.file));
        if let Some(e) = quoted {
            if files.iter().all(|(_, file)| *file != e.file) {
                files.push((side, e.file.clone()));
            }
        }
    }
    files.truncate(2);
    files
}

/// `…/target/config.json`: the last two components, which tell the files apart.
fn short_path(path: &str, width: usize) -> String {
    let parts: Vec<&str> = path.rsplit('/').take(2).collect();
    let short = if parts.len() == 2 && path.matches('/').count() > 1 { format!("…/{}/{}", parts[1], parts[0]) } else { path.to_string() };
    truncate(&short, width)
}

/// One column of an excerpt: rows of (gutter, text, marked), with `None` for a gap.
fn column_rows(d: &Diagnosis, f: &Finding, side: Side, file: &str, height: usize) -> Vec<Option<(String, String, bool)>> {
    let (lines, marks) = match d.files.get(file) {
        Some(SourceFile::Loaded { lines, marks }) => (lines, marks),
        Some(SourceFile::Failed(e)) => return vec![Some((String::new(), format!("cannot read: {e}"), false))],
        _ => return vec![Some((String::new(), "reading…".to_string(), false))],
    };
    let cited: Vec<usize> = f.evidence.iter().filter(|e| e.file == file).filter_map(|e| marks.get(&e.key).copied().flatten()).collect();
    // A log's first cited line is the error line itself (replay cites it first); the others
    // (the deepest engine frame, the traceback's start) stay in view as its context, marked
    // `›` but not highlighted.
    let marked: Vec<usize> = if side == Side::Log { cited.iter().copied().take(1).collect() } else { cited.clone() };
    let rows = window(lines.len(), &cited, height);
    let indent = rows
        .iter()
        .flatten()
        .map(|&n| &lines[n - 1])
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let number_width = rows.iter().flatten().max().map(|n| n.to_string().len()).unwrap_or(1);
    rows.into_iter()
        .map(|row| {
            row.map(|n| {
                let line = &lines[n - 1];
                let text = line.get(indent.min(line.len() - line.trim_start().len())..).unwrap_or(line);
                let mark = marked.contains(&n);
                let gutter = if mark {
                    "▶"
                } else if cited.contains(&n) {
                    "›"
                } else {
                    " "
                };
                (format!("{n:>number_width$}{gutter}"), text.to_string(), mark)
            })
        })
        .collect()
}

/// How the quoted files sit: side by side, or one above the other when an evidence line
/// would need more rows in half the width (its key and value must stay readable).
struct Arrangement {
    stacked: bool,
    col_width: usize,
    /// Per file: the row naming it and its evidence lines, as fitted.
    evidence: Vec<usize>,
}

impl Arrangement {
    fn new(d: &Diagnosis, f: &Finding, files: &[(Side, String)], width: usize) -> Arrangement {
        let evidence_at =
            |w: usize| files.iter().map(|(side, file)| 1 + fit_column(evidence_only(d, f, *side, file), w).len()).collect::<Vec<_>>();
        let full = evidence_at(width);
        if files.len() < 2 {
            return Arrangement { stacked: false, col_width: width, evidence: full };
        }
        let half = width.saturating_sub(GAP.width()) / 2;
        let side = evidence_at(half);
        let stacked = side.iter().zip(&full).any(|(s, f)| s > f);
        match stacked {
            true => Arrangement { stacked, col_width: width, evidence: full },
            false => Arrangement { stacked, col_width: half, evidence: side },
        }
    }

    /// The rows the file names and the evidence lines take.
    fn evidence_rows(&self) -> usize {
        match self.stacked {
            true => self.evidence.iter().sum(),
            false => self.evidence.iter().copied().max().unwrap_or(0),
        }
    }

    /// The excerpts in `height` rows, the evidence lines first and context with the rest.
    fn excerpts<'a>(&self, pane: &Pane<'_>, d: &Diagnosis, f: &Finding, files: &[(Side, String)], height: usize) -> Vec<Line<'a>> {
        if !self.stacked {
            return side_by_side(pane, d, f, files, self.col_width, height);
        }
        let extra = height.saturating_sub(self.evidence_rows());
        let first = (self.evidence[0] + extra / 2).min(height);
        let mut lines = side_by_side(pane, d, f, &files[..1], self.col_width, first);
        lines.extend(side_by_side(pane, d, f, &files[1..], self.col_width, height - first));
        lines
    }
}

/// The evidence lines of a file alone (or the one row saying it is not read).
fn evidence_only(d: &Diagnosis, f: &Finding, side: Side, file: &str) -> Vec<Option<(String, String, bool)>> {
    let rows = column_rows(d, f, side, file, f.evidence.len().max(1));
    let marked: Vec<_> = rows.iter().filter(|r| r.as_ref().is_some_and(|(_, _, mark)| *mark)).cloned().collect();
    if marked.is_empty() {
        rows.into_iter().flatten().take(1).map(Some).collect()
    } else {
        marked
    }
}

/// A column's rows fitted to `width` in at most `body` rows: the window of source lines
/// shrinks until the wrapped evidence lines fit, so none is cut.
fn fitted_column(d: &Diagnosis, f: &Finding, side: Side, file: &str, body: usize, width: usize) -> Vec<Option<(String, String, bool)>> {
    let mut source_rows = body;
    loop {
        let mut rows = fit_column(column_rows(d, f, side, file, source_rows), width);
        if rows.len() <= body || source_rows <= 1 {
            rows.truncate(body);
            return rows;
        }
        source_rows -= (rows.len() - body).min(source_rows - 1);
    }
}

fn side_by_side<'a>(
    pane: &Pane<'_>,
    d: &Diagnosis,
    f: &Finding,
    files: &[(Side, String)],
    col_width: usize,
    height: usize,
) -> Vec<Line<'a>> {
    if files.is_empty() || height == 0 {
        return Vec::new();
    }
    let theme = pane.theme;
    // `height` counts the row naming the files.
    let body = height.saturating_sub(1);
    let columns: Vec<Vec<Option<(String, String, bool)>>> =
        files.iter().map(|(side, file)| fitted_column(d, f, *side, file, body, col_width)).collect();
    let mut lines = Vec::new();
    let headers: Vec<Vec<Span>> = files
        .iter()
        .map(|(side, file)| {
            let label = format!("{} ", side.name());
            let path = short_path(file, col_width.saturating_sub(label.len()));
            vec![Span::styled(label, theme.title()), Span::styled(path, theme.dim())]
        })
        .collect();
    lines.push(join_columns(headers, col_width, theme.dim()));
    let rows = columns.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..rows {
        let cells: Vec<Vec<Span>> = columns
            .iter()
            .map(|col| match col.get(i) {
                Some(Some((gutter, text, mark))) => {
                    let style = if *mark { theme.evidence() } else { Style::new() };
                    vec![
                        Span::styled(gutter.clone(), if *mark { theme.evidence() } else { theme.dim() }),
                        Span::styled(text.clone(), style),
                    ]
                }
                Some(None) => vec![Span::styled("…", theme.dim())],
                None => Vec::new(),
            })
            .collect();
        lines.push(join_columns(cells, col_width, theme.dim()));
    }
    lines
}

/// Fit rows to the column: evidence lines wrap onto continuation rows (their values must
/// stay visible); other lines are cut.
fn fit_column(rows: Vec<Option<(String, String, bool)>>, width: usize) -> Vec<Option<(String, String, bool)>> {
    let mut out = Vec::new();
    for row in rows {
        let Some((gutter, text, mark)) = row else {
            out.push(None);
            continue;
        };
        let room = width.saturating_sub(gutter.width()).max(1);
        if !mark || text.width() <= room {
            out.push(Some((gutter, truncate(&text, room), mark)));
            continue;
        }
        let blank = " ".repeat(gutter.width());
        // Break at spaces first, so a key and its value stay whole where they fit.
        for (i, piece) in wrap_words(&text, room).into_iter().enumerate() {
            out.push(Some((if i == 0 { gutter.clone() } else { blank.clone() }, piece, true)));
        }
    }
    out
}

/// Lay cells side by side, each padded to `width`, separated by a rule.
fn join_columns<'a>(cells: Vec<Vec<Span<'a>>>, width: usize, rule: Style) -> Line<'a> {
    let last = cells.len().saturating_sub(1);
    let mut spans = Vec::new();
    for (i, cell) in cells.into_iter().enumerate() {
        let used: usize = cell.iter().map(|s| s.content.width()).sum();
        spans.extend(cell);
        if i < last {
            spans.push(Span::raw(" ".repeat(width.saturating_sub(used))));
            spans.push(Span::styled(GAP, rule));
        }
    }
    Line::from(spans)
}

/// Evidence not quoted in an excerpt: launch flags, environment, tensors, absent keys.
fn other_evidence<'a>(pane: &Pane<'_>, d: &Diagnosis, f: &Finding, columns: &[(Side, String)], width: usize) -> Vec<Line<'a>> {
    let quoted = |e: &Evidence| {
        columns.iter().any(|(_, file)| *file == e.file)
            && matches!(d.files.get(&e.file), Some(SourceFile::Loaded { marks, .. }) if marks.get(&e.key).copied().flatten().is_some())
    };
    let mut lines = Vec::new();
    for e in f.evidence.iter().filter(|e| !quoted(e)) {
        let place = match e.side {
            Side::Launch => e.key.clone(),
            _ => format!("{} {}", short_path(&e.file, 40), e.key),
        };
        let absent = if e.value.is_null() { " (absent)" } else { "" };
        let text = truncate(&format!("{place} = {}{absent}", e.value), width.saturating_sub(8));
        lines.push(Line::from(vec![
            Span::styled(format!("{:<7} ", e.side.name()), pane.theme.title()),
            Span::styled(text, pane.theme.evidence()),
        ]));
    }
    lines
}

/// Per remedy: its key, id and changes (wrapped), and its description (wrapped).
fn remedies<'a>(pane: &Pane<'_>, keymap: &Keymap, f: &Finding, width: usize) -> Vec<(Vec<Line<'a>>, Vec<Line<'a>>)> {
    let theme = pane.theme;
    f.remedies
        .iter()
        .take(9)
        .enumerate()
        .map(|(i, r)| {
            let key = keymap.hint(&Action::ApplyRemedy(i as u8 + 1)).unwrap_or_else(|| "-".into());
            let changes: Vec<String> = r.changes.iter().map(SpecChange::describe).collect();
            let changes = changes.join("; ");
            let lead = format!(" {key:>2}  {}  ", r.id);
            let longest = changes.split_whitespace().map(UnicodeWidthStr::width).max().unwrap_or(0);
            // What a remedy changes is the point of the line: wrap it, never cut it, and
            // under the id when a word of it would not fit beside it.
            let indent = if longest > width.saturating_sub(lead.width()) { 6 } else { lead.width() };
            let mut rows = wrap_words(&changes, width.saturating_sub(indent)).into_iter();
            let first = if indent == lead.width() { rows.next().unwrap_or_default() } else { String::new() };
            let mut lines = vec![Line::from(vec![
                Span::styled(format!(" {key:>2}  "), theme.key()),
                Span::styled(format!("{}  ", r.id), theme.title()),
                Span::raw(first),
            ])];
            lines.extend(rows.map(|row| Line::raw(format!("{}{row}", " ".repeat(indent)))));
            let description = wrap_words(&r.description, width.saturating_sub(6))
                .into_iter()
                .map(|row| Line::styled(format!("      {row}"), theme.dim()))
                .collect();
            (lines, description)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_keep_their_last_two_components() {
        assert_eq!(short_path("/root/.cache/specdeck/demo-1/target/config.json", 40), "…/target/config.json");
        assert_eq!(short_path("config.json", 40), "config.json");
    }
}
