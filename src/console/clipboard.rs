//! `y`: text to the user's clipboard. The terminal sets it from an OSC 52 sequence (over SSH
//! and tmux too), and the same text always goes to a file under the state dir as well, since
//! many terminals ignore OSC 52 and none says whether it obeyed.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ratatui::backend::{CrosstermBackend, TestBackend};

/// What `y` copied, which names its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copied {
    /// The launch line with the applied fixes (`LaunchSpec::fixed_command`).
    FixedCommand,
    /// The finding shown, as `check` prints it.
    Diagnosis,
}

impl Copied {
    pub fn file_name(self) -> &'static str {
        match self {
            Copied::FixedCommand => "fixed-command.sh",
            Copied::Diagnosis => "diagnosis.txt",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Copied::FixedCommand => "the fixed command",
            Copied::Diagnosis => "the diagnosis",
        }
    }
}

/// Where the files go: `$XDG_STATE_HOME/specdeck` (`~/.local/state/specdeck`), or the local
/// data dir where the platform has no state dir.
pub fn state_dir() -> Option<PathBuf> {
    dirs::state_dir().or_else(dirs::data_local_dir).map(|d| d.join("specdeck"))
}

/// Write the text to its file under the state dir; returns the file.
pub fn save(what: Copied, text: &str) -> io::Result<PathBuf> {
    let dir = state_dir().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no home directory for the state dir"))?;
    save_in(&dir, what, text)
}

fn save_in(dir: &Path, what: Copied, text: &str) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(what.file_name());
    let body = if text.ends_with('\n') { text.to_string() } else { format!("{text}\n") };
    std::fs::write(&path, body)?;
    Ok(path)
}

/// The OSC 52 sequence that sets the clipboard (`c`) to `text`.
pub fn osc52(text: &str) -> String {
    format!("\x1b]52;c;{}\x07", base64(text.as_bytes()))
}

/// Standard base64 with padding (RFC 4648), all OSC 52 needs.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A terminal backend the OSC 52 sequence is written through.
pub trait ClipboardBackend {
    fn set_clipboard(&mut self, text: &str) -> io::Result<()>;
}

impl<W: Write> ClipboardBackend for CrosstermBackend<W> {
    fn set_clipboard(&mut self, text: &str) -> io::Result<()> {
        self.write_all(osc52(text).as_bytes())?;
        self.flush()
    }
}

/// A test screen has no terminal to ask: the file is the only copy.
impl ClipboardBackend for TestBackend {
    fn set_clipboard(&mut self, _text: &str) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "a test backend has no clipboard"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_like_rfc_4648() {
        for (plain, coded) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")] {
            assert_eq!(base64(plain.as_bytes()), coded, "{plain}");
        }
    }

    #[test]
    fn the_sequence_goes_through_the_backend() {
        let mut written = Vec::new();
        CrosstermBackend::new(&mut written).set_clipboard("--tp 2").unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), "\x1b]52;c;LS10cCAy\x07");
    }

    #[test]
    fn the_file_is_named_for_what_was_copied() {
        let dir = tempfile::tempdir().unwrap();
        let path = save_in(&dir.path().join("specdeck"), Copied::FixedCommand, "--tp 2").unwrap();
        assert_eq!(path, dir.path().join("specdeck").join("fixed-command.sh"));
        assert_eq!(std::fs::read_to_string(path).unwrap(), "--tp 2\n");
    }
}
