//! The OpenAI-compatible server (`launch --port`): a front end beside the console, over the
//! engine. `generator` is the seam the HTTP side is written against; `batch_one` implements
//! it on today's engine; `routes` and `openai` are the HTTP side, `metrics` its
//! `/metrics`; `control` puts it behind the console's engine commands; `options` reads
//! SGLang's serving flags from the launch.

pub mod batch_one;
pub mod control;
pub mod generator;
pub mod metrics;
pub mod openai;
pub mod options;
pub mod routes;
