//! Diagnosis: the findings of the current launch, the one shown, and the files their evidence
//! cites, read once and with the line of every evidence key worked out (`draw.rs` lays them
//! out).

mod draw;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(super) use draw::draw;

use crate::console::action::{Action, PAGE};
use crate::console::excerpt;
use crate::finding::{Finding, Side};
use crate::phase::PhaseId;

/// A file quoted by the diagnosis.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceFile {
    Loading,
    Loaded { lines: Arc<Vec<String>>, marks: BTreeMap<String, Option<usize>> },
    Failed(String),
}

/// Where one copy of a finding came from: its phase and TP rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub phase: PhaseId,
    pub rank: Option<u32>,
}

/// The pane's state.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    findings: Vec<Finding>,
    /// Per finding (same order), every copy of it that came.
    seen: Vec<Vec<Seen>>,
    selected: usize,
    /// Every file quoted so far, by path (kept across launches: a relaunch cites them again).
    files: BTreeMap<String, SourceFile>,
    scroll: usize,
}

impl Diagnosis {
    /// A new launch has no findings yet.
    pub(crate) fn clear_launch(&mut self) {
        self.findings.clear();
        self.seen.clear();
        self.selected = 0;
        self.scroll = 0;
    }

    /// Take a finding in; returns the files it cites that are still to be read. The same
    /// finding again (another TP rank's copy, or the engine repeating what preflight said)
    /// is shown once, with where it was seen.
    pub(crate) fn on_finding(&mut self, finding: Finding) -> Vec<String> {
        let seen = Seen { phase: finding.phase, rank: finding.rank };
        let same = |f: &Finding| {
            f.id == finding.id && f.severity == finding.severity && (f.phase == finding.phase || f.message == finding.message)
        };
        if let Some(i) = self.findings.iter().position(same) {
            self.seen[i].push(seen);
            return Vec::new();
        }
        let mut reads = Vec::new();
        for ev in &finding.evidence {
            let quotable =
                matches!(ev.side, Side::Target | Side::Draft | Side::Log) && (ev.key.starts_with('/') || ev.key.starts_with("line "));
            if quotable && !self.files.contains_key(&ev.file) {
                self.files.insert(ev.file.clone(), SourceFile::Loading);
                reads.push(ev.file.clone());
            }
        }
        let files: BTreeSet<String> = finding.evidence.iter().map(|e| e.file.clone()).collect();
        // Errors first: the diagnosis opens on what stops the launch.
        let at = self.findings.iter().position(|f| f.severity < finding.severity).unwrap_or(self.findings.len());
        self.findings.insert(at, finding);
        self.seen.insert(at, vec![seen]);
        for file in files {
            self.mark_evidence(&file);
        }
        reads
    }

    /// A file a finding cites has been read (or could not be).
    pub(crate) fn on_file_loaded(&mut self, path: String, text: Result<String, String>) {
        let file = match text {
            Ok(text) => SourceFile::Loaded { lines: Arc::new(text.lines().map(str::to_string).collect()), marks: BTreeMap::new() },
            Err(e) => SourceFile::Failed(e),
        };
        self.files.insert(path.clone(), file);
        self.mark_evidence(&path);
    }

    /// Work out the lines of every evidence key cited in `path`, once it is loaded.
    fn mark_evidence(&mut self, path: &str) {
        let keys: Vec<String> = self.findings.iter().flat_map(|f| &f.evidence).filter(|e| e.file == path).map(|e| e.key.clone()).collect();
        if let Some(SourceFile::Loaded { lines, marks }) = self.files.get_mut(path) {
            let missing: Vec<String> = keys.into_iter().filter(|k| !marks.contains_key(k)).collect();
            if missing.is_empty() {
                return;
            }
            let text = lines.join("\n");
            for key in missing {
                let line = excerpt::evidence_line(&text, &key);
                marks.insert(key, line);
            }
        }
    }

    /// Show the next (or previous) finding, from its top.
    pub(crate) fn select_next(&mut self, forward: bool) {
        let n = self.findings.len();
        if n > 0 {
            let step = if forward { 1 } else { n - 1 };
            self.selected = (self.selected + step) % n;
            self.scroll = 0;
        }
    }

