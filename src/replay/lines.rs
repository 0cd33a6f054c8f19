//! Bytes to clean lines: split on `\n` with bounded memory, split tqdm's `\r` redraws, drop
//! ANSI escapes, decode lossily, and strip the prefixes that log shippers put in front.

use std::borrow::Cow;

use memchr::memchr;

use super::clock::parse_datetime;

/// Longest line kept; the rest of a longer line is skipped. Python never logs lines this
/// long, but a binary file or a minified dump can have none at all.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Splits a byte stream into numbered lines. Holds at most one partial line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    line_no: u64,
}

impl LineSplitter {
    /// Feeds bytes; calls `on_line(number, bytes)` for every line they complete.
    pub fn feed(&mut self, mut chunk: &[u8], on_line: &mut dyn FnMut(u64, &[u8])) {
        while let Some(i) = memchr(b'\n', chunk) {
            self.line_no += 1;
            if self.partial.is_empty() {
                on_line(self.line_no, &chunk[..i.min(MAX_LINE_BYTES)]);
            } else {
                self.keep(&chunk[..i]);
                on_line(self.line_no, &self.partial);
                self.partial.clear();
            }
            chunk = &chunk[i + 1..];
        }
        self.keep(chunk);
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES - self.partial.len();
        self.partial.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The last line, when the input does not end with a newline.
    pub fn finish(&mut self, on_line: &mut dyn FnMut(u64, &[u8])) {
        if !self.partial.is_empty() {
            self.line_no += 1;
            on_line(self.line_no, &self.partial);
            self.partial.clear();
        }
    }

    pub fn lines_done(&self) -> u64 {
        self.line_no
    }
}

/// Calls `f` with each displayed state of a raw line: tqdm redraws a bar with `\r`, and each
/// redraw is a state of its own. ANSI escapes are removed and bad UTF-8 replaced.
pub fn for_each_segment(raw: &[u8], f: &mut dyn FnMut(&str)) {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if memchr(b'\r', raw).is_none() {
        return f(&clean(raw));
    }
    for seg in raw.split(|&b| b == b'\r').filter(|s| !s.is_empty()) {
        f(&clean(seg));
    }
}

fn clean(bytes: &[u8]) -> Cow<'_, str> {
    if memchr(0x1b, bytes).is_none() {
        // `from_utf8` has a fast path for ASCII that `from_utf8_lossy` lacks.
        return std::str::from_utf8(bytes).map_or_else(|_| String::from_utf8_lossy(bytes), Cow::Borrowed);
    }
    let stripped = strip_ansi_escapes::strip(bytes);
    Cow::Owned(String::from_utf8(stripped).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// A line without the prefixes log shippers add.
#[derive(Debug, PartialEq)]
pub struct Unprefixed<'a> {
    pub rest: &'a str,
    /// A Kubernetes (`kubectl logs --timestamps`) RFC 3339 stamp, seconds since 1970 UTC.
    pub shipper_time: Option<f64>,
    /// The process of a `(Name pid=N)` prefix (Ray actors, vLLM's processes).
    pub process: Option<&'a str>,
}

/// Strips, in any order and repeated: an RFC 3339 stamp, `kubectl --prefix`'s `[pod/x/y] `,
/// docker compose's `name  | `, and Ray's / vLLM's `(Name pid=N) ` (`, ip=…` allowed).
pub fn strip_prefixes(line: &str) -> Unprefixed<'_> {
    let mut out = Unprefixed { rest: line, shipper_time: None, process: None };
    for _ in 0..4 {
        let rest = out.rest;
        if let Some((t, after)) = rfc3339(rest) {
            out.shipper_time = Some(t);
            out.rest = after;
        } else if let Some(after) = kubectl_prefix(rest) {
            out.rest = after;
        } else if let Some((name, after)) = process_prefix(rest) {
            out.process = Some(name);
            out.rest = after;
        } else if let Some(after) = compose_prefix(rest) {
            out.rest = after;
        } else {
            break;
        }
    }
    out
}

