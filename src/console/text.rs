//! Small text helpers shared by the panes and the config readers.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

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

/// Word wrap for prose and command lines: rows of at most `width` columns (8 at least),
/// broken at spaces. A word wider than a row (a path, an env-var name) goes on rows of its
/// own, broken after a `_ / - . , = :` where one fits and cut only where none does.
pub fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let width = width.max(8);
    let mut rows = Vec::new();
    let mut row = String::new();
    for word in text.split_whitespace() {
        let needed = if row.is_empty() { word.width() } else { row.width() + 1 + word.width() };
        if needed <= width {
            if !row.is_empty() {
                row.push(' ');
            }
            row.push_str(word);
            continue;
        }
        if !row.is_empty() {
            rows.push(std::mem::take(&mut row));
        }
        let mut rest = word;
        while rest.width() > width {
            let cut = break_point(rest, width);
            rows.push(rest[..cut].to_string());
            rest = &rest[cut..];
        }
        row = rest.to_string();
    }
    if !row.is_empty() {
        rows.push(row);
    }
    rows
}

/// Where to break a word wider than `width`: after the last separator that fits, else at
/// the width.
fn break_point(word: &str, width: usize) -> usize {
    let mut used = 0;
    let mut fits = 0;
    let mut after_separator = None;
    for (i, c) in word.char_indices() {
        used += c.width().unwrap_or(0);
        if used > width {
            break;
        }
        fits = i + c.len_utf8();
        if "_/-.,=:".contains(c) {
            after_separator = Some(fits);
        }
    }
    after_separator.unwrap_or(fits.max(word.chars().next().map_or(0, char::len_utf8)))
}

/// Cut a string to at most `width` columns, ending with `…` when cut.
pub fn truncate(text: &str, width: usize) -> String {
    if text.width() <= width {
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
    fn words_wrap_whole_and_long_tokens_break_after_a_separator() {
        assert_eq!(wrap_words("the quick brown fox", 10), ["the quick", "brown fox"]);
        assert_eq!(wrap_words("abcdefghijkl xy", 8), ["abcdefgh", "ijkl xy"]);
        assert_eq!(
            wrap_words("set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 now", 20),
            ["set", "SGLANG_ALLOW_", "OVERWRITE_LONGER_", "CONTEXT_LEN=1 now"]
        );
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello world", 6), "hello…");
    }
}
