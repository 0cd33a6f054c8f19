//! Excerpts of the files a finding cites: the line holding each evidence key, with a little
//! context, as the Diagnosis pane shows them side by side.

use jsonc_parser::ast::Value;
use jsonc_parser::common::Ranged;
use jsonc_parser::{parse_to_ast, CollectOptions, ParseOptions};

use super::text::line_of_offset;

/// The 1-based line where a JSON pointer's key (or array element) starts, or `None` when
/// the text is not JSON or the pointer does not resolve.
pub fn pointer_line(text: &str, pointer: &str) -> Option<usize> {
    let parsed = parse_to_ast(text, &CollectOptions::default(), &ParseOptions::default()).ok()?;
    let mut value = parsed.value?;
    let mut at = value.start();
    if pointer.is_empty() {
        return Some(line_of_offset(text, at));
    }
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        value = match value {
            Value::Object(obj) => {
                let prop = obj.properties.into_iter().find(|p| p.name.as_str() == token)?;
                at = prop.range.start;
                prop.value
            }
            Value::Array(arr) => {
                let element = arr.elements.into_iter().nth(token.parse().ok()?)?;
                at = element.start();
                element
            }
            _ => return None,
        };
    }
    Some(line_of_offset(text, at))
}

/// The line an evidence key points at: a JSON pointer (`/text_config/vocab_size`) in a JSON
/// file, or `line N` in a log.
pub fn evidence_line(text: &str, key: &str) -> Option<usize> {
    match key.strip_prefix("line ") {
        Some(n) => n.trim().parse().ok().filter(|&n| n >= 1 && n <= text.lines().count()),
        None => pointer_line(text, key),
    }
}

/// Which lines to show, at most `height` rows, so that every marked line is visible with as
/// much context around each as fits. `None` rows stand for skipped lines (drawn as `…`).
pub fn window(total: usize, marked: &[usize], height: usize) -> Vec<Option<usize>> {
    let marked: Vec<usize> = marked.iter().copied().filter(|&l| l >= 1 && l <= total).collect();
    if height == 0 || total == 0 {
        return Vec::new();
    }
    if marked.is_empty() {
        return (1..=total.min(height)).map(Some).collect();
    }
    let rows_for = |radius: usize| -> Vec<Option<usize>> {
        let mut lines: Vec<usize> = marked.iter().flat_map(|&m| m.saturating_sub(radius).max(1)..=(m + radius).min(total)).collect();
        lines.sort_unstable();
        lines.dedup();
        let mut rows = Vec::new();
        for (i, &line) in lines.iter().enumerate() {
            if i > 0 && line != lines[i - 1] + 1 {
                rows.push(None);
            }
            rows.push(Some(line));
        }
        rows
    };
    let mut best = rows_for(0);
    for radius in 1..total {
        let rows = rows_for(radius);
        if rows.len() > height || rows.len() == best.len() {
            break;
        }
        best = rows;
    }
    // Too many marked lines for the height: keep the first ones.
    best.truncate(height);
    while best.last() == Some(&None) {
        best.pop();
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 256,
  "text_config": {
    "max_position_embeddings": 262144,
    "a/b": 1
  },
  "max_position_embeddings": 4096
}"#;

    #[test]
    fn pointers_resolve_to_the_key_line() {
        assert_eq!(pointer_line(CONFIG, "/hidden_size"), Some(3));
        assert_eq!(pointer_line(CONFIG, "/text_config/max_position_embeddings"), Some(5));
        assert_eq!(pointer_line(CONFIG, "/max_position_embeddings"), Some(8));
        assert_eq!(pointer_line(CONFIG, "/text_config/a~1b"), Some(6));
        assert_eq!(pointer_line(CONFIG, "/architectures/0"), Some(2));
        assert_eq!(pointer_line(CONFIG, "/vocab_size"), None);
        assert_eq!(pointer_line(CONFIG, "/architectures/7"), None);
        assert_eq!(pointer_line("not json", "/x"), None);
    }

    #[test]
    fn log_evidence_uses_line_numbers() {
        assert_eq!(evidence_line("a\nb\nc\n", "line 2"), Some(2));
        assert_eq!(evidence_line("a\nb\nc\n", "line 9"), None);
    }

    #[test]
    fn windows_keep_marked_lines_with_context() {
        assert_eq!(window(10, &[5], 3), vec![Some(4), Some(5), Some(6)]);
        assert_eq!(window(10, &[1], 3), vec![Some(1), Some(2), Some(3)]);
        assert_eq!(window(40, &[5, 30], 7), vec![Some(4), Some(5), Some(6), None, Some(29), Some(30), Some(31)]);
        assert_eq!(window(40, &[5, 6], 4), vec![Some(4), Some(5), Some(6), Some(7)]);
        assert_eq!(window(3, &[], 10), vec![Some(1), Some(2), Some(3)]);
        assert_eq!(window(40, &[5, 30], 2), vec![Some(5)]);
    }
}
