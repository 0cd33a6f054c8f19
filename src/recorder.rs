//! `--event-log FILE`: every event of the stream, one JSON line each, flushed as written so
//! a crash or a lost terminal still leaves a complete log up to that point.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::event::TimedEvent;
use crate::model::open::{check_regular, exists_in_any_form};

pub struct Recorder {
    out: BufWriter<File>,
}

impl Recorder {
    /// A new file, or a regular one to replace. Anything else is refused: opening a FIFO
    /// would block until a reader comes, and a device such as /dev/full takes no events.
    pub fn create(path: &Path) -> io::Result<Recorder> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        if let Err(e) = check_regular(path) {
            let new_file = e.kind() == io::ErrorKind::NotFound && !exists_in_any_form(path);
            if !new_file {
                return Err(named(e));
            }
        }
        let file = File::create(path).map_err(named)?;
        Ok(Recorder { out: BufWriter::new(file) })
    }

    pub fn record(&mut self, event: &TimedEvent) -> io::Result<()> {
        writeln!(self.out, "{}", event.to_json_line())?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, PhaseState};
    use crate::phase::PhaseId;

    #[test]
    fn every_event_becomes_one_line_that_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let events = [
            TimedEvent { t: 0.0, event: Event::Phase { phase: PhaseId::Preflight, state: PhaseState::Started, detail: None } },
            TimedEvent { t: 0.5, event: Event::Token { ids: vec![1, 2], text: "hi\n".into(), drafted: true } },
        ];
        let mut rec = Recorder::create(&path).unwrap();
        for ev in &events {
            rec.record(ev).unwrap();
        }
        // Flushed per line: readable before the recorder is dropped.
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Vec<TimedEvent> = text.lines().map(|l| TimedEvent::from_json_line(l).unwrap()).collect();
        assert_eq!(back, events);
    }

    #[test]
    fn an_unwritable_path_is_named() {
        let err = Recorder::create(Path::new("/nonexistent-dir/e.jsonl")).err().unwrap();
        assert!(err.to_string().starts_with("/nonexistent-dir/e.jsonl: "), "{err}");
    }
}
