//! The one event stream that every producer writes and every consumer reads.
//!
//! A live launch, a replayed SGLang log and a recorded JSONL file all become the same
//! `TimedEvent`s, so the console, the headless printer and the tests cannot tell them apart.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::finding::Finding;
use crate::phase::PhaseId;
use crate::spec::{LaunchSpec, SpecChange};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseState {
    Started,
    Done,
    Failed,
    /// The phase was not needed (e.g. graph capture on the CPU backend, or a target kept
    /// resident across a relaunch).
    Skipped,
}

/// What a progress counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgressUnit {
    Bytes,
    /// One step per captured batch size; `label` holds the batch size.
    BatchSize,
    Items,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    Debug,
    Info,
    Warning,
    Error,
}

/// One GPU's sample from NVML.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    pub name: String,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub utilization_pct: u32,
    pub temperature_c: u32,
    pub power_w: f64,
}

/// Running figures of a generation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationStats {
    pub tokens: usize,
    pub tokens_per_s: f64,
    /// Tokens emitted per target verify step (accepted draft tokens + the target's own).
    pub mean_accept_length: f64,
    /// `accept_histogram[n]` counts verify steps that emitted `n` tokens.
    pub accept_histogram: Vec<u64>,
}

// A launch is one event per attempt; boxing its spec would cost every reader a deref for
// nothing, so the size of the one large variant stays.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Event {
    /// A launch (attempt 1) or relaunch (attempt > 1) begins with this spec.
    Launch {
        attempt: u32,
        spec: LaunchSpec,
    },
    Phase {
        phase: PhaseId,
        state: PhaseState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    Progress {
        phase: PhaseId,
        unit: ProgressUnit,
        /// The GPU this counter belongs to, when the work is sharded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu: Option<u32>,
        /// A file name, a batch size, or another name for what is counted.
        label: String,
        done: u64,
        total: u64,
    },
    Log {
        level: LogLevel,
        source: String,
        line: String,
    },
    Finding(Finding),
    /// A remedy was applied to the launch spec.
    RemedyApplied {
        id: String,
        changes: Vec<SpecChange>,
    },
    Telemetry {
        /// Empty when NVML or a GPU is absent.
        gpus: Vec<GpuSample>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Tokens appended to the output. `drafted` marks tokens proposed by the drafter and
    /// accepted by the target, as opposed to tokens the target produced itself.
    Token {
        ids: Vec<u32>,
        text: String,
        drafted: bool,
    },
    /// The console sent a prompt to the engine; the tokens that follow answer it. On the
    /// stream so that a replayed session shows the prompt as the live one did.
    Prompt {
        text: String,
        max_new_tokens: usize,
    },
    Stats(GenerationStats),
    Ready {
        /// Seconds from the launch event to ready.
        elapsed_s: f64,
        /// True when a relaunch kept the target weights resident.
        reused_target: bool,
    },
    Exit {
        code: i32,
        reason: String,
    },
}

/// An event with the time it happened, in seconds since the stream's epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimedEvent {
    pub t: f64,
    #[serde(flatten)]
    pub event: Event,
}

impl TimedEvent {
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("events always serialize")
    }

    pub fn from_json_line(line: &str) -> serde_json::Result<TimedEvent> {
        serde_json::from_str(line)
    }
}

pub type EventReceiver = mpsc::UnboundedReceiver<TimedEvent>;

/// Seconds each phase took, from its `Started` to its `Done` or `Failed`, in the order the
/// phases ended (skipped phases take no time and are left out).
#[derive(Debug, Default)]
pub struct PhaseTimer {
    started: std::collections::HashMap<PhaseId, f64>,
    pub ended: Vec<(PhaseId, f64)>,
}

impl PhaseTimer {
    pub fn observe(&mut self, ev: &TimedEvent) {
        let Event::Phase { phase, state, .. } = &ev.event else { return };
        match state {
            PhaseState::Started => {
                self.started.insert(*phase, ev.t);
            }
            PhaseState::Done | PhaseState::Failed => {
                if let Some(t0) = self.started.remove(phase) {
                    self.ended.push((*phase, ev.t - t0));
                }
            }
            PhaseState::Skipped => {}
        }
    }
}

/// The producer side of the stream. Cheap to clone; usable from plain threads and tasks.
/// Sends never block, and a closed receiver is not an error (the console may have quit).
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<TimedEvent>,
    epoch: Instant,
}

impl EventSink {
    pub fn channel() -> (EventSink, EventReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink { tx, epoch: Instant::now() }, rx)
    }

    /// Seconds since this stream's epoch.
    pub fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    pub fn emit(&self, event: Event) {
        let t = self.now();
        self.emit_at(t, event);
    }

    /// Emit with an explicit timestamp (replay uses the log's own times).
    pub fn emit_at(&self, t: f64, event: Event) {
        let _ = self.tx.send(TimedEvent { t, event });
    }

    pub fn phase(&self, phase: PhaseId, state: PhaseState) {
        self.emit(Event::Phase { phase, state, detail: None });
    }

    pub fn log(&self, level: LogLevel, source: &str, line: impl Into<String>) {
        self.emit(Event::Log { level, source: source.to_string(), line: line.into() });
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_event_has_flat_json_form() {
        let ev = TimedEvent { t: 1.5, event: Event::Phase { phase: PhaseId::TargetLoad, state: PhaseState::Started, detail: None } };
        let line = ev.to_json_line();
        assert_eq!(line, r#"{"t":1.5,"type":"phase","phase":"target-load","state":"started"}"#);
        assert_eq!(TimedEvent::from_json_line(&line).unwrap(), ev);
    }

    #[test]
    fn sink_stamps_in_order() {
        let (sink, mut rx) = EventSink::channel();
        sink.phase(PhaseId::Preflight, PhaseState::Started);
        sink.phase(PhaseId::Preflight, PhaseState::Done);
        let a = rx.try_recv().unwrap();
        let b = rx.try_recv().unwrap();
        assert!(a.t <= b.t);
        assert!(matches!(b.event, Event::Phase { state: PhaseState::Done, .. }));
    }
}