fn rfc3339(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    if b.get(10) != Some(&b'T') {
        return None;
    }
    let (t, mut end) = parse_datetime(b)?;
    let offset = match b.get(end) {
        Some(b'Z') => {
            end += 1;
            0.0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let hh = s.get(end + 1..end + 3)?.parse::<f64>().ok()?;
            let mm = s.get(end + 4..end + 6)?.parse::<f64>().ok()?;
            end += 6;
            let off = hh * 3600.0 + mm * 60.0;
            if sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let after = s[end..].strip_prefix(' ')?;
    Some((t - offset, after))
}

fn kubectl_prefix(s: &str) -> Option<&str> {
    let inner = s.strip_prefix("[pod/")?;
    let close = inner.find("] ")?;
    Some(&inner[close + 2..])
}

/// `(SGLangEngine pid=123) `, `(EngineCore_DP0 pid=9, ip=10.0.0.1) `.
fn process_prefix(s: &str) -> Option<(&str, &str)> {
    let inner = s.strip_prefix('(')?;
    let close = inner.find(") ")?;
    let (name, pid) = inner[..close].split_once(" pid=")?;
    let pid = pid.split(',').next()?;
    let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.= ".contains(&b));
    (name_ok && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then(|| (name, &inner[close + 2..]))
}

/// docker compose pads the service name: `llm0-1  | `, `pennyroyal-1  | `.
fn compose_prefix(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let name_len = b.iter().take(64).position(|&c| !(c.is_ascii_alphanumeric() || b"_.-".contains(&c)))?;
    if name_len == 0 || !b[0].is_ascii_alphanumeric() {
        return None;
    }
    let spaces = b[name_len..].iter().take_while(|&&c| c == b' ').count();
    let bar = name_len + spaces;
    (b.get(bar) == Some(&b'|') && matches!(b.get(bar + 1), Some(b' ') | None)).then(|| s.get(bar + 2..).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(chunks: &[&[u8]]) -> Vec<(u64, Vec<u8>)> {
        let mut sp = LineSplitter::default();
        let mut out = Vec::new();
        for c in chunks {
            sp.feed(c, &mut |n, l| out.push((n, l.to_vec())));
        }
        sp.finish(&mut |n, l| out.push((n, l.to_vec())));
        out
    }

    #[test]
    fn splits_across_chunks_and_keeps_the_unterminated_tail() {
        let got = split_all(&[b"ab", b"c\nde\n\nf", b"g"]);
        let want: Vec<(u64, Vec<u8>)> = vec![(1, b"abc".to_vec()), (2, b"de".to_vec()), (3, vec![]), (4, b"fg".to_vec())];
        assert_eq!(got, want);
    }

    #[test]
    fn long_lines_are_cut_not_buffered() {
        let long = vec![b'x'; MAX_LINE_BYTES * 3];
        let got = split_all(&[&long[..10], &long[10..], b"\nok\n"]);
        assert_eq!(got[0].1.len(), MAX_LINE_BYTES);
        assert_eq!(got[1], (2, b"ok".to_vec()));
        let got = split_all(&[&[&long[..], b"\n"].concat()]);
        assert_eq!(got[0].1.len(), MAX_LINE_BYTES);
    }

    #[test]
    fn tqdm_redraws_and_ansi_become_clean_segments() {
        let raw = b"\rCapturing batches (bs=4 avail_mem=23.09 GB):   0%|  | 0/2\r\x1b[32mCapturing batches (bs=2 avail_mem=23.01 GB):  50%|#  | 1/2\x1b[0m\r";
        let mut segs = Vec::new();
        for_each_segment(raw, &mut |s| segs.push(s.to_string()));
        assert_eq!(
            segs,
            ["Capturing batches (bs=4 avail_mem=23.09 GB):   0%|  | 0/2", "Capturing batches (bs=2 avail_mem=23.01 GB):  50%|#  | 1/2"]
        );
        let mut segs = Vec::new();
        for_each_segment(b"bad \xff\xfe utf8", &mut |s| segs.push(s.to_string()));
        assert_eq!(segs, ["bad \u{fffd}\u{fffd} utf8"]);
    }

    #[test]
    fn strips_every_shipper_prefix() {
        let p = strip_prefixes("pennyroyal-1  | [2026-09-21 03:09:14] Warning: x");
        assert_eq!(p.rest, "[2026-09-21 03:09:14] Warning: x");
        let p = strip_prefixes("(SGLangEngine pid=4242) [2026-01-02 03:04:05 TP1] Load weight begin.");
        assert_eq!((p.process, p.rest), (Some("SGLangEngine"), "[2026-01-02 03:04:05 TP1] Load weight begin."));
        let p = strip_prefixes("2026-05-15T19:00:54.5+02:00 llm0-1  | (EngineCore_DP0 pid=9, ip=10.0.0.2) INFO x");
        assert_eq!((p.process, p.rest), (Some("EngineCore_DP0"), "INFO x"));
        let (utc, _) = parse_datetime(b"2026-05-15 17:00:54.5").unwrap();
        assert!((p.shipper_time.unwrap() - utc).abs() < 1e-6);
        let p = strip_prefixes("[pod/sglang-0/server] [2026-01-02 03:04:05] ready");
        assert_eq!(p.rest, "[2026-01-02 03:04:05] ready");
    }

    #[test]
    fn leaves_log_text_alone() {
        for line in [
            "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.02s/it]",
            "Capturing batches (bs=4 avail_mem=23.09 GB):  25%|##5       | 1/4",
            "  File \"/x/sglang/srt/managers/scheduler.py\", line 3207, in run_scheduler_process",
            "(most recent call last) x",
            "INFO:     Started server process [3406797]",
            "a|b",
        ] {
            assert_eq!(strip_prefixes(line).rest, line);
        }
    }
}
