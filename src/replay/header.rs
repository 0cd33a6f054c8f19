//! The engine's own line header: time, rank, level, and the message after it. Every engine's
//! header shape is read here: SGLang's, vLLM's (V1 and V0), uvicorn's, TRT-LLM's and llama.cpp's.

use crate::event::LogLevel;

use super::clock::{parse_datetime, parse_month_day_time, ClockSource};

#[derive(Debug, PartialEq)]
pub struct Header<'a> {
    /// Which engine's header shape this was; `None` for a line without a header
    /// (a traceback line, a tqdm bar, a pasted fragment) or a shape every engine prints.
    pub engine: Option<HeaderShape>,
    pub time: Option<(ClockSource, f64)>,
    /// `TP3`, `TP5 EP5` (SGLang), or a process name (`Worker_TP1`, vLLM).
    pub rank: Option<&'a str>,
    pub level: Option<LogLevel>,
    pub message: &'a str,
}

/// The engines whose header shape tells them apart from the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderShape {
    Sglang,
    Vllm,
    TrtLlm,
    LlamaCpp,
}

impl<'a> Header<'a> {
    pub fn bare(message: &'a str) -> Header<'a> {
        Header { engine: None, time: None, rank: None, level: None, message }
    }

    /// Reads whichever header `line` has. `process` is the `(Name pid=N)` prefix, which vLLM
    /// uses for its ranks.
    pub fn parse(line: &'a str, process: Option<&'a str>) -> Header<'a> {
        sglang(line)
            .or_else(|| vllm(line, process))
            .or_else(|| uvicorn(line))
            .or_else(|| trtllm(line))
            .or_else(|| llamacpp(line))
            .unwrap_or_else(|| Header { rank: process, ..Header::bare(line) })
    }

    /// The TP rank, when the header names one (`TP3`, `Worker_TP3`).
    pub fn tp_rank(&self) -> Option<u32> {
        tp_rank(self.rank?)
    }
}

/// The TP rank a rank or process name holds (`TP3`, `TP5 EP5`, `Worker_TP3`).
pub fn tp_rank(rank: &str) -> Option<u32> {
    let at = rank.find("TP")? + 2;
    let digits: String = rank[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

pub fn level_from_name(name: &str) -> Option<LogLevel> {
    match name {
        "DEBUG" => Some(LogLevel::Debug),
        "INFO" => Some(LogLevel::Info),
        "WARNING" | "WARN" => Some(LogLevel::Warning),
        "ERROR" | "CRITICAL" => Some(LogLevel::Error),
        _ => None,
    }
}

/// SGLang: `[2025-04-16 14:22:53 TP3] message` (milliseconds with `SGLANG_LOG_MS`).
pub fn sglang(line: &str) -> Option<Header<'_>> {
    let body = line.strip_prefix('[')?;
    let (raw, n) = parse_datetime(body.as_bytes())?;
    let close = n + body[n..].find(']')?;
    let tags = body[n..close].trim();
    let message = body[close + 1..].strip_prefix(' ').unwrap_or(&body[close + 1..]);
    let time = Some((ClockSource::Engine, raw));
    Some(Header { engine: Some(HeaderShape::Sglang), time, rank: (!tags.is_empty()).then_some(tags), level: None, message })
}

/// vLLM V1: `INFO 09-18 12:03:11 [default_loader.py:268] message` (fractions of seconds
/// allowed); V0: `INFO 02-06 03:05:53 metrics.py:475] message`. The rank is the process of
/// the `(EngineCore_DP0 pid=N)` prefix.
fn vllm<'a>(line: &'a str, process: Option<&'a str>) -> Option<Header<'a>> {
    let (level_name, rest) = line.split_once(' ')?;
    let level = level_from_name(level_name)?;
    let (raw, n) = parse_month_day_time(rest.as_bytes())?;
    let after_time = rest[n..].strip_prefix(' ')?;
    let source = after_time.strip_prefix('[').unwrap_or(after_time);
    let close = source.find("] ").or_else(|| source.strip_suffix(']').map(str::len))?;
    // The source is `file.py:N`: no spaces, so a V0 header is not confused with a message.
    if source[..close].contains(' ') {
        return None;
    }
    let after = &source[close + 1..];
    Some(Header {
        engine: Some(HeaderShape::Vllm),
        time: Some((ClockSource::EngineYearless, raw)),
        rank: process,
        level: Some(level),
        message: after.strip_prefix(' ').unwrap_or(after),
    })
}

/// uvicorn's `INFO:     Started server process [1]` (the engines serve through uvicorn).
fn uvicorn(line: &str) -> Option<Header<'_>> {
    let (name, rest) = line.split_once(':')?;
    let level = level_from_name(name)?;
    let message = rest.trim_start_matches(' ');
    (message.len() < rest.len()).then_some(Header { engine: None, time: None, rank: None, level: Some(level), message })
}