    pub(crate) fn scroll(&mut self, action: &Action) {
        let s = &mut self.scroll;
        *s = match action {
            Action::ScrollUp => s.saturating_sub(1),
            Action::ScrollDown => *s + 1,
            Action::PageUp => s.saturating_sub(PAGE),
            Action::PageDown => *s + PAGE,
            Action::ScrollTop => 0,
            // The pane clamps this to its last screenful.
            _ => usize::MAX / 2,
        };
    }

    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    pub fn shown(&self) -> Option<&Finding> {
        self.findings.get(self.selected)
    }

    /// Every copy of the finding shown.
    pub fn shown_seen(&self) -> &[Seen] {
        self.seen.get(self.selected).map_or(&[], Vec::as_slice)
    }
}

/// `seen 4× on TP0, TP1, TP2, TP3`, `seen 2× in preflight, drafter-init`: where a finding
/// that came more than once was seen; `None` for a finding seen once.
pub fn seen_text(seen: &[Seen]) -> Option<String> {
    if seen.len() < 2 {
        return None;
    }
    let mut ranks: Vec<u32> = seen.iter().filter_map(|s| s.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut phases: Vec<PhaseId> = Vec::new();
    for s in seen {
        if !phases.contains(&s.phase) {
            phases.push(s.phase);
        }
    }
    let mut text = format!("seen {}×", seen.len());
    if !ranks.is_empty() {
        let names: Vec<String> = ranks.iter().map(|r| format!("TP{r}")).collect();
        text.push_str(&format!(" on {}", names.join(", ")));
    }
    if phases.len() > 1 {
        let names: Vec<&str> = phases.iter().map(|p| p.name()).collect();
        text.push_str(&format!(" in {}", names.join(", ")));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Evidence, Severity};
    use crate::phase::PhaseId;

    #[test]
    fn loaded_files_mark_the_evidence_lines() {
        let mut d = Diagnosis::default();
        let finding = Finding::new("context-length-exceeds-draft", Severity::Error, PhaseId::DrafterInit, "too long")
            .with_evidence(Evidence::new(Side::Target, "t/config.json", "/max_position_embeddings", 262144))
            .with_evidence(Evidence::new(Side::Draft, "d/config.json", "/max_position_embeddings", 131072));
        assert_eq!(d.on_finding(finding), ["t/config.json", "d/config.json"]);
        let text = "{\n  \"hidden_size\": 8,\n  \"max_position_embeddings\": 262144\n}";
        d.on_file_loaded("t/config.json".into(), Ok(text.into()));
        d.on_file_loaded("d/config.json".into(), Err("gone".into()));
        match d.files.get("t/config.json") {
            Some(SourceFile::Loaded { lines, marks }) => {
                assert_eq!(lines.len(), 4);
                assert_eq!(marks.get("/max_position_embeddings"), Some(&Some(3)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(d.files.get("d/config.json"), Some(&SourceFile::Failed("gone".into())));
    }

    #[test]
    fn a_finding_seen_again_is_shown_once_with_where_it_was_seen() {
        let mut d = Diagnosis::default();
        let oom = |rank| Finding { rank, ..Finding::new("out-of-memory", Severity::Error, PhaseId::KvAlloc, "CUDA ran out") };
        for rank in [Some(2), Some(0), Some(2), None] {
            d.on_finding(oom(rank));
        }
        let context = Finding::new("context-length-exceeds-draft", Severity::Warning, PhaseId::Preflight, "longer");
        d.on_finding(context.clone());
        d.on_finding(Finding { phase: PhaseId::DrafterInit, ..context });
        // Another message in the same phase is the same finding; in another phase it is not.
        d.on_finding(Finding::new("out-of-memory", Severity::Error, PhaseId::KvAlloc, "other text"));
        d.on_finding(Finding::new("out-of-memory", Severity::Error, PhaseId::TargetLoad, "other text"));
        let ids: Vec<(&str, PhaseId)> = d.findings().iter().map(|f| (f.id.as_str(), f.phase)).collect();
        assert_eq!(
            ids,
            [
                ("out-of-memory", PhaseId::KvAlloc),
                ("out-of-memory", PhaseId::TargetLoad),
                ("context-length-exceeds-draft", PhaseId::Preflight)
            ]
        );
        let texts: Vec<Option<String>> = d.seen.iter().map(|s| seen_text(s)).collect();
        assert_eq!(texts, [Some("seen 5× on TP0, TP2".to_string()), None, Some("seen 2× in preflight, drafter-init".to_string())]);
    }
}
