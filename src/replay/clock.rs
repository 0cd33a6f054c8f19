//! Log timestamps to stream time: seconds since the first timestamp of the log.
//!
//! SGLang writes `YYYY-MM-DD HH:MM:SS[.mmm]` (local time), vLLM `MM-DD HH:MM:SS[.fff]`
//! (no year), Kubernetes `YYYY-MM-DDTHH:MM:SS[.fffffffff]Z` (UTC). The digits are read by
//! hand: this runs on every line of multi-gigabyte logs.

/// Where a stream's times come from. A stream keeps the first kind it sees: mixing a UTC
/// Kubernetes stamp with SGLang's local-time stamp would make time jump by the zone offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockSource {
    /// The engine's own stamp, with a year.
    Engine,
    /// The engine's own stamp without a year (vLLM).
    EngineYearless,
    /// A log shipper's RFC 3339 stamp in front of the line.
    Shipper,
}

const DAY: f64 = 86_400.0;
/// The year assumed for year-less stamps; a leap year, so that `02-29` is valid.
const YEARLESS_YEAR: i64 = 2000;

fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let bytes = s.get(at..at + n)?;
    bytes.iter().try_fold(0i64, |acc, &b| b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0')))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `HH:MM:SS` then an optional `.fraction`; returns seconds into the day and bytes read.
fn time_of_day(s: &[u8], at: usize) -> Option<(f64, usize)> {
    let (h, mi, se) = (digits(s, at, 2)?, digits(s, at + 3, 2)?, digits(s, at + 6, 2)?);
    if s[at + 2] != b':' || s[at + 5] != b':' || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut secs = (h * 3600 + mi * 60 + se) as f64;
    let mut end = at + 8;
    if s.get(end) == Some(&b'.') || s.get(end) == Some(&b',') {
        let mut scale = 0.1;
        end += 1;
        while let Some(&b) = s.get(end).filter(|b| b.is_ascii_digit()) {
            secs += f64::from(b - b'0') * scale;
            scale /= 10.0;
            end += 1;
        }
    }
    Some((secs, end))
}

fn month_day(s: &[u8], at: usize) -> Option<(i64, i64)> {
    let (m, d) = (digits(s, at, 2)?, digits(s, at + 3, 2)?);
    (s[at + 2] == b'-' && (1..=12).contains(&m) && (1..=31).contains(&d)).then_some((m, d))
}

/// `YYYY-MM-DD HH:MM:SS[.fff]` (or with `T` between date and time) at the start of `s`:
/// seconds since 1970 (zone-less) and the number of bytes read.
pub fn parse_datetime(s: &[u8]) -> Option<(f64, usize)> {
    let year = digits(s, 0, 4)?;
    if s.get(4) != Some(&b'-') || !matches!(s.get(10), Some(b' ' | b'T')) {
        return None;
    }
    let (m, d) = month_day(s, 5)?;
    let (secs, end) = time_of_day(s, 11)?;
    Some((days_from_civil(year, m, d) as f64 * DAY + secs, end))
}

/// `MM-DD HH:MM:SS[.fff]` at the start of `s` (vLLM), in a fixed leap year.
pub fn parse_month_day_time(s: &[u8]) -> Option<(f64, usize)> {
    let (m, d) = month_day(s, 0)?;
    if s.get(5) != Some(&b' ') {
        return None;
    }
    let (secs, end) = time_of_day(s, 6)?;
    Some((days_from_civil(YEARLESS_YEAR, m, d) as f64 * DAY + secs, end))
}

/// Turns raw stamps into stream time. Lines without a stamp keep the previous time, and time
/// never runs backwards (ranks interleave lines stamped a second apart).
#[derive(Debug, Default)]
pub struct Clock {
    source: Option<ClockSource>,
    first: Option<f64>,
    last_raw: f64,
    /// Years added to year-less stamps after a New Year's Eve in the log.
    wrap: f64,
    now: f64,
}

impl Clock {
    /// Takes a stamp of `source`; stamps of another source than the stream's are ignored.
    pub fn observe(&mut self, source: ClockSource, raw: f64) {
        if *self.source.get_or_insert(source) != source {
            return;
        }
        let mut raw = raw + self.wrap;
        if source == ClockSource::EngineYearless && raw < self.last_raw - 30.0 * DAY {
            self.wrap += 366.0 * DAY;
            raw += 366.0 * DAY;
        }
        self.last_raw = raw;
        let first = *self.first.get_or_insert(raw);
        self.now = self.now.max(raw - first);
    }

    /// Seconds since the stream's first stamp (0 before any stamp).
    pub fn now(&self) -> f64 {
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_three_stamp_shapes() {
        let (a, n) = parse_datetime(b"2025-04-16 14:22:53 TP3] x").unwrap();
        assert_eq!(n, 19);
        let (b, _) = parse_datetime(b"2025-04-16 14:22:54.250] x").unwrap();
        assert!((b - a - 1.25).abs() < 1e-6);
        let (k, n) = parse_datetime(b"2026-05-15T19:00:54.123456789Z rest").unwrap();
        assert_eq!(&b"2026-05-15T19:00:54.123456789Z rest"[n..n + 1], b"Z");
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert!((k % DAY - (19.0 * 3600.0 + 54.123456789)).abs() < 1e-3);
        let (v, n) = parse_month_day_time(b"09-18 12:03:11 [core.py:1]").unwrap();
        assert_eq!(n, 14);
        assert_eq!(v % DAY, 12.0 * 3600.0 + 3.0 * 60.0 + 11.0);
    }

    #[test]
    fn rejects_look_alikes() {
        assert_eq!(parse_datetime(b"2025-13-16 14:22:53"), None);
        assert_eq!(parse_datetime(b"2025-04-16 14:2"), None);
        assert_eq!(parse_datetime(b"[2025-04-16 14:22:53]"), None);
        assert_eq!(parse_month_day_time(b"09-18 25:03:11"), None);
        assert_eq!(parse_month_day_time(b"Loading"), None);
    }

    #[test]
    fn clock_is_relative_monotonic_and_single_sourced() {
        let mut c = Clock::default();
        assert_eq!(c.now(), 0.0);
        c.observe(ClockSource::Engine, 1000.0);
        c.observe(ClockSource::Engine, 1005.0);
        c.observe(ClockSource::Engine, 1004.0);
        assert_eq!(c.now(), 5.0);
        c.observe(ClockSource::Shipper, 9999.0);
        assert_eq!(c.now(), 5.0);
    }

    #[test]
    fn yearless_stamps_survive_new_year() {
        let mut c = Clock::default();
        let (dec, _) = parse_month_day_time(b"12-31 23:59:59").unwrap();
        let (jan, _) = parse_month_day_time(b"01-01 00:00:01").unwrap();
        c.observe(ClockSource::EngineYearless, dec);
        c.observe(ClockSource::EngineYearless, jan);
        assert_eq!(c.now(), 2.0);
    }
}
