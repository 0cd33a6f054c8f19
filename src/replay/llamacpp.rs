//! llama.cpp's server logs: named (detect.rs), with the lines that show it ready and serving.
//! Everything else in them is read with the rules every engine shares.

use super::rules::Action::*;
use super::rules::{rule, Engine, Rule};

const A: Engine = Engine::Any;

pub static RULES: &[Rule] = &[
    rule(A, "server is listening on http", "", ServerReady, 0),
    // A finished request's timings (with the draft's acceptance when speculating).
    rule(A, "slot print_timing: ", "", DecodeStats, 0),
    rule(A, "srv  update_slots: ", "", ServingLine, 0),
];
