//! Small text helpers shared by the panes and the config readers.

use unicode_width::UnicodeWidthChar;

/// The 1-based line of a byte offset in `text`.
pub fn line_of_offset(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// `file:line: message`, or `file: message` when no line applies (line 0).
pub fn located(file: &str, line: usize, message: &str) -> String {
    if line == 0 {
        format!("{file}: {message}")
    } else {
        format!("{file}:{line}: {message}")
    }
}

/// Split styled runs of text into rows of at most `width` columns, breaking at any
/// character (generated text has no reliable word boundaries) and at newlines. Each row is
/// a list of (text, tag) pieces, so callers keep per-run styling across breaks.
pub fn wrap_runs<T: Copy + PartialEq>(runs: impl IntoIterator<Item = (impl AsRef<str>, T)>, width: usize) -> Vec<Vec<(String, T)>> {
    let width = width.max(1);
    let mut rows: Vec<Vec<(String, T)>> = vec![Vec::new()];
    let mut used = 0;
    for (text, tag) in runs {
        for c in text.as_ref().chars() {
            if c == '\n' {
                rows.push(Vec::new());
                used = 0;
                continue;
            }
            let w = c.width().unwrap_or(0);
            if used + w > width {
                rows.push(Vec::new());
                used = 0;
            }
            let row = rows.last_mut().expect("rows is never empty");
            match row.last_mut() {
                Some((s, t)) if *t == tag => s.push(c),
                _ => row.push((c.to_string(), tag)),
            }
            used += w;
        }
    }
    rows
}

/// Cut a string to at most `width` columns, ending with `…` when cut.
pub fn truncate(text: &str, width: usize) -> String {
    if unicode_width::UnicodeWidthStr::width(text) <= width {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_lines() {
        let t = "a\nbb\nccc";
        assert_eq!(line_of_offset(t, 0), 1);
        assert_eq!(line_of_offset(t, 2), 2);
        assert_eq!(line_of_offset(t, 5), 3);
        assert_eq!(line_of_offset(t, 100), 3);
    }

    #[test]
    fn runs_wrap_at_width_and_keep_tags() {
        let rows = wrap_runs([("abc", 1u8), ("de\nf", 2u8)], 4);
        assert_eq!(rows, vec![vec![("abc".to_string(), 1), ("d".to_string(), 2)], vec![("e".to_string(), 2)], vec![("f".to_string(), 2)],]);
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello world", 6), "hello…");
    }
}
