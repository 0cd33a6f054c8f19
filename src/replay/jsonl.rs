//! Our own JSONL event log: each line is a `TimedEvent`, replayed exactly as recorded.

use crate::event::{Event, LogLevel, TimedEvent};

/// True when `line` is one of our events (used to recognise the format on its first line).
pub fn is_event_line(line: &str) -> bool {
    line.trim_start().starts_with('{') && TimedEvent::from_json_line(line.trim()).is_ok()
}

/// The event of one line, or a warning naming the line when it is not one (a truncated last
/// line, a stray print). The recorded `t` is kept, so a replay is identical to the run.
pub fn event(file: &str, line_no: u64, line: &str, last_t: f64) -> Option<TimedEvent> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    Some(TimedEvent::from_json_line(line).unwrap_or_else(|e| TimedEvent {
        t: last_t,
        event: Event::Log {
            level: LogLevel::Warning,
            source: "replay".to_string(),
            line: format!("{file}:{line_no}: not a specdeck event ({e})"),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::PhaseState;
    use crate::phase::PhaseId;

    #[test]
    fn events_round_trip_and_bad_lines_are_named() {
        let ev = TimedEvent { t: 2.5, event: Event::Phase { phase: PhaseId::Warmup, state: PhaseState::Done, detail: None } };
        let line = ev.to_json_line();
        assert!(is_event_line(&line));
        assert_eq!(event("e.jsonl", 1, &line, 0.0), Some(ev));
        assert_eq!(event("e.jsonl", 2, "  ", 0.0), None);
        let bad = event("e.jsonl", 3, "{\"t\":1,\"type\":\"nope\"}", 2.5).unwrap();
        assert_eq!(bad.t, 2.5);
        match bad.event {
            Event::Log { level, line, .. } => {
                assert_eq!(level, LogLevel::Warning);
                assert!(line.starts_with("e.jsonl:3: not a specdeck event"), "{line}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!is_event_line("[2025-01-01 00:00:00] x"));
    }
}
