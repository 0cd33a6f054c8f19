//! Python tracebacks in a log: which lines belong to which traceback, its frames, its last
//! (exception) line, and the phase its deepest engine frame points at.
//!
//! SGLang logs a traceback as one multi-line record: a headed first line (`[… TP3]
//! Scheduler hit an exception: Traceback …`) and bare lines after it. vLLM repeats the header
//! on every line, so lines of two processes can interleave; there the process tells them
//! apart.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use crate::phase::PhaseId;

use super::rules::{Failure, FramePhase};

/// Frames kept per traceback: the deepest ones matter, and recursion can nest thousands.
const MAX_FRAMES: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TbLine<'a> {
    Start,
    Frame {
        path: &'a str,
        func: &'a str,
    },
    /// Source text under a frame (`    scheduler = Scheduler(`) or a caret line.
    Code,
    /// `During handling of the above exception, …` / `The above exception was the direct …`.
    Chain,
    /// `ValueError: …`, `torch.OutOfMemoryError: …`, a bare `AssertionError`.
    Exception,
    Blank,
    Other,
}

pub fn classify(message: &str) -> TbLine<'_> {
    if message.trim().is_empty() {
        return TbLine::Blank;
    }
    static START: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("Traceback (most recent call last):"));
    if START.find(message.as_bytes()).is_some() {
        return TbLine::Start;
    }
    let trimmed = message.trim_start();
    if trimmed.len() < message.len() {
        if let Some(frame) = trimmed.strip_prefix("File \"") {
            if let Some((path, rest)) = frame.split_once('"') {
                let func = rest.rsplit_once(", in ").map_or("", |(_, f)| f.trim());
                return TbLine::Frame { path, func };
            }
        }
        return TbLine::Code;
    }
    if message.starts_with("During handling of the above exception") || message.starts_with("The above exception was the direct cause") {
        return TbLine::Chain;
    }
    if is_exception_line(message) {
        return TbLine::Exception;
    }
    TbLine::Other
}

/// `Name: message` or `Name` where Name is a dotted Python name of an exception type.
fn is_exception_line(message: &str) -> bool {
    let name = message.split_once(':').map_or(message, |(n, _)| n);
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphabetic();
    let type_name = name.rsplit('.').next().unwrap_or(name);
    valid && (["Error", "Exception", "Exit", "Interrupt", "Iteration", "Fault", "Failure"].iter().any(|suffix| type_name.ends_with(suffix)))
}

#[derive(Clone, Debug)]
pub struct Frame {
    pub line: u64,
    pub text: String,
    pub path: String,
    pub func: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continuation {
    /// Not known until the second line.
    Unknown,
    /// Bare lines continue it (SGLang, plain Python).
    Bare,
    /// Lines with a header from the same process continue it (vLLM).
    Headed,
}

pub struct Traceback {
    /// The rank / process of the first line.
    pub key: Option<String>,
    pub start: (u64, String),
    pub frames: Vec<Frame>,
    pub exception: Option<(u64, String)>,
    pub last: (u64, String),
    /// A source line that explains a terse exception (a bare assert): the failure, the
    /// line number, the line and its message.
    pub hint: Option<(&'static Failure, u64, String, String)>,
    /// The last line was a chain line (`During handling of …`): the next `Traceback` line
    /// continues this traceback.
    pub after_chain: bool,
    /// What a crash marker inside it said.
    pub note: Option<&'static str>,
    /// An error finding came from one of its lines.
    pub diagnosed: bool,
    pub continuation: Continuation,
}

impl Traceback {
    pub fn new(key: Option<&str>, line: u64, text: &str) -> Traceback {
        Traceback {
            key: key.map(str::to_string),
            start: (line, text.to_string()),
            frames: Vec::new(),
            exception: None,
            last: (line, text.to_string()),
            hint: None,
            after_chain: false,
            note: None,
            diagnosed: false,
            continuation: Continuation::Unknown,
        }
    }

    pub fn push(&mut self, line: u64, text: &str, kind: &TbLine) {
        match *kind {
            TbLine::Frame { path, func } => {
                if self.frames.len() == MAX_FRAMES {
                    self.frames.remove(0);
                }
                self.frames.push(Frame { line, text: text.to_string(), path: path.to_string(), func: func.to_string() });
            }
            TbLine::Exception => self.exception = Some((line, text.to_string())),
            _ => {}
        }
        match kind {
            TbLine::Chain => self.after_chain = true,
            TbLine::Blank => {}
            _ => self.after_chain = false,
        }
        self.last = (line, text.to_string());
    }

