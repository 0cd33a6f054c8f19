//! CUDA graphs for steps that repeat with the same shapes (decode, verify, draft steps).
//!
//! The model code is written once over the backend seam and calls the same ops every
//! step, with host values (attention windows, cache positions, row lists, token ids) that
//! change from step to step. A step is bracketed by `graph_begin(key)` / `graph_end()`:
//!
//! 1. The first time a key is seen the step runs eagerly, and the backend records the
//!    sequence of kernels (a signature per op) and how many dynamic values it used.
//! 2. The second time, the step is captured into a graph whose first node copies the
//!    dynamic values from a pinned host arena to a device arena; kernels read their
//!    dynamic values from the device arena. The graph is then launched once to do the
//!    step's work (capture itself runs nothing).
//! 3. From then on the ops launch nothing: each writes its dynamic values into the pinned
//!    arena and checks its signature against the recording; `graph_end` launches the graph.
//!    A step that diverges from its recording is an error at `graph_end`, and the graph is
//!    dropped so the key is recorded afresh.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, PinnedHostSlice};

use super::gpu::{Arg, DeviceBuf, Gpu};
use crate::backend::BackendError;
use crate::event::{Event, EventSink, PhaseId, PhaseState, ProgressUnit};
use crate::finding::{Evidence, Finding, Remedy, Severity, Side, SpecChange};

/// `--cuda-graph-max-bs` when the launch does not set it.
pub const DEFAULT_MAX_BS: u32 = 8;
/// Dynamic values one step may use (ints).
pub const ARENA_LEN: usize = 1 << 16;

/// The batch sizes captured for `--cuda-graph-max-bs max`: 1, 2, 4, 8, then steps of 8
/// (SGLang's list, cut at max).
pub fn capture_sizes(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 4].into_iter().filter(|&b| b <= max).collect();
    v.extend((1..).map(|i| 8 * i).take_while(|&b| b <= max));
    v
}

/// What an op should do with its kernel in the current step.
pub enum Gate {
    /// Launch with the eager arguments (dynamic values as plain arguments).
    Eager,
    /// Launch, reading dynamic values from this device address.
    Device(u64),
    /// Replaying a graph: values are staged, launch nothing.
    Skip,
}

enum Mode {
    Eager,
    /// First sight of a key: run eagerly, note signatures and arena use.
    Recording { key: String, sigs: Vec<u64>, used: usize },
    Capturing { key: String, sigs: Vec<u64>, used: usize },
    Replaying { key: String, index: usize, used: usize, diverged: Option<String> },
}

struct Recording {
    sigs: Vec<u64>,
    used: usize,
    graph: Option<CudaGraph>,
}

pub struct Graphs {
    mode: Mutex<Mode>,
    recordings: Mutex<HashMap<String, Recording>>,
    host: Mutex<PinnedHostSlice<i32>>,
    device: DeviceBuf<i32>,
}

// SAFETY: the pinned arena and the graphs are only touched under the mutexes above, and a
// backend's steps run on its one driving thread.
unsafe impl Send for Graphs {}
unsafe impl Sync for Graphs {}

/// A signature of an op: its kernel and every argument that is not a per-step value.
pub fn signature(name: &str, grid: (u32, u32), block: u32, args: &[Arg], dynamic: &[usize]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    let mut mix = |x: u64| {
        h ^= x;
        h = h.wrapping_mul(0x100000001b3);
    };
    name.bytes().for_each(|b| mix(b as u64));
    mix(grid.0 as u64);
    mix(grid.1 as u64);
    mix(block as u64);
    for (i, a) in args.iter().enumerate() {
        if dynamic.contains(&i) {
            continue;
        }
        mix(match a {
            Arg::Ptr(p) => *p,
            Arg::I32(v) => *v as u64,
            Arg::I64(v) => *v as u64,
            Arg::F32(v) => v.to_bits() as u64,
        });
    }
    h
}

impl Graphs {
    pub fn new(gpu: &Gpu) -> Result<Graphs, BackendError> {
        // SAFETY: the arena is written before every read (values are staged by the ops).
        let host = unsafe { gpu.ctx.alloc_pinned_with_flags::<i32>(ARENA_LEN, 0) }
            .map_err(|e| BackendError::Device(format!("GPU {}: pinned arena: {e}", gpu.ordinal)))?;
        Ok(Graphs {
            mode: Mutex::new(Mode::Eager),
            recordings: Mutex::default(),
            host: Mutex::new(host),
            device: gpu.alloc::<i32>(ARENA_LEN, "graph arena")?,
        })
    }

    /// True between `begin` and `end` of a recorded or captured step (reads are not allowed).
    pub fn in_step(&self) -> bool {
        !matches!(*self.mode.lock().unwrap_or_else(|p| p.into_inner()), Mode::Eager)
    }

