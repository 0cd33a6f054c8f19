//! GPU telemetry from NVML, sampled about once a second into the event stream. With no
//! NVML library or no GPU it sends one `Telemetry { gpus: [], note }` saying so (the CPU
//! engine is then in use) and stops: that is a normal state, not an error.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::backend::nvml::{GpuReading, Inventory};
use crate::event::{Event, EventSink, GpuSample};

/// Stops the sampler when dropped.
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The note sent when there is nothing to sample.
pub fn no_gpu_note(why: &str) -> String {
    format!("no GPU telemetry ({why}): the CPU engine is in use")
}

/// Start sampling every `period` on a thread of its own.
pub fn spawn(sink: EventSink, period: Duration) -> Sampler {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("specdeck-nvml".into())
        .spawn(move || sample_loop(&sink, period, &stopped))
        .expect("spawning a thread");
    Sampler { stop: Some(stop), thread: Some(thread) }
}

fn sample_loop(sink: &EventSink, period: Duration, stopped: &mpsc::Receiver<()>) {
    let inventory = match Inventory::open() {
        Ok(inventory) => inventory,
        Err(e) => return sink.emit(no_gpu(&e.cause())),
    };
    match inventory.count() {
        Ok(0) => return sink.emit(no_gpu("NVML found no GPU")),
        Err(e) => return sink.emit(no_gpu(&e.cause())),
        Ok(_) => {}
    }
    loop {
        match inventory.gpus() {
            Ok(gpus) => sink.emit(Event::Telemetry { gpus: gpus.into_iter().map(sample).collect(), note: None }),
            Err(e) => return sink.emit(no_gpu(&e.cause())),
        }
        match stopped.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) if !sink.is_closed() => continue,
            _ => return,
        }
    }
}

fn no_gpu(why: &str) -> Event {
    Event::Telemetry { gpus: Vec::new(), note: Some(no_gpu_note(why)) }
}

fn sample(g: GpuReading) -> GpuSample {
    GpuSample {
        index: g.index,
        name: g.name,
        memory_used_bytes: g.memory_used_bytes,
        memory_total_bytes: g.memory_total_bytes,
        utilization_pct: g.utilization_pct,
        temperature_c: g.temperature_c,
        power_w: g.power_w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine with an NVIDIA driver this test checks the samples instead; either
    /// way it fails if the sampler sends nothing or something malformed.
    #[test]
    fn the_sampler_reports_gpus_or_says_the_cpu_engine_is_in_use() {
        let (sink, mut rx) = EventSink::channel();
        let sampler = spawn(sink, Duration::from_millis(50));
        let first = rx.blocking_recv().expect("one telemetry event");
        drop(sampler);
        match first.event {
            Event::Telemetry { gpus, note: Some(note) } if gpus.is_empty() => {
                assert!(note.ends_with("the CPU engine is in use"), "{note}");
                assert!(note.starts_with("no GPU telemetry ("), "{note}");
                // Nothing else follows a no-GPU note.
                assert!(rx.try_recv().is_err());
            }
            Event::Telemetry { gpus, note: None } => {
                assert!(!gpus.is_empty());
                assert!(gpus.iter().all(|g| g.memory_total_bytes > 0 && g.memory_used_bytes <= g.memory_total_bytes));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
