//! Contract 1: the engine on its own OS thread, driven by commands, reporting only through
//! the event stream. The console never touches engine state; it sends `EngineCommand`s and
//! renders events.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::backend::cpu::CpuBackend;
use crate::engine::lifecycle::Engine;
use crate::event::{Event, EventSink, LogLevel};
use crate::finding::Finding;
use crate::spec::LaunchSpec;

/// The preflight rule set the engine runs in its preflight phase (`preflight::check_spec`).
pub type PreflightFn = Arc<dyn Fn(&LaunchSpec) -> Vec<Finding> + Send + Sync>;

#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    pub prompt: String,
    pub max_new_tokens: usize,
    /// Apply the tokenizer's chat template to the prompt.
    pub chat: bool,
    /// 0 = greedy.
    pub temperature: f32,
    pub seed: u64,
}

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
}

impl EngineHandle {
    pub fn spawn(events: EventSink, preflight: PreflightFn) -> EngineHandle {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("specdeck-engine".into())
            .spawn(move || run(events, preflight, rx))
            .expect("the OS can start the engine thread");
        EngineHandle { tx, thread: Some(thread) }
    }

    /// Queue a command; never blocks. After the engine has shut down it is dropped.
    pub fn send(&self, cmd: EngineCommand) {
        let _ = self.tx.send(cmd);
    }

    /// Send `Shutdown` and wait for the engine thread to free everything and end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.tx.send(EngineCommand::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EngineHandle {
    /// A dropped handle shuts the engine down too, so no thread outlives the console.
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(events: EventSink, preflight: PreflightFn, rx: mpsc::Receiver<EngineCommand>) {
    let mut engine = Engine::new(CpuBackend, events.clone());
    let reason = loop {
        match rx.recv() {
            Ok(EngineCommand::Launch(spec)) => {
                engine.launch(&spec, &*preflight);
            }
            Ok(EngineCommand::Generate(req)) => {
                if let Err(e) = engine.generate(&req) {
                    events.log(LogLevel::Error, "engine", format!("generate: {e}"));
                }
            }
            Ok(EngineCommand::Shutdown) => break "shutdown",
            Err(_) => break "the console went away",
        }
    };
    drop(engine);
    events.emit(Event::Exit { code: 0, reason: reason.to_string() });
}
