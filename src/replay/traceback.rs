//! Python tracebacks in a log: which lines belong to which traceback, its frames, its last
//! (exception) line, and the phase its deepest engine frame points at.
//!
//! SGLang logs a traceback as one multi-line record: a headed first line (`[… TP3]
//! Scheduler hit an exception: Traceback …`) and bare lines after it. vLLM repeats the header
//! on every line, so lines of two processes can interleave; there the process tells them
//! apart. Pasted tracebacks are often cut at either end, or lose their indentation.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use crate::phase::PhaseId;

use super::rules::{Failure, FramePhase};

/// Frames kept per traceback: the deepest ones matter, and recursion can nest thousands.
const MAX_FRAMES: usize = 64;

/// The packages whose frames are the engine's own (vLLM plugins such as vllm-ascend included).
pub const ENGINE_ROOTS: [&str; 4] = ["/sglang/", "/vllm/", "/vllm_ascend/", "/tensorrt_llm/"];

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
    let indented = trimmed.len() < message.len();
    if let Some(frame) = trimmed.strip_prefix("File \"") {
        if let Some((path, rest)) = frame.split_once('"') {
            // Unindented (a paste that lost its leading spaces), a frame still reads `", line N`.
            if indented || rest.starts_with(", line ") {
                let func = rest.rsplit_once(", in ").map_or("", |(_, f)| f.split_whitespace().next().unwrap_or(""));
                return TbLine::Frame { path, func };
            }
        }
    }
    if indented {
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
    /// The function its source line calls (`self.init_cuda_graphs()`), when shown.
    pub call: Option<String>,
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
                // A collapsed paste runs the source line on after the function name.
                let code =
                    text.rsplit_once(", in ").and_then(|(_, rest)| rest.trim().split_once(char::is_whitespace)).map(|(_, code)| code);
                let call = code.and_then(called_function);
                self.frames.push(Frame { line, text: text.to_string(), call, path: path.to_string(), func: func.to_string() });
            }
            // The first line under a frame is its source (unindented pastes make it `Other`).
            TbLine::Code | TbLine::Other if self.last.0 != line => {
                if let Some(f) = self.frames.last_mut().filter(|f| f.call.is_none() && f.line == self.last.0) {
                    f.call = called_function(text);
                }
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
        ENGINE_ROOTS.iter().any(|root| f.path.contains(root))
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

    /// The phase of the deepest frame the tables map (a weak frame only when no other maps).
    /// A traceback cut before its error line ends on a call: the function called counts as
    /// the deepest frame. `warming`: the log is in warm-up, where runtime frames then belong.
    pub fn phase(&self, tables: &[&[(&str, &str, FramePhase)]], warming: bool) -> Option<PhaseId> {
        let entries = || tables.iter().flat_map(|t| t.iter());
        let lookup =
            |path: &str, func: &str| entries().find(|&&(p, f, _)| path.contains(p) && func_matches(f, func)).map(|&(_, _, phase)| phase);
        // A call is only known by its name: only entries that name a function place it.
        let named = |path: &str, func: &str| {
            entries().find(|&&(p, f, _)| !f.is_empty() && path.contains(p) && func_matches(f, func)).map(|&(_, _, phase)| phase)
        };
        let cut_call = match (&self.exception, self.frames.last()) {
            (None, Some(f)) => f.call.as_deref().and_then(|call| named(&f.path, call)),
            _ => None,
        };
        let mapped: Vec<FramePhase> =
            cut_call.into_iter().chain(self.frames.iter().rev().filter_map(|f| lookup(&f.path, &f.func))).collect();
        let chosen = mapped.iter().find(|p| !matches!(p, FramePhase::Weak(_))).or(mapped.first())?;
        let draft = self.has_draft_frame();
        Some(match *chosen {
            FramePhase::Fixed(p) | FramePhase::Weak(p) => p,
            FramePhase::Load if draft => PhaseId::DrafterLoad,
            FramePhase::Load => PhaseId::TargetLoad,
            FramePhase::Graph if draft => PhaseId::DraftGraphCapture,
            FramePhase::Graph => PhaseId::TargetGraphCapture,
            FramePhase::Config if draft => PhaseId::DrafterInit,
            FramePhase::Config => PhaseId::Preflight,
            FramePhase::Runtime if warming => PhaseId::Warmup,
            FramePhase::Runtime => PhaseId::Serving,
        })
    }
}

