//! The launch's CUDA-graph capture phases: the phase's events as each batch size is
//! captured, and the finding when one fails. The backend records
//! and replays the graphs (`backend::cuda::graph`); what to capture, and what a failure
//! tells the user, is the launch's.

use crate::backend::BackendError;
use crate::engine::graph_sizes::capture_sizes;
use crate::engine::memory::memory_finding;
use crate::event::{Event, EventSink, PhaseState, ProgressUnit};
use crate::finding::{Evidence, Finding, Remedy, Severity, Side};
use crate::phase::PhaseId;
use crate::spec::LaunchSpec;
use crate::spec::SpecChange;

/// The finding for a capture that failed at batch size `bs`.
pub fn capture_finding(phase: PhaseId, bs: u32, max_bs: u32, err: &BackendError) -> Finding {
    let lower = bs.saturating_sub(1).max(1).min(max_bs.saturating_sub(1).max(1));
    let lower = capture_sizes(lower).last().copied().unwrap_or(1);
    Finding::new("cuda-graph-capture-failed", Severity::Error, phase, format!("CUDA graph capture failed at batch size {bs}: {err}"))
        .with_evidence(Evidence::new(Side::Launch, "--cuda-graph-max-bs", "--cuda-graph-max-bs", max_bs))
        .with_evidence(Evidence::new(Side::Launch, "graph capture", "batch size", bs))
        .with_remedy(Remedy::new(
            "reduce-cuda-graph-max-bs",
            "--cuda-graph-max-bs",
            format!("capture graphs up to batch size {lower} only"),
            vec![SpecChange::SetFlag { flag: "--cuda-graph-max-bs".into(), value: lower.to_string() }],
        ))
}

/// A capture phase over the step sizes `sizes` (token rows; those above `max_bs`, the
/// launch's `--cuda-graph-max-bs`, are left out and run eagerly): Started, one Progress per
/// size as `capture(size)` returns, Done; or the failing size's Finding and Failed; Skipped
/// when no size is left. `capture(size)` runs the step twice as a graph step (record,
/// then capture).
pub fn capture_phase(
    events: &EventSink,
    phase: PhaseId,
    sizes: &[u32],
    max_bs: u32,
    gpu: Option<u32>,
    mut capture: impl FnMut(u32) -> Result<(), BackendError>,
) -> Result<(), Finding> {
    let sizes: Vec<u32> = sizes.iter().copied().filter(|&s| s <= max_bs).collect();
    if sizes.is_empty() {
        let detail = Some(format!("no step of at most {max_bs} tokens (--cuda-graph-max-bs)"));
        events.emit(Event::Phase { phase, state: PhaseState::Skipped, detail });
        return Ok(());
    }
    events.phase(phase, PhaseState::Started);
    for (i, &bs) in sizes.iter().enumerate() {
        if let Err(e) = capture(bs) {
            let spec = LaunchSpec { cuda_graph_max_bs: Some(max_bs), ..Default::default() };
            let f = memory_finding(&e, phase, &spec).unwrap_or_else(|| capture_finding(phase, bs, max_bs, &e));
            events.emit(Event::Finding(f.clone()));
            events.emit(Event::Phase { phase, state: PhaseState::Failed, detail: Some(format!("batch size {bs}")) });
            return Err(f);
        }
        events.emit(Event::Progress {
            phase,
            unit: ProgressUnit::BatchSize,
            gpu,
            label: bs.to_string(),
            done: i as u64 + 1,
            total: sizes.len() as u64,
        });
    }
    events.emit(Event::Phase { phase, state: PhaseState::Done, detail: Some(format!("{} batch sizes", sizes.len())) });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_capture_names_the_batch_size_and_lowers_the_max() {
        let f = capture_finding(PhaseId::TargetGraphCapture, 16, 24, &BackendError::Device("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED".into()));
        assert_eq!(f.message, "CUDA graph capture failed at batch size 16: device error: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
        assert_eq!(f.evidence[1].value, 16);
        assert_eq!(
            f.remedy("reduce-cuda-graph-max-bs").unwrap().changes,
            vec![SpecChange::SetFlag { flag: "--cuda-graph-max-bs".into(), value: "8".into() }]
        );
        let (sink, mut rx) = EventSink::channel();
        let mut seen = Vec::new();
        let r = capture_phase(&sink, PhaseId::DraftGraphCapture, &capture_sizes(8), 8, Some(0), |bs| {
            seen.push(bs);
            if bs == 4 {
                Err(BackendError::Device("boom".into()))
            } else {
                Ok(())
            }
        });
        assert_eq!(r.unwrap_err().remedies[0].changes[0], SpecChange::SetFlag { flag: "--cuda-graph-max-bs".into(), value: "2".into() });
        assert_eq!(seen, vec![1, 2, 4]);
        let kinds: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| match e.event {
                Event::Phase { state, .. } => format!("{state:?}"),
                Event::Progress { label, .. } => format!("bs {label}"),
                Event::Finding(f) => f.id,
                _ => "other".into(),
            })
            .collect();
        assert_eq!(kinds, vec!["Started", "bs 1", "bs 2", "cuda-graph-capture-failed", "Failed"]);
    }

    /// Sizes above --cuda-graph-max-bs are left out; none left is a skipped phase.
    #[test]
    fn capture_phase_keeps_sizes_within_the_max() {
        let (sink, mut rx) = EventSink::channel();
        let mut seen = Vec::new();
        capture_phase(&sink, PhaseId::TargetGraphCapture, &[1, 5, 16], 8, None, |bs| {
            seen.push(bs);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![1, 5]);
        capture_phase(&sink, PhaseId::DraftGraphCapture, &[16], 8, None, |_| panic!("nothing to capture")).unwrap();
        let phases: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|e| match e.event {
                Event::Phase { phase, state, detail } => Some(format!("{phase} {state:?} {}", detail.unwrap_or_default())),
                _ => None,
            })
            .collect();
        assert_eq!(
            phases,
            vec![
                "target-graph-capture Started ",
                "target-graph-capture Done 2 batch sizes",
                "draft-graph-capture Skipped no step of at most 8 tokens (--cuda-graph-max-bs)"
            ]
        );
    }
}
