//! The shape of the engine rule tables (sglang.rs, vllm.rs, diagnose.rs) and the one
//! Aho-Corasick prefilter that finds which rules can match a line. The tables are put
//! together where they are read (text.rs).
//!
//! Every rule has a literal anchor that must occur in the message. One automaton over all
//! anchors scans each line once; only the few rules whose anchor occurred run their regex.
//! Most lines of a long log match no anchor at all, so they cost one scan.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex::{Captures, Regex};

use crate::finding::{Remedy, Severity};
use crate::phase::PhaseId;
use crate::spec::LaunchSpec;

/// Which engine's log a rule belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sglang,
    Vllm,
    /// Text both engines print (torch, CUDA, tqdm, Python).
    Any,
}

/// Log wordings, as bits, for guessing the engine version. SGLang: classic (0.4.10–0.5.2),
/// mid (0.5.9), new (0.5.23); vLLM: 0.10.x and 0.33.
pub type Dialects = u8;
pub const C: Dialects = 1;
pub const M: Dialects = 2;
pub const N: Dialects = 4;
pub const V010: Dialects = 8;
pub const V033: Dialects = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    Begin,
    End,
}

/// Where a frame of a traceback puts the failure, when its function names a phase only up
/// to "target or draft" (resolved by whether a draft frame is on the stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramePhase {
    Fixed(PhaseId),
    /// Weight loading: drafter-load under a draft frame, else target-load.
    Load,
    /// Graph capture: draft-graph-capture under a draft frame, else target-graph-capture.
    Graph,
    /// Config parsing: drafter-init under a draft frame, else preflight.
    Config,
    /// Serving requests: warmup while the log is warming up, else serving.
    Runtime,
    /// A frame shared by several phases (a dummy forward runs in KV profiling, in graph
    /// capture and in warm-up): its phase counts only when no other frame of the stack maps.
    Weak(PhaseId),
}

