//! Bytes to clean lines: split on `\n` with bounded memory, split tqdm's `\r` redraws, drop
//! ANSI escapes (also pasted as the text `^[[1;36m`, with `^M` for `\r`), decode lossily, and
//! strip the prefixes that log shippers put in front.

use std::borrow::Cow;

use memchr::memchr;
use memchr::memmem;

use super::clock::parse_datetime;

/// Longest line kept; the rest of a longer line is skipped. Python never logs lines this
/// long, but a binary file or a minified dump can have none at all.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Splits a byte stream into numbered lines. Holds at most one partial line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    line_no: u64,
    /// The line being read was handed out in part already (`flush_partial`): what follows,
    /// up to its newline, is the rest of the same line, under the same number.
    flushed: bool,
}

impl LineSplitter {
    /// Feeds bytes; calls `on_line(number, bytes)` for every line they complete.
    pub fn feed(&mut self, mut chunk: &[u8], on_line: &mut dyn FnMut(u64, &[u8])) {
        while let Some(i) = memchr(b'\n', chunk) {
            if !std::mem::take(&mut self.flushed) {
                self.line_no += 1;
            } else if i == 0 && self.partial.is_empty() {
                // The newline of a line already handed out whole.
                chunk = &chunk[1..];
                continue;
            }
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

    /// Hands out the partial line as it stands (a log that went quiet before its newline:
    /// a tqdm bar still drawing, a writer that stopped mid-line). Its rest, when it comes,
    /// is handed out under the same line number.
    pub fn flush_partial(&mut self, on_line: &mut dyn FnMut(u64, &[u8])) {
        if self.partial.is_empty() {
            return;
        }
        if !self.flushed {
            self.line_no += 1;
            self.flushed = true;
        }
        on_line(self.line_no, &self.partial);
        self.partial.clear();
    }

    /// Whether a line without its newline is held.
    pub fn has_partial(&self) -> bool {
        !self.partial.is_empty()
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES - self.partial.len();
        self.partial.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The last line, when the input does not end with a newline.
    pub fn finish(&mut self, on_line: &mut dyn FnMut(u64, &[u8])) {
        self.flush_partial(on_line);
        self.flushed = false;
    }

    pub fn lines_done(&self) -> u64 {
        self.line_no
    }
}

/// Calls `f` with each displayed state of a raw line: tqdm redraws a bar with `\r`, and each
/// redraw is a state of its own. ANSI escapes are removed and bad UTF-8 replaced.
pub fn for_each_segment(raw: &[u8], f: &mut dyn FnMut(&str)) {
    if memchr(b'^', raw).is_some() && (memmem::find(raw, b"^[[").is_some() || memmem::find(raw, b"^M").is_some()) {
        return segments(&unescape_pasted(raw), f);
    }
    segments(raw, f)
}

fn segments(raw: &[u8], f: &mut dyn FnMut(&str)) {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if memchr(b'\r', raw).is_none() {
        return f(&clean(raw));
    }
    for seg in raw.split(|&b| b == b'\r').filter(|s| !s.is_empty()) {
        f(&clean(seg));
    }
}

/// A paste that shows control characters as text (`cat -v`, some terminals): `^[` is ESC and
/// `^M` a carriage return again.
fn unescape_pasted(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match (raw[i], raw.get(i + 1)) {
            (b'^', Some(b'[')) if raw.get(i + 2) == Some(&b'[') => {
                out.push(0x1b);
                i += 2;
            }
            (b'^', Some(b'M')) => {
                out.push(b'\r');
                i += 2;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn clean(bytes: &[u8]) -> Cow<'_, str> {
    if memchr(0x1b, bytes).is_none() {
        // `from_utf8` has a fast path for ASCII that `from_utf8_lossy` lacks.
        return std::str::from_utf8(bytes).map_or_else(|_| String::from_utf8_lossy(bytes), Cow::Borrowed);
    }
    let stripped = strip_ansi_escapes::strip(bytes);
    Cow::Owned(String::from_utf8(stripped).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Where the next record starts inside `text` (never at 0), when a paste collapsed several
/// onto one line: an SGLang header (`[2025-04-16 14:22:53`), a `(Name pid=N) ` prefix, a
/// traceback frame (`File "…", line N`) after other text, or the next state of a tqdm
/// capture bar whose `\r` the paste lost (`…2.51it/s]Capturing batches (bs=4 …`).
pub fn next_record(text: &str) -> Option<usize> {
    static FINDERS: std::sync::LazyLock<[memmem::Finder<'static>; 4]> =
        std::sync::LazyLock::new(|| ["[20", " pid=", " File \"", "]Capturing batches ("].map(memmem::Finder::new));
    let b = text.as_bytes();
    // Every boundary has one of these bytes (`[20`, `pid=`, `File "`, `]Capturing`); most lines have none.
    memchr::memchr3(b'[', b'=', b'"', b)?;
    let [stamp, pid, frame, bar] = &*FINDERS;
    let bars = bar.find(b).map(|i| i + 1);
    let stamps = stamp.find_iter(b).filter(|&i| i > 0 && parse_datetime(&b[i + 1..]).is_some());
    let prefixes = pid.find_iter(b).filter_map(|i| {
        let open = text[..i].rfind('(')?;
        let starts_record = open > 0 && b[open - 1] == b' ' && process_prefix(&text[open..]).is_some_and(|(_, rest)| !rest.is_empty());
        starts_record.then_some(open)
    });
    let frames = frame.find_iter(b).filter(|&i| {
        let after = &text[i + 7..];
        !text[..i].trim().is_empty() && after.split_once('"').is_some_and(|(_, rest)| rest.starts_with(", line "))
    });
    [stamps.min(), prefixes.min(), frames.min(), bars].into_iter().flatten().min()
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

/// Strips, in any order and repeated: an RFC 3339 stamp (bare or in brackets), the
/// container runtime's `stdout F ` after it (Kubernetes node logs), `kubectl --prefix`'s
/// `[pod/x/y] `, docker compose's `name  | `, a rollout driver's `name >> `, Ray's / vLLM's
/// `(Name pid=N) ` (`, ip=…` allowed; `(pid=N)` and a paste that lost the `(` too), and a
/// launcher's `[1/8,TP1][pid=N] `.
pub fn strip_prefixes(line: &str) -> Unprefixed<'_> {
    let mut out = Unprefixed { rest: line, shipper_time: None, process: None };
    // Most lines of a log start with the engine's own `[YYYY-MM-DD HH:MM:SS`, which no
    // prefix below starts with: they are taken as they are, without a search for each kind.
    if engine_stamp(line) {
        return out;
    }
    for _ in 0..6 {
        let rest = out.rest;
        if let Some((t, after)) = rfc3339(rest).or_else(|| bracketed_rfc3339(rest)) {
            out.shipper_time = Some(t);
            out.rest = cri_stream(after).unwrap_or(after);
        } else if let Some((rank, after)) = launcher_prefix(rest) {
            out.process = Some(rank);
            out.rest = after;
        } else if let Some(after) = kubectl_prefix(rest) {
            out.rest = after;
        } else if let Some((name, after)) = process_prefix(rest) {
            out.process = Some(name);
            out.rest = after;
        } else if let Some(after) = compose_prefix(rest).or_else(|| driver_prefix(rest)) {
            out.rest = after;
        } else {
            break;
        }
    }
    out
}

/// `[2026-03-02 10:00:00` at the start: SGLang's (and many a Python logger's) own stamp.
fn engine_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() > 20 && b[0] == b'[' && b[5] == b'-' && b[8] == b'-' && b[11] == b' ' && b[14] == b':' && b[1].is_ascii_digit()
}

fn rfc3339(s: &str) -> Option<(f64, &str)> {
    let (t, end) = rfc3339_stamp(s)?;
    Some((t, s[end..].strip_prefix(' ')?))
}

/// An RFC 3339 stamp at the start of `s`: seconds since 1970 UTC and the bytes read.
fn rfc3339_stamp(s: &str) -> Option<(f64, usize)> {
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
    Some((t - offset, end))
}

/// `[2025-12-18T16:24:02+08:00] ` (a rollout driver's stamp).
fn bracketed_rfc3339(s: &str) -> Option<(f64, &str)> {
    let inner = s.strip_prefix('[')?;
    let (t, end) = rfc3339_stamp(inner)?;
    Some((t, inner[end..].strip_prefix("] ")?))
}

/// The CRI log format's stream and tag after the stamp: `stdout F `, `stderr P `.
fn cri_stream(s: &str) -> Option<&str> {
    let rest = s.strip_prefix("stdout ").or_else(|| s.strip_prefix("stderr "))?;
    rest.strip_prefix("F ").or_else(|| rest.strip_prefix("P "))
}

/// How far into a line a prefix is looked for: prefixes are short, and every line pays for
/// the search (most lines have none).
const PREFIX_SCAN: usize = 160;

/// The start of `s` where a prefix can be, cut at a character boundary.
fn head(s: &str) -> &str {
    let mut end = s.len().min(PREFIX_SCAN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `[1/8,TP1][pid=5510] `: the rank part is kept as the process (it names the TP rank).
fn launcher_prefix(s: &str) -> Option<(&str, &str)> {
    let inner = s.strip_prefix('[')?;
    let close = head(inner).find("][pid=")?;
    let rank = &inner[..close];
    let after = &inner[close + "][pid=".len()..];
    let end = after.find("] ")?;
    (after[..end].bytes().all(|b| b.is_ascii_digit()) && !rank.is_empty() && !rank.contains(' ')).then(|| (rank, &after[end + 2..]))
}

/// A rollout driver's `job-name >> ` (slime): one token, then ` >> `.
fn driver_prefix(s: &str) -> Option<&str> {
    let at = head(s).find(" >> ")?;
    let name = &s[..at];
    (!name.is_empty() && name.len() <= 128 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-:/".contains(&b)))
        .then(|| &s[at + 4..])
}

fn kubectl_prefix(s: &str) -> Option<&str> {
    let inner = s.strip_prefix("[pod/")?;
    let close = inner.find("] ")?;
    Some(&inner[close + 2..])
}

/// `(SGLangEngine pid=123) `, `(EngineCore_DP0 pid=9, ip=10.0.0.1) `, Ray's `(pid=123) `,
/// and `RayWorkerWrapper pid=1) ` where the paste lost the `(`. A prefix alone on its line
/// (`(RayWorkerWrapper pid=1)`) leaves an empty rest.
fn process_prefix(s: &str) -> Option<(&str, &str)> {
    let (inner, opened) = match s.strip_prefix('(') {
        Some(inner) => (inner, true),
        None => (s, false),
    };
    let close = head(inner).find(')')?;
    if !matches!(inner.as_bytes().get(close + 1), Some(b' ') | None) {
        return None;
    }
    let head = &inner[..close];
    let (name, pid) = match head.strip_prefix("pid=") {
        Some(pid) if opened => ("", pid),
        _ => head.split_once(" pid=")?,
    };
    let pid = pid.split(',').next()?;
    // Without the `(`, only a one-word name at the start of the line is taken as a prefix.
    let name_ok =
        name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.= ".contains(&b)) && (opened || (!name.is_empty() && !name.contains(' ')));
    let rest = inner.get(close + 2..).unwrap_or("");
    (name_ok && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then_some((if name.is_empty() { "pid" } else { name }, rest))
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
    fn an_engine_stamped_line_has_no_prefix_and_a_prefixed_one_still_loses_its_own() {
        let line = "[2026-03-02 10:00:00 TP0] Load weight begin. (pid=12) x";
        let u = strip_prefixes(line);
        assert_eq!((u.rest, u.process, u.shipper_time), (line, None, None));
        let u = strip_prefixes("(pid=12) [2026-03-02 10:00:00 TP0] Load weight begin.");
        assert_eq!((u.rest, u.process), ("[2026-03-02 10:00:00 TP0] Load weight begin.", Some("pid")));
    }

    #[test]
    fn splits_across_chunks_and_keeps_the_unterminated_tail() {
        let got = split_all(&[b"ab", b"c\nde\n\nf", b"g"]);
        let want: Vec<(u64, Vec<u8>)> = vec![(1, b"abc".to_vec()), (2, b"de".to_vec()), (3, vec![]), (4, b"fg".to_vec())];
        assert_eq!(got, want);
    }

    #[test]
    fn a_flushed_partial_line_keeps_its_number_when_its_rest_comes() {
        let mut sp = LineSplitter::default();
        let mut out = Vec::new();
        sp.feed(b"one\n\rbar 1/4", &mut |n, l| out.push((n, l.to_vec())));
        assert!(sp.has_partial());
        sp.flush_partial(&mut |n, l| out.push((n, l.to_vec())));
        assert!(!sp.has_partial());
        sp.feed(b"\rbar 4/4\nthree", &mut |n, l| out.push((n, l.to_vec())));
        sp.flush_partial(&mut |n, l| out.push((n, l.to_vec())));
        sp.feed(b"\nfour\n", &mut |n, l| out.push((n, l.to_vec())));
        sp.finish(&mut |n, l| out.push((n, l.to_vec())));
        let want: Vec<(u64, Vec<u8>)> = vec![
            (1, b"one".to_vec()),
            (2, b"\rbar 1/4".to_vec()),
            (2, b"\rbar 4/4".to_vec()),
            (3, b"three".to_vec()),
            (4, b"four".to_vec()),
        ];
        assert_eq!(out, want);
        assert_eq!(sp.lines_done(), 4);
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

    /// The prefix styles of the real excerpts (testdata/real-logs), each from its own line.
    #[test]
    fn strips_the_prefixes_of_real_pastes() {
        // sglang_6309_ray_eagle_runtime_ima.log
        let p = strip_prefixes("(SGLangEngine pid=952, ip=10.150.236.219) [2025-11-06 01:16:21 TP0] Scheduler hit an exception: x");
        assert_eq!((p.process, p.rest), (Some("SGLangEngine"), "[2025-11-06 01:16:21 TP0] Scheduler hit an exception: x"));
        // vllm_ascend2667_eagle_fatal_error_first_request.log
        let p = strip_prefixes("(EngineCore_0 pid=862715) ERROR 09-01 03:23:11 [core.py:714] EngineCore encountered a fatal error.");
        assert_eq!((p.process, p.rest), (Some("EngineCore_0"), "ERROR 09-01 03:23:11 [core.py:714] EngineCore encountered a fatal error."));
        // vllm_5342_v0_ray_exceed_draft_context.log: the paste lost the `(`, and a bare prefix.
        let p = strip_prefixes("RayWorkerWrapper pid=142935) 07d92dd514d4:142935:143254 [0] transport/net_ib.cc:100 NCCL WARN x");
        assert_eq!((p.process, p.rest), (Some("RayWorkerWrapper"), "07d92dd514d4:142935:143254 [0] transport/net_ib.cc:100 NCCL WARN x"));
        let p = strip_prefixes("(RayWorkerWrapper pid=142935)");
        assert_eq!((p.process, p.rest), (Some("RayWorkerWrapper"), ""));
        // vllm_speculators266_qwen3vl_eagle3_dummy_run.log
        let p = strip_prefixes("[1/8,TP1][pid=5510] ERROR 01-28 10:47:07.623 [forward_context.py:617] Traceback (most recent call last):");
        assert_eq!(
            (p.process, p.rest),
            (Some("1/8,TP1"), "ERROR 01-28 10:47:07.623 [forward_context.py:617] Traceback (most recent call last):")
        );
        // sglang_slime1177_ray_prefixed_eagle3_runtime.log
        let line = "[2025-12-18T16:24:02+08:00] leihaodi-qwen3-8b-rl-eagle3-20251218-162008s-3da56-cfcd2 >> (SGLangEngine pid=3111) \
                    [2025-12-18 08:24:01 TP7] Scheduler hit an exception: Traceback (most recent call last):";
        let p = strip_prefixes(line);
        assert_eq!(
            (p.process, p.rest),
            (Some("SGLangEngine"), "[2025-12-18 08:24:01 TP7] Scheduler hit an exception: Traceback (most recent call last):")
        );
        assert!(p.shipper_time.is_some());
        // Ray's driver-side `(pid=N)` and a Kubernetes node log (CRI format).
        let p = strip_prefixes("(pid=4242) INFO 09-18 12:03:11 [core.py:1] x");
        assert_eq!((p.process, p.rest), (Some("pid"), "INFO 09-18 12:03:11 [core.py:1] x"));
        let p = strip_prefixes("2026-05-15T19:00:54.123456789Z stdout F [2026-05-15 19:00:54 TP0] Load weight begin.");
        assert_eq!(p.rest, "[2026-05-15 19:00:54 TP0] Load weight begin.");
        // VllmWorker's rank form.
        let p = strip_prefixes("(VllmWorker rank=1 pid=77) INFO 09-18 12:03:11 [core.py:1] x");
        assert_eq!((p.process, p.rest), (Some("VllmWorker rank=1"), "INFO 09-18 12:03:11 [core.py:1] x"));
    }

    /// vllm_26711_dsv32_mtp_indexer_metadata_ansi.log: colour codes and `^M` pasted as text.
    #[test]
    fn pasted_control_characters_are_read_as_what_they_stand_for() {
        let raw = b"^[[1;36m(Worker_TP6 pid=100106)^[[0;0m ERROR 10-13 17:28:00 [v1/executor/multiproc_executor.py:694]     raise e^M";
        let mut segs = Vec::new();
        for_each_segment(raw, &mut |s| segs.push(s.to_string()));
        assert_eq!(segs, ["(Worker_TP6 pid=100106) ERROR 10-13 17:28:00 [v1/executor/multiproc_executor.py:694]     raise e"]);
        let mut segs = Vec::new();
        for_each_segment(b"    ^^^^^^^^^^", &mut |s| segs.push(s.to_string()));
        assert_eq!(segs, ["    ^^^^^^^^^^"]);
    }

    /// A traceback pasted where the newlines became spaces, and a tqdm bar that ran into the
    /// next record (sglang_8336_eagle3_draft_graph_capture_startup.log).
    #[test]
    fn finds_record_boundaries_in_collapsed_lines() {
        let line = "[2025-03-05 10:36:11 TP4] Scheduler hit an exception: Traceback (most recent call last): \
                    File \"/sgl/sglang/srt/managers/scheduler.py\", line 1816, in run_scheduler_process scheduler = Scheduler(";
        let at = next_record(line).unwrap();
        assert!(line[at..].starts_with(" File \"/sgl/sglang/srt/managers/scheduler.py\""), "{}", &line[at..]);
        let bar = "Capturing batches (bs=1 avail_mem=6.91 GB):  50%| | 1/2 [00:03<00:03,  3.33s/it][2025-07-28 11:04:21 TP1] Registering";
        assert_eq!(&bar[next_record(bar).unwrap()..], "[2025-07-28 11:04:21 TP1] Registering");
        let joined =
            "Capturing batches (bs=8 avail_mem=13.23 GB):   0%|    | 0/4 [00:00<?, ?it/s]Capturing batches (bs=4 avail_mem=13.21 GB)";
        assert_eq!(&joined[next_record(joined).unwrap()..], "Capturing batches (bs=4 avail_mem=13.21 GB)");
        let vllm = "INFO 09-18 12:03:11 [core.py:1] a (EngineCore_DP0 pid=9) INFO 09-18 12:03:12 [core.py:2] b";
        assert_eq!(&vllm[next_record(vllm).unwrap()..], "(EngineCore_DP0 pid=9) INFO 09-18 12:03:12 [core.py:2] b");
        for whole in [
            "  File \"/x/sglang/srt/managers/scheduler.py\", line 3207, in run_scheduler_process",
            "kill_process_tree called: parent_pid=1, include_parent=True, pid=1",
            "[2025-03-05 10:36:11 TP4] Load weight begin. avail mem=61.23 GB",
            "Capture cuda graph bs [1, 2, 4, 8]",
        ] {
            assert_eq!(next_record(whole), None, "{whole}");
        }
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
