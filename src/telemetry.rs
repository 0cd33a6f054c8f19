//! GPU telemetry from NVML, sampled about once a second into the event stream. With no
//! NVML library or no GPU it sends one `Telemetry { gpus: [], note }` saying so (the CPU
//! engine is then in use) and stops: that is a normal state, not an error.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

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
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(e) => return sink.emit(no_gpu(&describe(&e))),
    };
    match nvml.device_count() {
        Ok(0) => return sink.emit(no_gpu("NVML found no GPU")),
        Err(e) => return sink.emit(no_gpu(&describe(&e))),
        Ok(_) => {}
    }
    loop {
        match sample(&nvml) {
            Ok(gpus) => sink.emit(Event::Telemetry { gpus, note: None }),
            Err(e) => return sink.emit(no_gpu(&describe(&e))),
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

fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(_) => "libnvidia-ml.so.1 not found".to_string(),
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        other => format!("NVML: {other}"),
    }
}

/// One sample of every GPU. Fields a GPU does not report (power on some boards) read 0.
fn sample(nvml: &Nvml) -> Result<Vec<GpuSample>, NvmlError> {
    let count = nvml.device_count()?;
    (0..count)
        .map(|index| {
            let d = nvml.device_by_index(index)?;
            let memory = d.memory_info()?;
            Ok(GpuSample {
                index,
                name: d.name().unwrap_or_else(|_| format!("GPU {index}")),
                memory_used_bytes: memory.used,
                memory_total_bytes: memory.total,
                utilization_pct: d.utilization_rates().map(|u| u.gpu).unwrap_or(0),
                temperature_c: d.temperature(TemperatureSensor::Gpu).unwrap_or(0),
                power_w: d.power_usage().map(|mw| f64::from(mw) / 1000.0).unwrap_or(0.0),
            })
        })
        .collect()
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
