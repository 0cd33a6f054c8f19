//! The console's view of the engine (contract 2): three commands out; everything the
//! engine says comes back as events through the `EventReceiver`, never through this trait.

use crate::engine::handle::{EngineCommand, EngineHandle};
use crate::spec::LaunchSpec;

/// A generation request: the engine's own request type, so the two cannot drift.
pub use crate::engine::request::GenerateRequest as GenerateParams;

impl GenerateParams {
    /// Greedy decoding of a plain prompt, as the demo and `launch --prompt` use.
    pub fn greedy(prompt: impl Into<String>, max_new_tokens: usize) -> GenerateParams {
        GenerateParams { prompt: prompt.into(), max_new_tokens, chat: false, temperature: 0.0, seed: 0 }
    }
}

/// What the console may ask of an engine. Implementations must not block: the engine
/// works on its own thread and answers with events.
pub trait EngineControl: Send {
    /// First launch, or relaunch with a changed spec.
    fn launch(&mut self, spec: LaunchSpec);
    fn generate(&mut self, params: GenerateParams);
    /// Free everything; the engine answers with `Event::Exit`.
    fn shutdown(&mut self);
}

/// The in-process engine (contract 1) behind the console.
impl EngineControl for EngineHandle {
    fn launch(&mut self, spec: LaunchSpec) {
        self.send(EngineCommand::Launch(spec));
    }

    fn generate(&mut self, params: GenerateParams) {
        self.send(EngineCommand::Generate(params));
    }

    /// The console shuts down to quit: a running generation stops at its next step.
    fn shutdown(&mut self) {
        self.cancel();
        self.send(EngineCommand::Shutdown);
    }
}
