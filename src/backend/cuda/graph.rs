//! CUDA graphs for steps that repeat with the same shapes (decode, verify, draft steps).
//!
//! The model code is written once over the backend seam and calls the same ops every
//! step, with host values (attention windows, cache positions, row lists, token ids) that
//! change from step to step. A step is bracketed by `graph_begin(key)` / `graph_end()`:
//!
//! 1. The first time a key is seen the step runs eagerly, and the backend records the
//!    sequence of kernels (a signature per op) and how many per-step values it used.
//! 2. The second time, the step is captured into a graph whose kernels read their
//!    per-step values from a device arena. Nothing else happens on the stream while it
//!    captures: no host copy, no synchronisation, no allocation (cuBLAS has its own
//!    workspace); the values are only staged on the host. At `graph_end` the staged
//!    values are copied into the device arena, outside the capture and ahead of the graph
//!    in stream order, and the graph is launched to do the step's work.
//! 3. From then on the ops launch nothing: each stages its per-step values and checks its
//!    signature against the recording; `graph_end` copies the values up and launches the
//!    graph. A step that diverges from its recording is an error at `graph_end`, and the
//!    graph is dropped so the key is recorded afresh.
//!
//! The bookkeeping lives in `graph_book` (tested without a GPU); this file adds the
//! stream capture, the arenas and the graphs.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;

use super::gpu::{Arg, DeviceBuf, Gpu};
use super::graph_book::{Begin, End, GraphBook, OpGate};
use crate::backend::BackendError;

/// Dynamic values one step may use (ints).
pub const ARENA_LEN: usize = 1 << 16;

/// What an op should do with its kernel in the current step.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Launch with the eager arguments (dynamic values as plain arguments).
    Eager,
    /// Launch, reading dynamic values from this device address.
    Device(u64),
    /// Replaying a graph (or a step that already failed): launch nothing.
    Skip,
}

pub struct Graphs {
    book: Mutex<GraphBook>,
    graphs: Mutex<HashMap<String, CudaGraph>>,
    /// Per-step values of the step under way, staged on the host.
    staged: Mutex<Vec<i32>>,
    /// Where the graphs' kernels read them.
    device: DeviceBuf<i32>,
}

