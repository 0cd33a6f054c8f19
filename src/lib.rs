//! specdeck: a terminal launch-and-debug console with an in-process EAGLE-3 speculative
//! decoding engine. See DESIGN.md for the architecture: one event stream; findings and
//! remedies; the engine lifecycle; the console as a pure function of events.

pub mod backend;
pub mod commands;
pub mod console;
pub(crate) mod cudacheck;
pub mod demo;
pub mod engine;
pub mod event;
pub mod finding;
pub mod finding_text;
pub(crate) mod knobs;
pub mod model;
pub mod phase;
pub mod preflight;
pub mod recorder;
pub mod replay;
pub mod server;
pub mod spec;
pub mod telemetry;
pub mod testkit;