/// What a matched line means.
#[derive(Clone, Copy, Debug)]
pub enum Action {
    Phase(PhaseId, Edge),
    /// SGLang `Load weight begin/end`: target or draft, by the `cls` capture or by count.
    WeightLoad(Edge),
    /// vLLM `Loading weights took` / `Model loading took`: ends the open load phase.
    LoadDone,
    /// tqdm checkpoint-shard bar (`done`, `total` captures).
    ShardBar,
    /// tqdm graph-capture bar (`done`, `total`, and `bs` or `desc` captures).
    CaptureBar,
    /// SGLang `Capture cuda graph bs [..]`.
    CaptureBatchList,
    /// The engine's argument dump (`server_args=…`, `non-default args: …`).
    ArgsDump,
    /// The engine's version, in the `version` capture.
    Version,
    /// Runtime metrics with an accept length (`acc`) and maybe a throughput (`tps`).
    DecodeStats,
    /// A line that only tells the wording (for the version guess); no state changes.
    Mark,
    /// Request traffic (prefill batches, access log): warm-up before ready unless it shows
    /// real requests (then serving), and too routine for a Log event.
    Traffic,
    ServerReady,
    /// A line only a serving server prints (a request executing, a metrics report): the
    /// server was ready.
    ServingLine,
    /// The server died; the cause is diagnosed elsewhere (a traceback, another rank), or,
    /// if nothing else explains it by the end, by `unrecognized-failure` with this note.
    Crash(&'static str),
    /// A failure (or warning) the rule names directly.
    Fail(&'static Failure),
    /// A source line in a traceback (a bare `assert`, a dict lookup) that explains the
    /// exception line below it, which says little by itself.
    Hint(&'static Failure),
    /// A CUDA device-side assert or illegal access: the cause depends on what the log said
    /// before (see diagnose.rs).
    DeviceFault(Fault),
}

/// The kinds of CUDA device fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    IllegalAccess,
    /// A device-side assert or index check: an input out of range.
    Assert,
}

/// What the remedy builders may look at.
pub struct Ctx<'a> {
    pub caps: &'a Captures<'a>,
    /// The launch flags recovered from the log's argument dump (empty without one).
    pub spec: &'a LaunchSpec,
    /// The version wording the log looks like so far (bits of `Dialects`).
    pub dialect: Dialects,
    /// The phase the failure was placed in.
    pub phase: PhaseId,
    /// The phase came from the log (a frame, a marker, the rule); false when nothing said.
    pub phase_known: bool,
    /// The engine the log is from (flag names differ).
    pub engine: Engine,
}

/// A recognised failure: the finding it becomes.
#[derive(Debug)]
pub struct Failure {
    pub id: &'static str,
    pub severity: Severity,
    /// The phase, when the message fixes it; else it comes from the traceback or the log.
    pub phase: Option<PhaseId>,
    /// The finding's message; `$name` / `${name}` are filled from the rule's captures.
    pub message: &'static str,
    pub remedies: fn(&Ctx) -> Vec<Remedy>,
}

pub const fn failure(
    id: &'static str,
    severity: Severity,
    phase: Option<PhaseId>,
    message: &'static str,
    remedies: fn(&Ctx) -> Vec<Remedy>,
) -> Failure {
    Failure { id, severity, phase, message, remedies }
}

pub struct Rule {
    pub engine: Engine,
    /// A literal that occurs in every line the regex matches.
    pub anchor: &'static str,
    pub pattern: &'static str,
    pub action: Action,
    /// The wordings this text belongs to (for the version guess).
    pub dialects: Dialects,
}

pub const fn rule(engine: Engine, anchor: &'static str, pattern: &'static str, action: Action, dialects: Dialects) -> Rule {
    Rule { engine, anchor, pattern, action, dialects }
}

/// All rules, compiled once per process.
pub struct RuleSet {
    pub rules: Vec<&'static Rule>,
    regexes: Vec<Regex>,
    prefilter: AhoCorasick,
    /// For each distinct anchor, the rules that use it, in table order.
    by_anchor: Vec<Vec<usize>>,
    /// Routine rules (request traffic, decode stats) by the text their lines start with: most
    /// lines of a long log are these, and a line that starts so is routine, so the
    /// automaton's scan of the whole line is skipped for them.
    routine: Vec<(&'static str, usize)>,
}

impl RuleSet {
    /// Compiles `rules` (table order is match order).
    pub fn build(rules: Vec<&'static Rule>) -> RuleSet {
        let regexes = rules.iter().map(|r| Regex::new(r.pattern).unwrap_or_else(|e| panic!("rule {:?}: {e}", r.pattern))).collect();
        let mut anchors: Vec<&'static str> = Vec::new();
        let mut by_anchor: Vec<Vec<usize>> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            match anchors.iter().position(|a| *a == r.anchor) {
                Some(k) => by_anchor[k].push(i),
                None => {
                    anchors.push(r.anchor);
                    by_anchor.push(vec![i]);
                }
            }
        }
        let prefilter = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&anchors)
            .expect("rule anchors build an automaton");
        let routine = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.action, Action::Traffic | Action::DecodeStats) && r.pattern.is_empty())
            .filter(|(_, r)| !r.anchor.starts_with(' '))
            .map(|(i, r)| (r.anchor, i))
            .collect();
        RuleSet { rules, regexes, prefilter, by_anchor, routine }
    }

    /// The first rule (in table order) that matches `message` and `accept`s. Its captures
    /// are taken only if the caller asks (most matched lines are routine and need none).
    pub fn first_match<'m>(&self, message: &'m str, accept: impl Fn(&Rule) -> bool) -> Option<Matched<'_, 'm>> {
        let matched = |i: usize| Matched { rule: self.rules[i], regex: &self.regexes[i], message };
        if let Some(&(_, i)) = self.routine.iter().find(|(prefix, i)| message.starts_with(prefix) && accept(self.rules[*i])) {
            return Some(matched(i));
        }
        let mut candidates: Vec<usize> = Vec::new();
        for m in self.prefilter.find_overlapping_iter(message) {
            candidates.extend_from_slice(&self.by_anchor[m.pattern().as_usize()]);
        }
        if candidates.len() > 1 {
            candidates.sort_unstable();
            candidates.dedup();
        }
        candidates
            .into_iter()
            .find(|&i| {
                let rule = self.rules[i];
                accept(rule) && (rule.pattern.is_empty() || self.regexes[i].is_match(message))
            })
            .map(matched)
    }
}