/// `self.draft_worker = EAGLEWorker(` → `EAGLEWorker`; `self.init_cuda_graphs()` → `init_cuda_graphs`.
fn called_function(code: &str) -> Option<String> {
    let before = &code[..code.find('(')?];
    let name = before.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// A table's function name: empty matches any, a trailing `*` any with that start.
fn func_matches(pattern: &str, func: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(start) => func.starts_with(start),
        None => pattern.is_empty() || pattern == func,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{sglang, trtllm, vllm};

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

    /// sglang_12190_dsv32_mtp_ima_unindented.log: the paste lost every leading space.
    #[test]
    fn unindented_frames_are_frames() {
        assert_eq!(
            classify("File \"/tmp/hlu/sglang/python/sglang/srt/managers/scheduler.py\", line 983, in event_loop_normal"),
            TbLine::Frame { path: "/tmp/hlu/sglang/python/sglang/srt/managers/scheduler.py", func: "event_loop_normal" }
        );
        assert_eq!(classify("File \"x\" not found"), TbLine::Other);
        // A collapsed paste runs the code line on after the frame.
        assert_eq!(
            classify("  File \"/x/y.py\", line 1, in run    scheduler = Scheduler("),
            TbLine::Frame { path: "/x/y.py", func: "run" }
        );
    }

    fn frame(path: &str, func: &str) -> (String, TbLine<'static>) {
        let text = format!("  File \"{path}\", line 1, in {func}");
        (text, TbLine::Other)
    }

    fn traceback_of(lines: &[&str]) -> Traceback {
        let mut tb = Traceback::new(None, 1, lines[0]);
        for (i, text) in lines.iter().enumerate() {
            tb.push(i as u64 + 1, text, &classify(text));
        }
        tb
    }

    /// One case per frame → phase entry added from the real excerpts (testdata/real-logs),
    /// each with the excerpt's own lines.
    #[test]
    fn frames_of_the_real_excerpts_give_their_phases() {
        let tables: [&[(&str, &str, FramePhase)]; 3] = [sglang::FRAMES, vllm::FRAMES, trtllm::FRAMES];
        let sgl = "  File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\"";
        let cases: Vec<(&str, Vec<String>, PhaseId)> = vec![
            // sglang_18220: cut on the call into the draft worker's set-up.
            (
                "maybe_init_draft_worker",
                vec![format!("{sgl}, line 540, in init_model_worker"), "    self.maybe_init_draft_worker()".into()],
                PhaseId::DrafterInit,
            ),
            // sglang_28521: the draft worker's __init__, cut on its call to init_cuda_graphs.
            (
                "init_cuda_graphs (called)",
                vec![
                    format!("{sgl}, line 802, in maybe_init_draft_worker"),
                    "    self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)".into(),
                    "  File \"/sgl-workspace/sglang/python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py\", line 190, in __init__".into(),
                    "    self.init_cuda_graphs()".into(),
                ],
                PhaseId::DraftGraphCapture,
            ),
            // sglang_7139: the scheduler's event loop.
            (
                "event_loop*",
                vec![
                    "  File \"/hy-tmp/sglang-0.4.7/python/sglang/srt/managers/scheduler.py\", line 2506, in run_scheduler_process".into(),
                    "    scheduler.event_loop_normal()".into(),
                    "  File \"/hy-tmp/sglang-0.4.7/python/sglang/srt/managers/scheduler.py\", line 664, in event_loop_normal".into(),
                ],
                PhaseId::Serving,
            ),
            // sglang_6309: a batch being run.
            (
                "run_batch",
                vec![format!("{sgl}, line 2035, in run_batch"), "    batch_result = self.model_worker.forward_batch_generation(".into()],
                PhaseId::Serving,
            ),
            // sglang_12190, pasted without indentation.
            (
                "get_next_batch_to_run",
                vec![
                    "File \"/tmp/hlu/sglang/python/sglang/srt/managers/scheduler.py\", line 1624, in get_next_batch_to_run".into(),
                    "new_batch = self.prepare_mlp_sync_batch(new_batch)".into(),
                    "^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^".into(),
                ],
                PhaseId::Serving,
            ),
            // vllm_speculators266: the drafter's dummy forward, under no caller that says more.
            (
                "spec_decode dummy_run",
                vec![
                    "  File \"/usr/local/lib/python3.12/dist-packages/vllm/forward_context.py\", line 615, in set_forward_context".into(),
                    "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/spec_decode/eagle.py\", line 1486, in dummy_run".into(),
                    "    self.model(".into(),
                ],
                PhaseId::Warmup,
            ),
            // vllm_ascend4990: the worker's dummy run.
            (
                "vllm_ascend _dummy_run",
                vec!["  File \"/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py\", line 2258, in _dummy_run".into()],
                PhaseId::Warmup,
            ),
            // A dummy run under KV profiling is KV profiling: the weak frame yields.
            (
                "_dummy_run under profile_run",
                vec![
                    "  File \"/x/vllm/v1/worker/gpu_model_runner.py\", line 1, in profile_run".into(),
                    "  File \"/x/vllm/v1/worker/gpu_model_runner.py\", line 2, in _dummy_run".into(),
                ],
                PhaseId::KvAlloc,
            ),
            // trtllm_15022: generation graph capture through the speculative set-up.
            (
                "trtllm capture",
                vec![
                    "  File \"/usr/local/lib/python3.12/dist-packages/tensorrt_llm/_torch/pyexecutor/model_engine.py\", line 1083, in _capture_generation_cuda_graphs".into(),
                    "  File \"/usr/local/lib/python3.12/dist-packages/tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py\", line 379, in capture".into(),
                    "  File \"/usr/local/lib/python3.12/dist-packages/tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py\", line 370, in _setup_spec_decoding_and_forward".into(),
                    "  File \"/usr/local/lib/python3.12/dist-packages/tensorrt_llm/_torch/pyexecutor/model_engine.py\", line 4037, in capture_forward_fn".into(),
                ],
                PhaseId::TargetGraphCapture,
            ),
        ];
        for (entry, lines, want) in &cases {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            assert_eq!(traceback_of(&lines).phase(&tables, false), Some(*want), "{entry}");
        }
        // The event loop during warm-up is the warm-up's request.
        let (_, loop_lines, _) = &cases[2];
        let lines: Vec<&str> = loop_lines.iter().map(String::as_str).collect();
        assert_eq!(traceback_of(&lines).phase(&tables, true), Some(PhaseId::Warmup));
    }

    #[test]
    fn deepest_mapped_frame_gives_the_phase() {
        let tables: [&[(&str, &str, FramePhase)]; 3] = [sglang::FRAMES, vllm::FRAMES, trtllm::FRAMES];
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
