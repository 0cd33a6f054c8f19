//! The real `specdeck` binary as the command-line tests run it.

use std::process::{Command, Output};

/// Run the binary from the crate root with a clean environment plus `env`: no GPU inventory
/// from this machine (so results do not depend on where the tests run), no colour settings
/// of the caller's.
pub fn specdeck(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specdeck"))
        .args(args)
        .env_clear()
        .env("SPECDECK_NVML", "off")
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the specdeck binary runs")
}

/// An output stream as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}
