//! Contract 1: the engine on its own OS thread, driven by commands, reporting only through
//! the event stream. The console never touches engine state; it sends `EngineCommand`s and
//! renders events.

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::engine::ranks::{engine_for, Serve};
use crate::engine::request::{Cancel, GenerateRequest, LaunchOutcome, PreflightFn};
use crate::event::{Event, EventSink, LogLevel, PhaseState};
use crate::spec::{Device, LaunchSpec};

// The shape is contract 1's; commands are few, so the spec's size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum EngineCommand {
    /// First launch, or relaunch with a new spec (keeps the loaded target when the new
    /// spec leaves it valid: only drafter / decoding settings changed).
    Launch(LaunchSpec),
    Generate(GenerateRequest),
    /// Tear down: free everything, emit Exit, end the thread.
    Shutdown,
}

pub struct EngineHandle {
    tx: mpsc::Sender<EngineCommand>,
    thread: Option<JoinHandle<()>>,
    /// Stops a running generation at its next step (`cancel`).
    cancel: Cancel,
}

impl EngineHandle {
    pub fn spawn(events: EventSink, preflight: PreflightFn) -> EngineHandle {
        let (tx, rx) = mpsc::channel();
        let cancel = Cancel::default();
        let engine_cancel = cancel.clone();
        let thread = std::thread::Builder::new()
            .name("specdeck-engine".into())
            .spawn(move || run_reporting_panics(events, preflight, rx, engine_cancel))
            .expect("the OS can start the engine thread");
        EngineHandle { tx, thread: Some(thread), cancel }
    }

    /// Queue a command; never blocks. After the engine has shut down it is dropped.
    pub fn send(&self, cmd: EngineCommand) {
        let _ = self.tx.send(cmd);
    }

    /// End the running generation at its next step, and every later one at its first: for
    /// a caller about to shut down that wants no more tokens (a signal, `q`).
    pub fn cancel(&self) {
        self.cancel.set();
    }

    /// Send `Shutdown` and wait for the engine thread to free everything and end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.send(EngineCommand::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EngineHandle {
    /// A dropped handle shuts the engine down too, so no thread outlives the console; nobody
    /// is left to read a running generation, so it is cancelled.
    fn drop(&mut self) {
        self.cancel();
        self.stop();
    }
}

/// A panic in the engine still ends with `Exit` (code 101, the panic's message), so the
/// console does not wait for an engine that is gone.
fn run_reporting_panics(events: EventSink, preflight: PreflightFn, rx: mpsc::Receiver<EngineCommand>, cancel: Cancel) {
    let sink = events.clone();
    let run = std::panic::AssertUnwindSafe(move || run(events, preflight, rx, &cancel));
    if let Err(panic) = std::panic::catch_unwind(run) {
        let message = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
        let reason = format!("the engine panicked: {}", message.as_deref().unwrap_or("(no message)"));
        sink.log(LogLevel::Error, "engine", reason.clone());
        sink.emit(Event::Exit { code: 101, reason });
    }
}

/// The engine behind a stream of launches: made at the first launch, for its `--device` and
/// `--tp-size`, and made again only when a relaunch changes them (otherwise a relaunch may
/// keep the target). The console's engine thread and the server's worker both launch so.
#[derive(Default)]
pub struct Placed {
    engine: Option<(Box<dyn Serve>, (Device, u32))>,
}

impl Placed {
    /// Launch `spec`; a placement that cannot be had is reported as a failed phase.
    pub fn launch(&mut self, spec: &LaunchSpec, events: &EventSink, preflight: &PreflightFn, cancel: &Cancel) -> Option<LaunchOutcome> {
        let placement = (spec.device, spec.tp());
        if self.engine.as_ref().is_none_or(|(_, p)| *p != placement) {
            self.engine = None;
            match engine_for(spec, events, cancel) {
                Ok(e) => self.engine = Some((e, placement)),
                Err(f) => {
                    let phase = f.phase;
                    events.emit(Event::Finding(f));
                    events.emit(Event::Phase { phase, state: PhaseState::Failed, detail: None });
                    return None;
                }
            }
        }
        self.engine.as_mut().map(|(e, _)| e.launch(spec, preflight))
    }

    /// The engine, once a launch made one.
    pub fn engine(&mut self) -> Option<&mut dyn Serve> {
        self.engine.as_mut().map(|(e, _)| &mut **e as &mut dyn Serve)
    }
}

fn run(events: EventSink, preflight: PreflightFn, rx: mpsc::Receiver<EngineCommand>, cancel: &Cancel) {
    let mut engine = Placed::default();
    let reason = loop {
        match rx.recv() {
            Ok(EngineCommand::Launch(spec)) => {
                engine.launch(&spec, &events, &preflight, cancel);
            }
            Ok(EngineCommand::Generate(req)) => match engine.engine() {
                Some(e) => {
                    if let Err(err) = e.generate_with(&req, true) {
                        events.log(LogLevel::Error, "engine", format!("generate: {err}"));
                    }
                }
                None => events.log(LogLevel::Error, "engine", "generate: the engine is not ready: launch it first"),
            },
            Ok(EngineCommand::Shutdown) => break "shutdown",
            Err(_) => break "the console went away",
        }
    };
    drop(engine);
    events.emit(Event::Exit { code: 0, reason: reason.to_string() });
}
