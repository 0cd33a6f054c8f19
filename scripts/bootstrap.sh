#!/usr/bin/env bash
# Set-up for a fresh machine: a Rust toolchain (via rustup when cargo is absent), with rustfmt
# and clippy.
# Everything else (crates, test fixtures) comes from Cargo.lock and the repo.
set -euo pipefail
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  echo "bootstrap: installing a Rust toolchain with rustup" >&2
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >&2
fi
# .ci/run checks formatting and lints beside the tests; the minimal profile lacks both tools.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy >&2
fi
