//! The phase timeline of one run in a text log, and the event output.
//!
//! Each phase starts once and ends once: the ranks of a TP group print the same markers, and
//! only the first one moves the timeline. Phases run one at a time in a process, so starting
//! one ends the one that was open.

use crate::event::{Event, PhaseState, TimedEvent};
use crate::phase::PhaseId;

/// Where events go, with the line and stream time they happened at.
pub struct Out<'a> {
    pub emit: &'a mut dyn FnMut(u64, TimedEvent),
    pub line: u64,
    pub t: f64,
}

impl Out<'_> {
    pub fn event(&mut self, event: Event) {
        (self.emit)(self.line, TimedEvent { t: self.t, event });
    }

    fn phase(&mut self, phase: PhaseId, state: PhaseState, detail: Option<String>) {
        self.event(Event::Phase { phase, state, detail });
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Slot {
    #[default]
    NotSeen,
    Open,
    Closed(PhaseState),
}

#[derive(Debug, Default)]
pub struct Timeline {
    slots: [Slot; PhaseId::ALL.len()],
    open: Option<PhaseId>,
    last: Option<PhaseId>,
    /// Stream time of the first phase start (for `Ready.elapsed_s`).
    first_t: Option<f64>,
}

fn index(p: PhaseId) -> usize {
    PhaseId::ALL.iter().position(|&q| q == p).expect("every phase is in ALL")
}

impl Timeline {
    pub fn started(&self, p: PhaseId) -> bool {
        self.slots[index(p)] != Slot::NotSeen
    }

    pub fn is_open(&self, p: PhaseId) -> bool {
        self.open == Some(p)
    }

    pub fn open(&self) -> Option<PhaseId> {
        self.open
    }

    /// The phase most recently started.
    pub fn last(&self) -> Option<PhaseId> {
        self.last
    }

    pub fn first_t(&self) -> Option<f64> {
        self.first_t
    }

    pub fn begin(&mut self, p: PhaseId, out: &mut Out) {
        if self.started(p) {
            return;
        }
        if let Some(q) = self.open.take() {
            self.slots[index(q)] = Slot::Closed(PhaseState::Done);
            out.phase(q, PhaseState::Done, None);
        }
        self.slots[index(p)] = Slot::Open;
        self.open = Some(p);
        self.last = Some(p);
        self.first_t.get_or_insert(out.t);
        out.phase(p, PhaseState::Started, None);
    }

    pub fn end(&mut self, p: PhaseId, out: &mut Out) {
        self.begin(p, out);
        if self.slots[index(p)] == Slot::Open {
            self.close(p, PhaseState::Done, None, out);
        }
    }

    /// Before a failure in `p` is reported: the phase that was open is interrupted, and `p`
    /// is started if the log never started it.
    pub fn enter_failure(&mut self, p: PhaseId, out: &mut Out) {
        if let Some(q) = self.open.filter(|&q| q != p) {
            self.close(q, PhaseState::Failed, Some(format!("interrupted by the failure in {p}")), out);
        }
        self.begin(p, out);
    }

    /// Marks `p` failed (starting it if the log never did).
    pub fn fail(&mut self, p: PhaseId, detail: Option<String>, out: &mut Out) {
        self.enter_failure(p, out);
        if self.slots[index(p)] != Slot::Closed(PhaseState::Failed) {
            self.close(p, PhaseState::Failed, detail, out);
        }
    }

    fn close(&mut self, p: PhaseId, state: PhaseState, detail: Option<String>, out: &mut Out) {
        self.slots[index(p)] = Slot::Closed(state);
        if self.open == Some(p) {
            self.open = None;
        }
        out.phase(p, state, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: impl FnOnce(&mut Timeline, &mut Out)) -> Vec<(PhaseId, PhaseState)> {
        let mut events = Vec::new();
        let mut emit = |_: u64, ev: TimedEvent| {
            if let Event::Phase { phase, state, .. } = ev.event {
                events.push((phase, state));
            }
        };
        let mut out = Out { emit: &mut emit, line: 1, t: 0.0 };
        f(&mut Timeline::default(), &mut out);
        events
    }

    #[test]
    fn starting_a_phase_ends_the_open_one_and_repeats_are_ignored() {
        use PhaseId::*;
        use PhaseState::*;
        let got = run(|tl, out| {
            tl.begin(TargetLoad, out);
            tl.begin(TargetLoad, out);
            tl.begin(KvAlloc, out);
            tl.end(KvAlloc, out);
            tl.end(KvAlloc, out);
            tl.end(DraftGraphCapture, out);
        });
        assert_eq!(
            got,
            [
                (TargetLoad, Started),
                (TargetLoad, Done),
                (KvAlloc, Started),
                (KvAlloc, Done),
                (DraftGraphCapture, Started),
                (DraftGraphCapture, Done)
            ]
        );
    }

    #[test]
    fn a_failure_elsewhere_interrupts_the_open_phase() {
        use PhaseId::*;
        use PhaseState::*;
        let got = run(|tl, out| {
            tl.begin(TargetLoad, out);
            tl.fail(DrafterInit, None, out);
            tl.fail(DrafterInit, None, out);
        });
        assert_eq!(got, [(TargetLoad, Started), (TargetLoad, Failed), (DrafterInit, Started), (DrafterInit, Failed)]);
    }
}