/// A rule that matched a message.
pub struct Matched<'s, 'm> {
    pub rule: &'static Rule,
    regex: &'s Regex,
    message: &'m str,
}

impl<'m> Matched<'_, 'm> {
    /// The rule's named captures on the message (empty for an anchor-only rule).
    pub fn captures(&self) -> Option<Captures<'m>> {
        self.regex.captures(self.message)
    }
}

/// The `$name` expansion of a template against captures.
pub fn expand(template: &str, caps: &Captures) -> String {
    let mut out = String::new();
    caps.expand(template, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles_with_a_selective_anchor() {
        let set = crate::replay::text::rule_set();
        assert!(set.rules.len() > 150, "{} rules", set.rules.len());
        for r in &set.rules {
            // Short anchors would send most lines to the regexes and defeat the prefilter.
            assert!(r.anchor.len() >= 10, "anchor {:?} is too short to filter", r.anchor);
        }
    }

    /// Every rule meets its text somewhere in the test logs (the catalogue logs, the real
    /// excerpts, and testdata/logs/messages.txt for messages without a whole scenario), so no
    /// rule is dead or has a pattern that misses the engine's wording.
    #[test]
    fn every_rule_matches_some_log_line() {
        use crate::replay::header::Header;
        use crate::replay::lines::{for_each_segment, strip_prefixes};
        let set = crate::replay::text::rule_set();
        let mut hit = vec![false; set.rules.len()];
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
        let mut files = Vec::new();
        for dir in ["logs/sglang-classic", "logs/sglang-mid", "logs/sglang-new", "logs/vllm-0.10", "logs/vllm-0.33", "real-logs"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                files.push(entry.unwrap().path());
            }
        }
        let messages = std::fs::read_to_string(root.join("logs/messages.txt")).unwrap();
        let message_lines = messages.lines().filter_map(|l| l.splitn(3, '\t').nth(2)).collect::<Vec<_>>().join("\n");
        let mut texts: Vec<Vec<u8>> = vec![message_lines.into_bytes()];
        for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "log")) {
            texts.push(std::fs::read(path).unwrap());
        }
        for text in &texts {
            for raw in text.split(|&b| b == b'\n') {
                for_each_segment(raw, &mut |segment| {
                    let un = strip_prefixes(segment);
                    let message = Header::parse(un.rest, un.process).message;
                    // Every rule that matches, not just the first: each must be reachable.
                    for (i, r) in set.rules.iter().enumerate() {
                        if !hit[i] && message.contains(r.anchor) && set.regexes[i].is_match(message) {
                            hit[i] = true;
                        }
                    }
                });
            }
        }
        let missed: Vec<&str> = set.rules.iter().zip(&hit).filter(|(_, h)| !**h).map(|(r, _)| r.anchor).collect();
        assert!(missed.is_empty(), "rules no test line matches: {missed:#?}");
    }

    #[test]
    fn prefilter_picks_the_first_rule_in_table_order() {
        let set = crate::replay::text::rule_set();
        let m = set
            .first_match("Load weight end. elapsed=152.31 s, type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=52.58 GB, mem usage=41.59 GB.", |_| true)
            .unwrap();
        assert!(matches!(m.rule.action, Action::WeightLoad(Edge::End)));
        assert_eq!(m.rule.dialects, M);
        assert_eq!(&m.captures().unwrap()["cls"], "KimiK25ForConditionalGeneration");
        assert!(set.first_match("nothing to see here", |_| true).is_none());
    }
}
