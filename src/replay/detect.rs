//! Which log this is: our JSONL event log, an SGLang, vLLM, TRT-LLM or llama.cpp log; and,
//! from the wording of its markers, which engine version wrote it.

use serde::Serialize;

use super::header::{Header, HeaderShape};
use super::rules::{Dialects, Engine, C, M, N, V010, V033};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Jsonl,
    Sglang,
    Vllm,
    /// TRT-LLM and llama.cpp: named, and read with the rules every engine shares.
    #[serde(rename = "trtllm")]
    TrtLlm,
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// Nothing engine-specific seen (yet): read with SGLang's rules, the primary engine.
    Unknown,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Sglang => "sglang",
            Format::Vllm => "vllm",
            Format::TrtLlm => "trtllm",
            Format::LlamaCpp => "llama.cpp",
            Format::Unknown => "unknown",
        }
    }

    /// The engine whose rules apply.
    pub fn engine(self) -> Engine {
        match self {
            Format::Vllm => Engine::Vllm,
            Format::TrtLlm | Format::LlamaCpp => Engine::Any,
            Format::Jsonl | Format::Sglang | Format::Unknown => Engine::Sglang,
        }
    }
}

/// Text that only one engine prints, for lines without a telling header.
static SIGNATURES: &[(&str, Format)] = &[
    ("/sglang/srt/", Format::Sglang),
    ("sglang::scheduler", Format::Sglang),
    ("server_args=ServerArgs(", Format::Sglang),
    ("Capturing batches (bs=", Format::Sglang),
    ("The server is fired up and ready to roll!", Format::Sglang),
    ("Scheduler hit an exception", Format::Sglang),
    ("/vllm/v1/", Format::Vllm),
    ("/vllm/engine/", Format::Vllm),
    ("Eagle3 is only supported for", Format::Vllm),
    ("Capturing CUDA graphs (", Format::Vllm),
    ("EngineCore failed to start", Format::Vllm),
    ("vLLM API server version", Format::Vllm),
    ("/vllm_ascend/", Format::Vllm),
    ("/tensorrt_llm/", Format::TrtLlm),
    ("[TRT-LLM]", Format::TrtLlm),
    ("trtllm-serve", Format::TrtLlm),
    ("llama_model_loader: ", Format::LlamaCpp),
    ("slot print_timing: ", Format::LlamaCpp),
    ("srv  update_slots: ", Format::LlamaCpp),
];

/// vLLM's process names, as its `(Name pid=N)` prefix shows them.
static VLLM_PROCESSES: &[&str] = &["APIServer", "EngineCore", "Worker_", "VllmWorker", "RayWorkerWrapper"];

/// How sure a detection is: a header shape or process name is firm; a phrase is tentative
/// (an SGLang log can quote a vLLM path in a warning before its first header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Confidence {
    None,
    Phrase,
    Firm,
}

/// The format one line points to.
pub fn line_format(header: &Header, process: Option<&str>, text: &str) -> Option<(Format, Confidence)> {
    match header.engine {
        Some(HeaderShape::Sglang) => return Some((Format::Sglang, Confidence::Firm)),
        Some(HeaderShape::Vllm) => return Some((Format::Vllm, Confidence::Firm)),
        Some(HeaderShape::TrtLlm) => return Some((Format::TrtLlm, Confidence::Firm)),
        Some(HeaderShape::LlamaCpp) => return Some((Format::LlamaCpp, Confidence::Firm)),
        None => {}
    }
    if let Some(p) = process {
        if p.starts_with("SGLang") {
            return Some((Format::Sglang, Confidence::Firm));
        }
        if VLLM_PROCESSES.iter().any(|v| p.starts_with(v)) {
            return Some((Format::Vllm, Confidence::Firm));
        }
    }
    SIGNATURES.iter().find(|(s, _)| text.contains(s)).map(|&(_, f)| (f, Confidence::Phrase))
}

/// Votes for the version wordings, from the markers a log prints.
#[derive(Debug, Default)]
pub struct VersionVotes {
    votes: [u32; 5],
    /// A version the log states outright (vLLM prints it).
    pub stated: Option<String>,
}

const WORDINGS: [(Dialects, &str); 5] =
    [(C, "sglang 0.4.10–0.5.2"), (M, "sglang 0.5.9"), (N, "sglang 0.5.23"), (V010, "vllm 0.10"), (V033, "vllm 0.33")];

impl VersionVotes {
    pub fn add(&mut self, dialects: Dialects) {
        for (i, (bit, _)) in WORDINGS.iter().enumerate() {
            if dialects & bit != 0 {
                self.votes[i] += 1;
            }
        }
    }

    /// The wordings with the most votes among `engine`'s, as bits.
    pub fn best(&self, engine: Engine) -> Dialects {
        let range = match engine {
            Engine::Sglang => 0..3,
            Engine::Vllm => 3..5,
            // No wordings are told apart for the other engines.
            Engine::Any => return 0,
        };
        let top = self.votes[range.clone()].iter().copied().max().unwrap_or(0);
        if top == 0 {
            return 0;
        }
        range.filter(|&i| self.votes[i] == top).fold(0, |acc, i| acc | WORDINGS[i].0)
    }

    /// E.g. `sglang 0.5.9 wording`, `sglang 0.4.10–0.5.2 or 0.5.9 wording`, `vllm 0.10.2`.
    pub fn guess(&self, format: Format) -> Option<String> {
        if let Some(v) = &self.stated {
            return Some(format!("vllm {v}"));
        }
        let best = self.best(format.engine());
        // Text every version prints says nothing about the version.
        if best == C | M | N || best == V010 | V033 {
            return None;
        }
        let names: Vec<&str> = WORDINGS.iter().filter(|(bit, _)| best & bit != 0).map(|(_, n)| *n).collect();
        let (first, rest) = names.split_first()?;
        let engine = first.split(' ').next().unwrap_or("");
        let versions: Vec<&str> =
            std::iter::once(*first).chain(rest.iter().copied()).map(|n| n.trim_start_matches(engine).trim()).collect();
        Some(format!("{engine} {} wording", versions.join(" or ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_processes_are_firm_phrases_tentative() {
        let h = Header::parse("[2025-04-16 14:22:53 TP3] Load weight begin.", None);
        assert_eq!(line_format(&h, None, ""), Some((Format::Sglang, Confidence::Firm)));
        let h = Header::parse("INFO:     Started server process [1]", Some("APIServer"));
        assert_eq!(line_format(&h, Some("APIServer"), ""), Some((Format::Vllm, Confidence::Firm)));
        let text = "Value error, Eagle3 is only supported for Llama models.";
        assert_eq!(line_format(&Header::bare(text), None, text), Some((Format::Vllm, Confidence::Phrase)));
        assert_eq!(line_format(&Header::bare("hello"), None, "hello"), None);
    }

    #[test]
    fn version_guess_names_the_winning_wordings() {
        let mut v = VersionVotes::default();
        assert_eq!(v.guess(Format::Sglang), None);
        v.add(C | M);
        assert_eq!(v.guess(Format::Sglang).as_deref(), Some("sglang 0.4.10–0.5.2 or 0.5.9 wording"));
        v.add(M);
        assert_eq!(v.guess(Format::Sglang).as_deref(), Some("sglang 0.5.9 wording"));
        assert_eq!(v.best(Engine::Sglang), M);
        v.add(V033);
        assert_eq!(v.guess(Format::Vllm).as_deref(), Some("vllm 0.33 wording"));
        v.stated = Some("0.10.2".into());
        assert_eq!(v.guess(Format::Vllm).as_deref(), Some("vllm 0.10.2"));
    }
}
