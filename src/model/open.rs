//! Opening model files safely: only regular files, never blocking, and reads capped.
//!
//! A FIFO, a device, a directory, a dangling symlink or a symlink loop given where a model
//! file belongs is an error that names it and says what it is. The kind is checked before
//! opening, and the open itself is non-blocking, so a FIFO swapped in between the two checks
//! cannot hang the process either. Every file the model layer and preflight open goes
//! through here.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

const MIB: u64 = 1024 * 1024;

/// The most a `config.json`-like JSON file (configs, indexes, tokenizer configs) may hold.
pub const JSON_LIMIT: u64 = 64 * MIB;
/// The most a settings file (a console keymap or layout) may hold.
pub const SETTINGS_LIMIT: u64 = MIB;
/// The most a `tokenizer.json` may hold (the largest published ones are about 35 MB).
pub const TOKENIZER_LIMIT: u64 = 256 * MIB;

/// What a path is, when it is not a regular file.
fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    Some(if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    })
}

fn refuse(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// Why `path` cannot be opened as a regular file, without opening it. `Ok(())` for a regular
/// file (or a symlink to one).
pub fn check_regular(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) => match not_regular(&meta) {
            None => Ok(()),
            Some(kind) => Err(refuse(format!("is {kind}, not a regular file"))),
        },
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(refuse("is a symbolic link loop".into())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::read_link(path) {
            Ok(target) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("is a dangling symbolic link (to {}, which does not exist)", target.display()),
            )),
            Err(_) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// True when something (a file, a folder, a FIFO, even a dangling link) is at `path`: such an
/// entry is meant as that file, and opening it says what is wrong with it.
pub fn exists_in_any_form(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Open a regular file for reading; anything else is refused with an error that says what it is.
pub fn open_regular(path: &Path) -> io::Result<File> {
    check_regular(path)?;
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    // The path may have been replaced between the check and the open.
    let meta = file.metadata()?;
    match not_regular(&meta) {
        None => Ok(file),
        Some(kind) => Err(refuse(format!("is {kind}, not a regular file"))),
    }
}

/// Open a log to read as a stream: a regular file, or a FIFO (a shell's `<(command)`). The
/// open never blocks, and a FIFO that no one writes to reads as empty; a device (`/dev/zero`,
/// which would be read forever) or anything else is refused with what it is.
pub fn open_stream(path: &Path) -> io::Result<File> {
    if !std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
        return open_regular(path);
    }
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_fifo() && !meta.is_file() {
        return Err(refuse(format!("is {}, not a regular file", not_regular(&meta).unwrap_or("not a regular file"))));
    }
    // From here reads wait for the writer, as they do on standard input.
    // SAFETY: fcntl on a descriptor this function owns.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Read a whole regular file of at most `limit` bytes.
pub fn read_capped(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    let too_big = |len: u64| refuse(format!("is {len} bytes, more than the {} MiB this file may hold", limit / MIB));
    if len > limit {
        return Err(too_big(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // A file that grows while it is read still stops at the limit.
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `read_capped` as UTF-8 text.
pub fn read_text_capped(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, limit)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("is not UTF-8 ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_non_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("folder")).unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        std::os::unix::fs::symlink(d.join("loop_b"), d.join("loop_a")).unwrap();
        std::os::unix::fs::symlink(d.join("loop_a"), d.join("loop_b")).unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let msg = |name: &str| open_regular(&d.join(name)).unwrap_err().to_string();
        assert_eq!(msg("folder"), "is a directory, not a regular file");
        assert_eq!(msg("fifo"), "is a FIFO (named pipe), not a regular file");
        assert_eq!(msg("loop_a"), "is a symbolic link loop");
        assert!(msg("dangling").starts_with("is a dangling symbolic link (to "), "{}", msg("dangling"));
        assert_eq!(open_regular(Path::new("/dev/null")).unwrap_err().to_string(), "is a character device, not a regular file");
        assert!(exists_in_any_form(&d.join("dangling")) && !exists_in_any_form(&d.join("nowhere")));
    }

    #[test]
    fn a_log_may_be_a_fifo_but_not_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: the open does not wait, and the stream is empty.
        let mut bytes = Vec::new();
        open_stream(&fifo).unwrap().read_to_end(&mut bytes).unwrap();
        assert!(bytes.is_empty());
        for device in ["/dev/zero", "/dev/urandom"] {
            assert_eq!(open_stream(Path::new(device)).unwrap_err().to_string(), "is a character device, not a regular file");
        }
        assert_eq!(open_stream(dir.path()).unwrap_err().to_string(), "is a directory, not a regular file");
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, vec![b' '; 2 * MIB as usize + 1]).unwrap();
        assert_eq!(read_capped(&p, 2 * MIB).unwrap_err().to_string(), "is 2097153 bytes, more than the 2 MiB this file may hold");
        assert_eq!(read_capped(&p, 3 * MIB).unwrap().len(), 2 * MIB as usize + 1);
    }
}