// SAFETY: the graphs are only touched under the mutex above, and a backend's steps run on
// its one driving thread (CUDA graph objects must not be used by two threads at once).
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

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Graphs {
    pub fn new(gpu: &Gpu) -> Result<Graphs, BackendError> {
        Ok(Graphs {
            book: Mutex::new(GraphBook::new(ARENA_LEN)),
            graphs: Mutex::default(),
            staged: Mutex::new(vec![0; ARENA_LEN]),
            device: gpu.alloc::<i32>(ARENA_LEN, "graph arena")?,
        })
    }

    /// True between `begin` and `end` (reads are not allowed then).
    pub fn in_step(&self) -> bool {
        locked(&self.book).in_step()
    }

    pub fn begin(&self, gpu: &Gpu, key: &str) -> Result<(), BackendError> {
        let err = |what: String| BackendError::Device(format!("GPU {}: graph {key}: {what}", gpu.ordinal));
        let mut book = locked(&self.book);
        match book.begin(key).map_err(err)? {
            Begin::Record | Begin::Replay => Ok(()),
            Begin::Capture => gpu.stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(|e| {
                book.abandon();
                err(format!("capture did not start: {e}"))
            }),
        }
    }

    /// Called by every op before it launches: returns what to do, staging `values` (the
    /// op's per-step values) when a graph is involved.
    pub fn gate(&self, sig: u64, values: &[i32]) -> Gate {
        let stage = |at: usize| locked(&self.staged)[at..at + values.len()].copy_from_slice(values);
        match locked(&self.book).gate(sig, values.len()) {
            OpGate::Eager => Gate::Eager,
            OpGate::Stage(at) => {
                stage(at);
                Gate::Device(self.device.ptr_at(at))
            }
            OpGate::Skip(at) => {
                stage(at);
                Gate::Skip
            }
            // The step fails at `end`; launching with values that have no arena slot
            // would need a host copy, which a capture does not allow.
            OpGate::Overflow => Gate::Skip,
        }
    }

    /// End the step: keep the recording, or copy the staged values up and launch the
    /// graph (just captured, or replayed).
    pub fn end(&self, gpu: &Gpu) -> Result<(), BackendError> {
        let mut book = locked(&self.book);
        let Some(key) = book.current_key().map(str::to_string) else { return Ok(()) };
        let err = |what: String| BackendError::Device(format!("GPU {}: graph {key}: {what}", gpu.ordinal));
        // Always end a capture, even a failed one, or the stream stays in capture mode.
        let captured = book.is_capturing().then(|| match gpu.stream.end_capture(CUgraphInstantiate_flags(0)) {
            Ok(Some(g)) => Ok(g),
            Ok(None) => Err("capture produced no graph".to_string()),
            Err(e) => Err(e.to_string()),
        });
        let capture_ok = !matches!(captured, Some(Err(_)));
        match book.end(capture_ok) {
            End::Nothing | End::Recorded => Ok(()),
            End::Captured { used } => {
                let launched = match captured {
                    Some(Ok(graph)) => {
                        graph.upload().map_err(|e| format!("upload: {e}")).and_then(|_| self.launch(gpu, &graph, used)).map(|_| graph)
                    }
                    _ => Err("no graph after a capture".to_string()),
                };
                match launched {
                    Ok(graph) => {
                        locked(&self.graphs).insert(key, graph);
                        Ok(())
                    }
                    Err(e) => {
                        book.forget(&key);
                        Err(err(e))
                    }
                }
            }
            End::Replay { used } => {
                let graphs = locked(&self.graphs);
                match graphs.get(&key) {
                    Some(graph) => self.launch(gpu, graph, used).map_err(err),
                    None => {
                        drop(graphs);
                        book.forget(&key);
                        Err(err("the graph is gone".into()))
                    }
                }
            }
            End::Failed(why) => {
                locked(&self.graphs).remove(&key);
                let detail = match captured {
                    Some(Err(e)) => format!("{why}: {e}"),
                    _ => why,
                };
                Err(err(detail))
            }
        }
    }

    /// The staged values into the device arena, then the graph, in stream order.
    fn launch(&self, gpu: &Gpu, graph: &CudaGraph, used: usize) -> Result<(), String> {
        gpu.upload(&locked(&self.staged)[..used], self.device.ptr());
        graph.launch().map_err(|e| format!("launch: {e}"))
    }

    /// Drop every graph (teardown, or buffers going away).
    pub fn clear(&self) {
        locked(&self.book).clear();
        locked(&self.graphs).clear();
    }

    pub fn captured(&self) -> usize {
        locked(&self.graphs).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_ignore_per_step_values_only() {
        let args = [Arg::Ptr(0x1000), Arg::I32(41), Arg::I32(5), Arg::Ptr(0)];
        let moved = [Arg::Ptr(0x1000), Arg::I32(97), Arg::I32(5), Arg::Ptr(0)];
        let other = [Arg::Ptr(0x2000), Arg::I32(41), Arg::I32(5), Arg::Ptr(0)];
        let s = signature("attention_f32_p4", (1, 32), 256, &args, &[1, 3]);
        assert_eq!(s, signature("attention_f32_p4", (1, 32), 256, &moved, &[1, 3]));
        assert_ne!(s, signature("attention_f32_p4", (1, 32), 256, &other, &[1, 3]));
        assert_ne!(s, signature("attention_f32_p4", (2, 32), 256, &args, &[1, 3]));
        assert_ne!(s, signature("attention_f32_p4", (1, 32), 256, &moved, &[3]));
    }
}
