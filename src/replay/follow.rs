//! `--follow`: tail a log that a server is still writing. Woken by `notify` (inotify on
//! Linux) on the log's folder, with a short poll as a fallback for file systems that send
//! no events. Survives truncation (`copytruncate`, `> log`) and rotation (rename and
//! create): either way the new content is replayed from its first line.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use notify::{RecursiveMode, Watcher};

use super::{Delivery, Replayer, StopWhen, CHUNK};

/// How long to sleep when nothing is pending and no file event comes.
const POLL: Duration = Duration::from_millis(200);
/// The wait while a traceback or crash line waits for the log to go quiet.
const POLL_PENDING: Duration = Duration::from_millis(10);

/// A file's identity, to notice that the path now names another file.
#[cfg(unix)]
fn identity(meta: &fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(meta: &fs::Metadata) -> (u64, u64) {
    let created = meta.created().ok().and_then(|c| c.duration_since(std::time::UNIX_EPOCH).ok());
    (created.map_or(0, |d| d.as_nanos() as u64), 0)
}

struct Tailed {
    file: File,
    id: (u64, u64),
    pos: u64,
}

impl Tailed {
    fn open(path: &Path) -> Option<Tailed> {
        let file = crate::model::open::open_stream(path).ok()?;
        let id = identity(&file.metadata().ok()?);
        Some(Tailed { file, id, pos: 0 })
    }
}

/// What the path holds now, compared with the open file.
enum Change {
    None,
    Truncated,
    Replaced,
}

fn change(path: &Path, tailed: &Tailed) -> Change {
    match fs::metadata(path) {
        Ok(meta) if identity(&meta) != tailed.id => Change::Replaced,
        Ok(meta) if meta.len() < tailed.pos => Change::Truncated,
        // Gone (renamed away, not yet re-created): keep the old file until a new one appears.
        _ => Change::None,
    }
}

pub(super) fn follow(path: &Path, replayer: &mut Replayer, d: &mut Delivery, stop: StopWhen) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |_event| {
        let _ = tx.send(());
    })
    .context("cannot start the file watcher")?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    watcher.watch(folder, RecursiveMode::NonRecursive).with_context(|| format!("{}: cannot watch the folder", folder.display()))?;

    let mut tailed = Tailed::open(path);
    if tailed.is_none() && !path.exists() {
        // Follow a log that does not exist yet: the server may not have started.
        eprintln!("specdeck: {}: waiting for the file to appear", path.display());
    }
    let mut buf = vec![0u8; CHUNK];
    let mut last_data = Instant::now();
    loop {
        if let Some(t) = tailed.as_mut() {
            loop {
                let n = t.file.read(&mut buf).with_context(|| format!("{}: read failed", path.display()))?;
                if n == 0 {
                    break;
                }
                t.pos += n as u64;
                last_data = Instant::now();
                replayer.feed(&buf[..n], &mut |l, e| d.deliver(l, e));
                if stop(&d.report) {
                    return Ok(());
                }
            }
            match change(path, t) {
                Change::None => {}
                Change::Truncated => {
                    t.file.seek(SeekFrom::Start(0))?;
                    t.pos = 0;
                    replayer.restart(&mut |l, e| d.deliver(l, e));
                    continue;
                }
                Change::Replaced => {
                    tailed = Tailed::open(path);
                    replayer.restart(&mut |l, e| d.deliver(l, e));
                    continue;
                }
            }
        } else if let Some(t) = Tailed::open(path) {
            tailed = Some(t);
            continue;
        }
        if stop(&d.report) {
            return Ok(());
        }
        let wait = if replayer.has_pending() { POLL_PENDING } else { POLL };
        // A closed channel means the watcher is gone; polling still works.
        let _ = rx.recv_timeout(wait);
        while rx.try_recv().is_ok() {}
        replayer.idle(last_data.elapsed(), &mut |l, e| d.deliver(l, e));
    }
}