    fn is_engine_frame(f: &Frame) -> bool {
        f.path.contains("/sglang/") || f.path.contains("/vllm/")
    }

    /// The deepest sglang/vllm frame.
    pub fn deepest_engine_frame(&self) -> Option<&Frame> {
        self.frames.iter().rev().find(|f| Self::is_engine_frame(f))
    }

    fn has_draft_frame(&self) -> bool {
        self.frames.iter().any(|f| {
            Self::is_engine_frame(f) && (f.path.contains("/speculative/") || f.path.contains("/spec_decode/") || f.path.contains("eagle"))
        })
    }

    /// The phase of the deepest frame the tables map; `ready` resolves runtime frames.
    pub fn phase(&self, tables: &[&[(&str, &str, FramePhase)]], ready: bool) -> Option<PhaseId> {
        let mapped = self.frames.iter().rev().find_map(|f| {
            tables
                .iter()
                .flat_map(|t| t.iter())
                .find_map(|&(path, func, phase)| (f.path.contains(path) && (func.is_empty() || f.func == func)).then_some(phase))
        })?;
        let draft = self.has_draft_frame();
        Some(match mapped {
            FramePhase::Fixed(p) => p,
            FramePhase::Load if draft => PhaseId::DrafterLoad,
            FramePhase::Load => PhaseId::TargetLoad,
            FramePhase::Graph if draft => PhaseId::DraftGraphCapture,
            FramePhase::Graph => PhaseId::TargetGraphCapture,
            FramePhase::Config if draft => PhaseId::DrafterInit,
            FramePhase::Config => PhaseId::Preflight,
            FramePhase::Runtime if ready => PhaseId::Ready,
            FramePhase::Runtime => PhaseId::Warmup,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{sglang, vllm};

    #[test]
    fn classifies_python_traceback_lines() {
        assert_eq!(classify("Scheduler hit an exception: Traceback (most recent call last):"), TbLine::Start);
        assert_eq!(
            classify("  File \"/sgl/python/sglang/srt/speculative/eagle_worker.py\", line 68, in __init__"),
            TbLine::Frame { path: "/sgl/python/sglang/srt/speculative/eagle_worker.py", func: "__init__" }
        );
        assert_eq!(classify("    self.draft_worker = EAGLEWorker("), TbLine::Code);
        assert_eq!(classify("                ^^^^^^^^^^"), TbLine::Code);
        assert_eq!(classify("AssertionError"), TbLine::Exception);
        assert_eq!(classify("torch.OutOfMemoryError: CUDA out of memory."), TbLine::Exception);
        assert_eq!(classify("KeyError: 'midlayer.self_attn.qkv_proj.weight'"), TbLine::Exception);
        assert_eq!(classify("During handling of the above exception, another exception occurred:"), TbLine::Chain);
        assert_eq!(classify("Possible solutions:"), TbLine::Other);
        assert_eq!(classify("Warning: Target model's context_length"), TbLine::Other);
    }

    fn frame(path: &str, func: &str) -> (String, TbLine<'static>) {
        let text = format!("  File \"{path}\", line 1, in {func}");
        (text, TbLine::Other)
    }

    #[test]
    fn deepest_mapped_frame_gives_the_phase() {
        let tables: [&[(&str, &str, FramePhase)]; 2] = [sglang::FRAMES, vllm::FRAMES];
        let mut tb = Traceback::new(Some("TP0"), 1, "Scheduler hit an exception: Traceback (most recent call last):");
        for (i, (path, func)) in [
            ("/x/sglang/srt/managers/scheduler.py", "__init__"),
            ("/x/sglang/srt/speculative/eagle_worker.py", "__init__"),
            ("/x/sglang/srt/model_executor/model_runner.py", "load_model"),
            ("/x/torch/nn/modules/module.py", "__getattr__"),
        ]
        .into_iter()
        .enumerate()
        {
            let (text, _) = frame(path, func);
            let kind = classify(&text);
            tb.push(i as u64 + 2, &text, &kind);
        }
        assert_eq!(tb.phase(&tables, false), Some(PhaseId::DrafterLoad));
        assert_eq!(tb.deepest_engine_frame().unwrap().func, "load_model");
        let mut target = Traceback::new(None, 1, "Traceback (most recent call last):");
        let (text, _) = frame("/x/sglang/srt/model_executor/cuda_graph_runner.py", "capture");
        target.push(2, &text, &classify(&text));
        assert_eq!(target.phase(&tables, false), Some(PhaseId::TargetGraphCapture));
    }
}
