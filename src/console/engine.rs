//! The console's view of the engine (contract 2): three commands out; everything the
//! engine says comes back as events through the `EventReceiver`, never through this trait.

use crate::spec::LaunchSpec;

/// A generation request, field for field the engine's `GenerateRequest`.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateParams {
    pub prompt: String,
    pub max_new_tokens: usize,
    pub chat: bool,
    pub temperature: f32,
    pub seed: u64,
}

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