/// TRT-LLM: `[12/01/2025-10:00:00] [TRT-LLM] [I] message` (the stamp is optional).
fn trtllm(line: &str) -> Option<Header<'_>> {
    let at = line.find("[TRT-LLM] [")?;
    if at > 0 && !line.starts_with('[') {
        return None;
    }
    let rest = &line[at + "[TRT-LLM] [".len()..];
    let (tag, message) = rest.split_once("] ")?;
    let level = match tag {
        "V" | "D" => LogLevel::Debug,
        "I" => LogLevel::Info,
        "W" => LogLevel::Warning,
        "E" | "F" => LogLevel::Error,
        _ => return None,
    };
    Some(Header { engine: Some(HeaderShape::TrtLlm), time: None, rank: None, level: Some(level), message })
}

/// llama.cpp's server: `0.06.895.980 I slot print_timing: …` (elapsed time, a level letter).
fn llamacpp(line: &str) -> Option<Header<'_>> {
    let (stamp, rest) = line.split_once(' ')?;
    let parts: Vec<&str> = stamp.split('.').collect();
    if parts.len() != 4 || !parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let (tag, message) = rest.split_once(' ')?;
    let level = match tag {
        "D" => LogLevel::Debug,
        "I" => LogLevel::Info,
        "W" => LogLevel::Warning,
        "E" => LogLevel::Error,
        _ => return None,
    };
    Some(Header { engine: Some(HeaderShape::LlamaCpp), time: None, rank: None, level: Some(level), message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvicorn_lines_have_a_level_and_no_time() {
        let h = Header::parse("INFO:     Application startup complete.", Some("APIServer"));
        assert_eq!(h.level, Some(LogLevel::Info));
        assert_eq!(h.message, "Application startup complete.");
        assert_eq!(h.time, None);
    }

    #[test]
    fn bare_lines_keep_the_process_as_rank() {
        let h = Header::parse("  File \"x.py\", line 1, in f", Some("Worker_TP3"));
        assert_eq!(h.engine, None);
        assert_eq!(h.tp_rank(), Some(3));
        assert_eq!(h.message, "  File \"x.py\", line 1, in f");
    }

    #[test]
    fn sglang_header_reads_time_ranks_and_message() {
        let h = sglang("[2025-09-05 20:48:29 TP0 EP0] Capture cuda graph end. Time elapsed: 12.11 s.").unwrap();
        assert_eq!(h.rank, Some("TP0 EP0"));
        assert_eq!(h.tp_rank(), Some(0));
        assert_eq!(h.message, "Capture cuda graph end. Time elapsed: 12.11 s.");
        let h = sglang("[2025-09-05 20:48:29.120] The server is fired up and ready to roll!").unwrap();
        assert_eq!(h.rank, None);
        assert!(sglang("[pod/x] y").is_none());
    }

    #[test]
    fn vllm_header_reads_level_time_and_message() {
        let h = vllm("INFO 09-18 12:03:11 [default_loader.py:268] Loading weights took 0.42 seconds", Some("EngineCore_DP0")).unwrap();
        assert_eq!(h.level, Some(LogLevel::Info));
        assert_eq!(h.rank, Some("EngineCore_DP0"));
        assert_eq!(h.message, "Loading weights took 0.42 seconds");
        let h = vllm("ERROR 09-18 12:03:11.250 [core.py:700]   File \"/x/vllm/v1/engine/core.py\", line 1, in f", None).unwrap();
        assert_eq!(h.message, "  File \"/x/vllm/v1/engine/core.py\", line 1, in f");
        assert!(vllm("INFO:     Started server process [3406797]", None).is_none());
    }

    /// vllm_7301_v0_speculative_metrics_low_acceptance.log: V0 has no bracket before the source.
    #[test]
    fn vllm_v0_header_has_no_opening_bracket() {
        let line = "INFO 02-06 03:05:53 metrics.py:475] Speculative metrics: Draft acceptance rate: 0.200, System efficiency: 0.167";
        let h = Header::parse(line, None);
        assert_eq!(h.engine, Some(HeaderShape::Vllm));
        assert!(h.message.starts_with("Speculative metrics: Draft acceptance rate"), "{}", h.message);
        assert_eq!(Header::parse("INFO 02-06 03:05:53 the server is up] x", None).engine, None);
    }

    /// other_llamacpp24536_eagle3_draft_acceptance.log.
    #[test]
    fn llamacpp_and_trtllm_headers_name_their_engine() {
        let h = Header::parse("0.06.896.140 I srv  update_slots: all slots are idle", None);
        assert_eq!(
            (h.engine, h.level, h.message),
            (Some(HeaderShape::LlamaCpp), Some(LogLevel::Info), "srv  update_slots: all slots are idle")
        );
        let h = Header::parse("[12/01/2025-10:00:00] [TRT-LLM] [E] Failed to capture", None);
        assert_eq!((h.engine, h.level, h.message), (Some(HeaderShape::TrtLlm), Some(LogLevel::Error), "Failed to capture"));
        assert_eq!(Header::parse("1.2.3 I x", None).engine, None);
    }
}