    pub fn begin(&self, gpu: &Gpu, key: &str) -> Result<(), BackendError> {
        let mut mode = self.mode.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*mode, Mode::Eager) {
            return Err(BackendError::Device(format!("graph step {key} begun inside another step")));
        }
        let recordings = self.recordings.lock().unwrap_or_else(|p| p.into_inner());
        *mode = match recordings.get(key) {
            None => Mode::Recording { key: key.to_string(), sigs: Vec::new(), used: 0 },
            Some(r) if r.graph.is_some() => {
                // The previous replay's first node must have read the arena before it is
                // overwritten; steps end in a read-back anyway, so this rarely waits.
                gpu.stream.synchronize().map_err(|e| BackendError::Device(format!("GPU {}: {e}", gpu.ordinal)))?;
                Mode::Replaying { key: key.to_string(), index: 0, used: 0, diverged: None }
            }
            Some(r) => {
                gpu.stream.synchronize().map_err(|e| BackendError::Device(format!("GPU {}: {e}", gpu.ordinal)))?;
                gpu.stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(|e| BackendError::Device(format!("GPU {}: capture of {key} did not start: {e}", gpu.ordinal)))?;
                let host = self.host.lock().unwrap_or_else(|p| p.into_inner());
                gpu.bind();
                if r.used > 0 {
                    let staged = host.as_slice().map_err(|e| BackendError::Device(e.to_string()))?;
                    // SAFETY: both arenas hold ARENA_LEN ints and r.used <= ARENA_LEN.
                    unsafe { cudarc::driver::result::memcpy_htod_async(self.device.ptr(), &staged[..r.used], gpu.stream.cu_stream()) }
                        .map_err(|e| BackendError::Device(format!("GPU {}: arena copy in capture: {e}", gpu.ordinal)))?;
                }
                Mode::Capturing { key: key.to_string(), sigs: Vec::new(), used: 0 }
            }
        };
        Ok(())
    }

    /// Called by every op before it launches: returns what to do, staging `values` (the
    /// op's per-step values) in the arena when a graph is involved.
    pub fn gate(&self, sig: u64, values: &[i32]) -> Gate {
        let mut mode = self.mode.lock().unwrap_or_else(|p| p.into_inner());
        let stage = |used: &mut usize| -> Option<u64> {
            if *used + values.len() > ARENA_LEN {
                return None;
            }
            let mut host = self.host.lock().unwrap_or_else(|p| p.into_inner());
            if let Ok(slot) = host.as_mut_slice() {
                slot[*used..*used + values.len()].copy_from_slice(values);
            }
            let ptr = self.device.ptr_at(*used);
            *used += values.len();
            Some(ptr)
        };
        match &mut *mode {
            Mode::Eager => Gate::Eager,
            Mode::Recording { sigs, used, .. } => {
                sigs.push(sig);
                *used += values.len();
                Gate::Eager
            }
            Mode::Capturing { sigs, used, .. } => {
                sigs.push(sig);
                match stage(used) {
                    Some(ptr) => Gate::Device(ptr),
                    None => Gate::Eager,
                }
            }
            Mode::Replaying { key, index, used, diverged } => {
                let expected = self.recordings.lock().unwrap_or_else(|p| p.into_inner()).get(key.as_str()).and_then(|r| r.sigs.get(*index).copied());
                if diverged.is_none() && expected != Some(sig) {
                    *diverged = Some(format!("op {} differs from the recording", *index));
                }
                *index += 1;
                stage(used);
                Gate::Skip
            }
        }
    }

    /// End the step: keep the recording, instantiate the capture (and run it once), or
    /// launch the replay.
    pub fn end(&self, gpu: &Gpu) -> Result<(), BackendError> {
        let mode = std::mem::replace(&mut *self.mode.lock().unwrap_or_else(|p| p.into_inner()), Mode::Eager);
        let mut recordings = self.recordings.lock().unwrap_or_else(|p| p.into_inner());
        let err = |key: &str, what: String| BackendError::Device(format!("GPU {}: graph {key}: {what}", gpu.ordinal));
        match mode {
            Mode::Eager => Ok(()),
            Mode::Recording { key, sigs, used } => {
                if used > ARENA_LEN {
                    return Err(err(&key, format!("{used} per-step values exceed the arena of {ARENA_LEN}")));
                }
                recordings.insert(key, Recording { sigs, used, graph: None });
                Ok(())
            }
            Mode::Capturing { key, sigs, used } => {
                let captured = gpu.stream.end_capture(CUgraphInstantiate_flags(0));
                let recorded = recordings.get(&key).map(|r| (r.sigs.clone(), r.used));
                let graph = match captured {
                    Ok(Some(g)) => g,
                    Ok(None) => {
                        recordings.remove(&key);
                        return Err(err(&key, "capture produced no graph".into()));
                    }
                    Err(e) => {
                        recordings.remove(&key);
                        return Err(err(&key, format!("capture failed: {e}")));
                    }
                };
                if recorded != Some((sigs.clone(), used)) {
                    recordings.remove(&key);
                    return Err(err(&key, "the captured step differs from its first run".into()));
                }
                graph.upload().map_err(|e| err(&key, format!("upload: {e}")))?;
                graph.launch().map_err(|e| err(&key, format!("launch: {e}")))?;
                recordings.insert(key, Recording { sigs, used, graph: Some(graph) });
                Ok(())
            }
            Mode::Replaying { key, used, diverged, index } => {
                let r = recordings.get(&key).ok_or_else(|| err(&key, "recording vanished".into()))?;
                let problem = diverged.or_else(|| (index != r.sigs.len() || used != r.used).then(|| format!("{index} ops, recorded {}", r.sigs.len())));
                if let Some(p) = problem {
                    recordings.remove(&key);
                    return Err(err(&key, format!("replay diverged: {p}; the step's work was not done")));
                }
                let graph = r.graph.as_ref().expect("replaying needs a graph");
                graph.launch().map_err(|e| err(&key, format!("launch: {e}")))
            }
        }
    }

    /// Drop every graph (teardown, or a relaunch that changes shapes).
    pub fn clear(&self) {
        self.recordings.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub fn captured(&self) -> usize {
        self.recordings.lock().unwrap_or_else(|p| p.into_inner()).values().filter(|r| r.graph.is_some()).count()
    }
}

