//! The engine's own line header: time, rank, level, and the message after it.

use crate::event::LogLevel;

use super::clock::ClockSource;
use super::rules::Engine;

#[derive(Debug, PartialEq)]
pub struct Header<'a> {
    /// Which engine's header shape this was; `None` for a line without a header
    /// (a traceback line, a tqdm bar, a pasted fragment).
    pub engine: Option<Engine>,
    pub time: Option<(ClockSource, f64)>,
    /// `TP3`, `TP5 EP5` (SGLang), or a process name (`Worker_TP1`, vLLM).
    pub rank: Option<&'a str>,
    pub level: Option<LogLevel>,
    pub message: &'a str,
}

impl<'a> Header<'a> {
    pub fn bare(message: &'a str) -> Header<'a> {
        Header { engine: None, time: None, rank: None, level: None, message }
    }

    /// Reads whichever header `line` has. `process` is the `(Name pid=N)` prefix, which vLLM
    /// uses for its ranks.
    pub fn parse(line: &'a str, process: Option<&'a str>) -> Header<'a> {
        super::sglang::header(line)
            .or_else(|| super::vllm::header(line, process))
            .or_else(|| uvicorn(line))
            .unwrap_or_else(|| Header { rank: process, ..Header::bare(line) })
    }

    /// The TP rank, when the header names one (`TP3`, `Worker_TP3`).
    pub fn tp_rank(&self) -> Option<u32> {
        let rank = self.rank?;
        let at = rank.find("TP")? + 2;
        let digits: String = rank[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    }
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

/// uvicorn's `INFO:     Started server process [1]` (both engines serve through uvicorn).
fn uvicorn(line: &str) -> Option<Header<'_>> {
    let (name, rest) = line.split_once(':')?;
    let level = level_from_name(name)?;
    let message = rest.trim_start_matches(' ');
    (message.len() < rest.len()).then_some(Header { engine: None, time: None, rank: None, level: Some(level), message })
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
}
