//! Time to the first diagnosis in `replay --follow`: from the moment a scheduler's crash
//! record (traceback and error line) is written to a followed SGLang log until the
//! `Finding` event comes out. Reference in the same run: from the same write until a bare
//! `notify` watcher on the same folder wakes, i.e. what the kernel and the watcher cost
//! before replay does any work.
//!
//! Three crashes: one whose error line names the cause (diagnosed on that line); one replay
//! cannot pin down, followed by more lines (the next rank's record ends the traceback); and
//! a traceback that is the last thing written (`unrecognized-failure` waits until the log has
//! been quiet for a moment, since a traceback may go on).
//!
//!     cargo bench --bench replay_follow [-- TRIALS]

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};

use specdeck::event::Event;
use specdeck::replay::{run, ReplayOptions, Source};

const LOGS: [&str; 3] = [
    "testdata/logs/sglang-classic/context-draft-error.tp4.log",
    "testdata/logs/sglang-classic/unrecognized-error.tp4.log",
    // Ends inside its traceback: only the log going quiet ends it.
    "testdata/real-logs/ktransformers_2007_kimi_k25_eagle_capture_crash.log",
];

fn split_at_crash(text: &str) -> (&str, &str) {
    let at = text.find("Scheduler hit an exception").expect("the log has a crash");
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text.split_at(line_start)
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// Write → `Finding` out of a follow replay.
fn diagnosis_latency(dir: &Path, head: &str, crash: &str) -> Duration {
    let path = dir.join("server.log");
    fs::write(&path, head).unwrap();
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let source = Source::Path(path.clone());
    let follower = std::thread::spawn(move || {
        let opts = ReplayOptions { follow: true, ..Default::default() };
        let mut send = |_, e: specdeck::event::TimedEvent| {
            let _ = tx.send((Instant::now(), e.event));
        };
        run(&source, &opts, &mut send, &mut |_| flag.load(Ordering::SeqCst))
    });
    // Caught up with the start-up: it has sent its phases.
    rx.recv_timeout(Duration::from_secs(10)).expect("follow caught up");
    std::thread::sleep(Duration::from_millis(300));
    while rx.try_recv().is_ok() {}
    let written = Instant::now();
    append(&path, crash.as_bytes());
    let seen = loop {
        let (at, e) = rx.recv_timeout(Duration::from_secs(10)).expect("a diagnosis");
        if matches!(e, Event::Finding(_)) {
            break at;
        }
    };
    stop.store(true, Ordering::SeqCst);
    follower.join().unwrap().unwrap();
    fs::remove_file(&path).unwrap();
    seen.duration_since(written)
}

/// Write → a bare watcher's wake-up.
fn watcher_latency(dir: &Path, head: &str, crash: &str) -> Duration {
    let path = dir.join("watched.log");
    fs::write(&path, head).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |_| {
        let _ = tx.send(Instant::now());
    })
    .unwrap();
    watcher.watch(dir, RecursiveMode::NonRecursive).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    while rx.try_recv().is_ok() {}
    let written = Instant::now();
    append(&path, crash.as_bytes());
    let woke = rx.recv_timeout(Duration::from_secs(10)).expect("a watcher event");
    fs::remove_file(&path).unwrap();
    woke.duration_since(written)
}

fn summary(name: &str, mut v: Vec<Duration>) -> Duration {
    v.sort();
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<34} median {:>7.3} ms   p90 {:>7.3} ms   max {:>7.3} ms   (n={})",
        ms(pct(0.5)),
        ms(pct(0.9)),
        ms(*v.last().unwrap()),
        v.len()
    );
    pct(0.5)
}

fn main() {
    let trials: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    for log in LOGS {
        let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(log)).unwrap();
        let (head, crash) = split_at_crash(&text);
        let mut diag = Vec::new();
        let mut wake = Vec::new();
        for _ in 0..trials {
            diag.push(diagnosis_latency(dir.path(), head, crash));
            wake.push(watcher_latency(dir.path(), head, crash));
        }
        println!("{log}: crash record of {} bytes appended", crash.len());
        let d = summary("write -> replay Finding", diag);
        let w = summary("write -> notify wake-up (reference)", wake);
        println!("median ratio: {:.1}x the watcher's wake-up\n", d.as_secs_f64() / w.as_secs_f64());
    }
}
