//! The console's engine when the launch serves: the same three commands as the in-process
//! engine (`console::EngineControl`), with the HTTP server beside it. Launches go to the
//! serving engine, the prompt box's prompts join the HTTP requests in its batch, and a
//! shutdown stops accepting, cancels what runs, and frees the engine.

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::Notify;

use super::generator::{Endpoint, Generator};
use super::metrics::Metrics;
use super::options::ServeOptions;
use super::routes::{router, App};
use super::scheduled::Scheduled;
use crate::console::{EngineControl, GenerateParams};
use crate::engine::request::PreflightFn;
use crate::engine::serving::{Prompt, SamplingParams, ServeRequest};
use crate::event::{Event, EventSink, LogLevel};
use crate::spec::LaunchSpec;

pub struct ServingEngine {
    worker: Arc<Scheduled>,
    stop: Arc<Notify>,
    events: EventSink,
}

impl ServingEngine {
    /// Bind the address (an address in use is an error here, before anything runs) and serve
    /// on the current tokio runtime; the engine is launched by the console's first `launch`.
    pub fn start(events: EventSink, preflight: PreflightFn, options: &ServeOptions) -> anyhow::Result<ServingEngine> {
        let listener = std::net::TcpListener::bind(options.address())
            .with_context(|| format!("--host/--port: cannot listen on {}", options.address()))?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let address = listener.local_addr()?;
        let metrics = Arc::new(Metrics::default());
        let worker = Arc::new(Scheduled::start(events.clone(), preflight, metrics.clone(), options));
        let app = App { generator: worker.clone(), metrics, model: options.model.clone() };
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let sink = events.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, router(app)).with_graceful_shutdown(async move { stopped.notified().await }).await;
            if let Err(e) = served {
                sink.log(LogLevel::Error, "server", format!("the HTTP server stopped: {e}"));
            }
        });
        events.emit(Event::Serving { address: format!("http://{address}"), model: options.model.clone() });
        Ok(ServingEngine { worker, stop, events })
    }
}

impl EngineControl for ServingEngine {
    fn launch(&mut self, spec: LaunchSpec) {
        self.worker.launch(spec);
    }

    fn generate(&mut self, params: GenerateParams) {
        let request = ServeRequest {
            prompt: Prompt::Text { text: params.prompt, chat: params.chat },
            max_tokens: params.max_new_tokens,
            sampling: SamplingParams { temperature: params.temperature, seed: Some(params.seed), ..SamplingParams::default() },
            stop: Vec::new(),
            ignore_eos: false,
            endpoint: Endpoint::Console.name(),
        };
        match self.worker.submit(Endpoint::Console, request) {
            Ok(submission) => submission.detach(),
            // An error line ends the prompt box's generation, as the engine's own do.
            Err(refusal) => self.events.log(LogLevel::Error, "server", format!("generate: {refusal}")),
        }
    }

    fn shutdown(&mut self) {
        // `notify_one` keeps the wake-up for a server task that is not waiting yet.
        self.stop.notify_one();
        self.worker.shutdown();
    }
}