/// The finding for a capture that failed at batch size `bs`.
pub fn capture_finding(phase: PhaseId, bs: u32, max_bs: u32, err: &BackendError) -> Finding {
    let lower = bs.saturating_sub(1).max(1).min(max_bs.saturating_sub(1).max(1));
    let lower = capture_sizes(lower).last().copied().unwrap_or(1);
    Finding::new(
        "cuda-graph-capture-failed",
        Severity::Error,
        phase,
        format!("CUDA graph capture failed at batch size {bs}: {err}"),
    )
    .with_evidence(Evidence::new(Side::Launch, "--cuda-graph-max-bs", "--cuda-graph-max-bs", max_bs))
    .with_evidence(Evidence::new(Side::Launch, "graph capture", "batch size", bs))
    .with_remedy(Remedy::new(
        "reduce-cuda-graph-max-bs",
        "--cuda-graph-max-bs",
        format!("capture graphs up to batch size {lower} only"),
        vec![SpecChange::SetFlag { flag: "--cuda-graph-max-bs".into(), value: lower.to_string() }],
    ))
}

/// A capture phase: Started, one Progress per batch size as `capture(bs)` returns, Done;
/// or the failing batch size's Finding and Failed. `capture(bs)` runs the step twice in
/// graph brackets (record, then capture).
pub fn capture_phase(
    events: &EventSink,
    phase: PhaseId,
    max_bs: u32,
    mut capture: impl FnMut(u32) -> Result<(), BackendError>,
) -> Result<(), Finding> {
    events.phase(phase, PhaseState::Started);
    let sizes = capture_sizes(max_bs);
    for (i, &bs) in sizes.iter().enumerate() {
        if let Err(e) = capture(bs) {
            let f = match super::launch::memory_finding(&e, phase, &crate::spec::LaunchSpec { cuda_graph_max_bs: Some(max_bs), ..Default::default() }) {
                Some(f) => f,
                None => capture_finding(phase, bs, max_bs, &e),
            };
            events.emit(Event::Finding(f.clone()));
            events.emit(Event::Phase { phase, state: PhaseState::Failed, detail: Some(format!("batch size {bs}")) });
            return Err(f);
        }
        events.emit(Event::Progress {
            phase,
            unit: ProgressUnit::BatchSize,
            gpu: None,
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
    fn capture_sizes_follow_sglang_and_stop_at_max() {
        assert_eq!(capture_sizes(1), vec![1]);
        assert_eq!(capture_sizes(8), vec![1, 2, 4, 8]);
        assert_eq!(capture_sizes(20), vec![1, 2, 4, 8, 16]);
        assert_eq!(capture_sizes(24), vec![1, 2, 4, 8, 16, 24]);
    }

    #[test]
    fn signatures_ignore_per_step_values_only() {
        let args = [Arg::Ptr(0x1000), Arg::I32(41), Arg::I32(5), Arg::Ptr(0)];
        let moved = [Arg::Ptr(0x1000), Arg::I32(97), Arg::I32(5), Arg::Ptr(0)];
        let other = [Arg::Ptr(0x2000), Arg::I32(41), Arg::I32(5), Arg::Ptr(0)];
        let s = signature("attention_f32", (1, 32), 256, &args, &[1, 3]);
        assert_eq!(s, signature("attention_f32", (1, 32), 256, &moved, &[1, 3]));
        assert_ne!(s, signature("attention_f32", (1, 32), 256, &other, &[1, 3]));
        assert_ne!(s, signature("attention_f32", (2, 32), 256, &args, &[1, 3]));
        assert_ne!(s, signature("attention_f32", (1, 32), 256, &moved, &[3]));
    }

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
        let r = capture_phase(&sink, PhaseId::DraftGraphCapture, 8, |bs| {
            seen.push(bs);
            if bs == 4 { Err(BackendError::Device("boom".into())) } else { Ok(()) }
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
}
