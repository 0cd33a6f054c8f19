//! The OpenAI-compatible server (`launch --port`): a front end beside the console, over the
//! engine. `generator` is the seam the HTTP side is written against; `scheduled` implements
//! it on the serving engine; `routes` and `openai` are the HTTP side, `metrics` its
//! `/metrics`; `control` puts it behind the console's engine commands; `options` reads
//! SGLang's serving flags from the launch.

pub mod control;
pub mod generator;
pub mod metrics;
pub mod openai;
pub mod options;
pub mod routes;
pub mod scheduled;
