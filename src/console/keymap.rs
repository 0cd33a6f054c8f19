//! Keys → `Action`s. The defaults can be changed per action in a TOML file
//! (`$XDG_CONFIG_HOME/specdeck/keymap.toml`, or `--keymap FILE`):
//!
//! ```toml
//! [bindings]
//! quit = ["q", "ctrl-c"]
//! relaunch = "ctrl-r"
//! ```
//!
//! An action named in the file gets exactly the keys given; a key the file takes from
//! another action's defaults is removed there. Help and the status bar are generated from
//! the resulting map, so they never disagree with it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde::Deserialize;
use toml::Spanned;
use tui_input::InputRequest;

use super::action::Action;
use super::text::{line_of_offset, located};
use crate::model::open::{read_text_capped, SETTINGS_LIMIT};

/// A key with its modifiers, normalised so that `L` and `shift-l` are the same chord.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyChord {
    pub code: KeyCode,
    pub modifiers: KeyModifiers,
}

impl KeyChord {
    pub fn new(code: KeyCode, modifiers: KeyModifiers) -> KeyChord {
        // Shift is already in the character (or in BackTab); terminals disagree on whether
        // they also report the modifier, so drop it.
        let modifiers = match code {
            KeyCode::Char(_) | KeyCode::BackTab => modifiers - KeyModifiers::SHIFT,
            _ => modifiers,
        };
        KeyChord { code, modifiers }
    }

    pub fn plain(c: char) -> KeyChord {
        KeyChord::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    pub fn from_event(ev: &KeyEvent) -> KeyChord {
        KeyChord::new(ev.code, ev.modifiers)
    }

    /// Parse `q`, `L`, `ctrl-c`, `alt-x`, `enter`, `tab`, `backtab`, `f5`, `pagedown`, ...
    pub fn parse(text: &str) -> Result<KeyChord, String> {
        let mut modifiers = KeyModifiers::NONE;
        let mut rest = text;
        loop {
            let lower = rest.to_ascii_lowercase();
            let (m, len) = if lower.starts_with("ctrl-") {
                (KeyModifiers::CONTROL, 5)
            } else if lower.starts_with("alt-") {
                (KeyModifiers::ALT, 4)
            } else if lower.starts_with("shift-") {
                (KeyModifiers::SHIFT, 6)
            } else {
                break;
            };
            if rest.len() == len {
                break; // a bare "ctrl-" is not a key
            }
            modifiers |= m;
            rest = &rest[len..];
        }
        let mut chars = rest.chars();
        let code = match (chars.next(), chars.next()) {
            (Some(c), None) if modifiers.contains(KeyModifiers::SHIFT) => KeyCode::Char(c.to_ascii_uppercase()),
            (Some(c), None) if modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) => KeyCode::Char(c.to_ascii_lowercase()),
            (Some(c), None) => KeyCode::Char(c),
            _ => named_key(&rest.to_ascii_lowercase()).ok_or_else(|| format!("unknown key {text:?}"))?,
        };
        let code = match (code, modifiers.contains(KeyModifiers::SHIFT)) {
            (KeyCode::Tab, true) => KeyCode::BackTab,
            (code, _) => code,
        };
        Ok(KeyChord::new(code, modifiers))
    }
}

fn named_key(name: &str) -> Option<KeyCode> {
    Some(match name {
        "enter" | "return" => KeyCode::Enter,
        "esc" | "escape" => KeyCode::Esc,
        "tab" => KeyCode::Tab,
        "backtab" => KeyCode::BackTab,
        "space" => KeyCode::Char(' '),
        "backspace" => KeyCode::Backspace,
        "delete" | "del" => KeyCode::Delete,
        "insert" => KeyCode::Insert,
        "up" => KeyCode::Up,
        "down" => KeyCode::Down,
        "left" => KeyCode::Left,
        "right" => KeyCode::Right,
        "home" => KeyCode::Home,
        "end" => KeyCode::End,
        "pageup" | "pgup" => KeyCode::PageUp,
        "pagedown" | "pgdn" => KeyCode::PageDown,
        f if f.starts_with('f') => KeyCode::F(f[1..].parse().ok().filter(|n| (1..=24).contains(n))?),
        _ => return None,
    })
}

impl fmt::Display for KeyChord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (m, name) in [(KeyModifiers::CONTROL, "ctrl-"), (KeyModifiers::ALT, "alt-"), (KeyModifiers::SHIFT, "shift-")] {
            if self.modifiers.contains(m) {
                f.write_str(name)?;
            }
        }
        match self.code {
            KeyCode::Char(' ') => f.write_str("space"),
            KeyCode::Char(c) => write!(f, "{c}"),
            KeyCode::Enter => f.write_str("enter"),
            KeyCode::Esc => f.write_str("esc"),
            KeyCode::Tab => f.write_str("tab"),
            KeyCode::BackTab => f.write_str("backtab"),
            KeyCode::Backspace => f.write_str("backspace"),
            KeyCode::Delete => f.write_str("delete"),
            KeyCode::Insert => f.write_str("insert"),
            KeyCode::Up => f.write_str("up"),
            KeyCode::Down => f.write_str("down"),
            KeyCode::Left => f.write_str("left"),
            KeyCode::Right => f.write_str("right"),
            KeyCode::Home => f.write_str("home"),
            KeyCode::End => f.write_str("end"),
            KeyCode::PageUp => f.write_str("pageup"),
            KeyCode::PageDown => f.write_str("pagedown"),
            KeyCode::F(n) => write!(f, "f{n}"),
            other => write!(f, "{other:?}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{}", located(file, *line, message))]
pub struct KeymapError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeymapFile {
    #[serde(default)]
    bindings: BTreeMap<Spanned<String>, Spanned<OneOrMany>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn keys(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(k) => vec![k.as_str()],
            OneOrMany::Many(ks) => ks.iter().map(String::as_str).collect(),
        }
    }
}

/// Whether a text field has the keyboard: then printable keys type instead of acting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputMode {
    Normal,
    Text,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Keymap {
    /// (action, its keys) in `Action::bindable()` order.
    bindings: Vec<(Action, Vec<KeyChord>)>,
    /// Set by `without_engine_keys`: Enter then only confirms the search.
    recording: bool,
}

impl Default for Keymap {
    fn default() -> Keymap {
        let keys = |names: &[&str]| names.iter().map(|n| KeyChord::parse(n).expect("default keys parse")).collect();
        let bindings = Action::bindable()
            .into_iter()
            .map(|action| {
                let chords = match &action {
                    Action::ApplyRemedy(n) => vec![KeyChord::plain(char::from(b'0' + n))],
                    Action::Quit => keys(&["q", "ctrl-c"]),
                    Action::Relaunch => keys(&["r"]),
                    Action::Submit => keys(&["enter"]),
                    Action::Cancel => keys(&["esc"]),
                    Action::ToggleHelp => keys(&["?"]),
                    Action::FocusNext => keys(&["tab"]),
                    Action::FocusPrev => keys(&["backtab"]),
                    Action::CycleLayout => keys(&["L"]),
                    Action::Search => keys(&["/"]),
                    Action::SearchNext => keys(&["n"]),
                    Action::SearchPrev => keys(&["N"]),
                    Action::ToggleFollow => keys(&["f"]),
                    Action::CycleLevel => keys(&["v"]),
                    Action::NextFinding => keys(&["]"]),
                    Action::PrevFinding => keys(&["["]),
                    Action::ScrollUp => keys(&["up", "k"]),
                    Action::ScrollDown => keys(&["down", "j"]),
                    Action::PageUp => keys(&["pageup"]),
                    Action::PageDown => keys(&["pagedown"]),
                    Action::ScrollTop => keys(&["home", "g"]),
                    Action::ScrollBottom => keys(&["end", "G"]),
                    Action::Copy => keys(&["y"]),
                    Action::EditPrompt => keys(&["i"]),
                    Action::ToggleChat => keys(&["c"]),
                    Action::Zoom => keys(&["z"]),
                    Action::ToggleWrap => keys(&["w"]),
                    Action::FilterIn => keys(&["&"]),
                    Action::FilterOut => keys(&["!"]),
                    Action::ToggleClock => keys(&["t"]),
                    Action::Edit(_) => Vec::new(),
                };
                (action, chords)
            })
            .collect();
        Keymap { bindings, recording: false }
    }
}

impl Keymap {
    /// The user's keymap file, if one exists: `$XDG_CONFIG_HOME/specdeck/keymap.toml`.
    pub fn default_path() -> Option<PathBuf> {
        dirs::config_dir().map(|d| d.join("specdeck").join("keymap.toml"))
    }

    /// `--keymap FILE` when given (it must exist), else the default path when present, else
    /// the built-in keys.
    pub fn load(explicit: Option<&Path>) -> Result<Keymap, KeymapError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => match Keymap::default_path().filter(|p| p.exists()) {
                Some(p) => p,
                None => return Ok(Keymap::default()),
            },
        };
        let file = path.display().to_string();
        let text = read_text_capped(&path, SETTINGS_LIMIT).map_err(|e| KeymapError {
            file: file.clone(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        Keymap::default().patched(&file, &text)
    }

    /// The defaults with the bindings of a keymap file applied.
    pub fn patched(mut self, file: &str, text: &str) -> Result<Keymap, KeymapError> {
        let err = |offset: usize, message: String| KeymapError { file: file.to_string(), line: line_of_offset(text, offset), message };
        let parsed: KeymapFile = toml::from_str(text).map_err(|e| {
            let offset = e.span().map(|s| s.start).unwrap_or(0);
            err(offset, e.message().to_string())
        })?;
        let mut claimed: HashMap<KeyChord, (String, usize)> = HashMap::new();
        let mut user: Vec<(Action, Vec<KeyChord>)> = Vec::new();
        for (name, keys) in &parsed.bindings {
            let action = Action::from_name(name.get_ref()).ok_or_else(|| {
                err(name.span().start, format!("unknown action {:?} (see `?` in the console for the list)", name.get_ref()))
            })?;
            let mut chords = Vec::new();
            for key in keys.get_ref().keys() {
                let chord = KeyChord::parse(key).map_err(|m| err(keys.span().start, m))?;
                if let Some((other, line)) = claimed.get(&chord) {
                    return Err(err(
                        keys.span().start,
                        format!("key {chord} is bound to both {other} (line {line}) and {}", name.get_ref()),
                    ));
                }
                claimed.insert(chord, (name.get_ref().clone(), line_of_offset(text, keys.span().start)));
                chords.push(chord);
            }
            user.push((action, chords));
        }
        for (action, chords) in &mut self.bindings {
            match user.iter().find(|(a, _)| a == action) {
                Some((_, mine)) => *chords = mine.clone(),
                None => chords.retain(|c| !claimed.contains_key(c)),
            }
        }
        Ok(self)
    }

    /// This keymap less the keys that act on an engine: a replay offers no fix or relaunch,
    /// neither in the hints nor in the help, and its keys do nothing.
    pub fn without_engine_keys(mut self) -> Keymap {
        self.bindings.retain(|(action, _)| !action.acts_on_engine());
        self.recording = true;
        self
    }

    pub fn keys_for(&self, action: &Action) -> &[KeyChord] {
        self.bindings.iter().find(|(a, _)| a == action).map(|(_, k)| k.as_slice()).unwrap_or(&[])
    }

    pub fn action_for(&self, chord: KeyChord) -> Option<Action> {
        self.bindings.iter().find(|(_, keys)| keys.contains(&chord)).map(|(a, _)| a.clone())
    }

    /// The action for a key press, given whether a text field has the keyboard.
    pub fn map_key(&self, mode: InputMode, key: &KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if mode == InputMode::Text {
            if let Some(edit) = text_edit(key) {
                return Some(Action::Edit(edit));
            }
        }
        self.action_for(KeyChord::from_event(key))
    }

    /// (keys, description) for every action, for the help pane. The remedy keys share
    /// one row while they are the digits 1–9.
    pub fn help_rows(&self) -> Vec<(String, String)> {
        let digits = (1..=9u8).all(|n| self.keys_for(&Action::ApplyRemedy(n)) == [KeyChord::plain(char::from(b'0' + n))]);
        let mut rows = Vec::new();
        for (action, keys) in &self.bindings {
            match action {
                Action::ApplyRemedy(1) if digits => {
                    rows.push(("1-9".to_string(), "apply that remedy of the diagnosis and relaunch".to_string()))
                }
                Action::ApplyRemedy(_) if digits => {}
                Action::Submit if self.recording => rows.push((join_keys(keys), "confirm the search".to_string())),
                Action::Cancel if self.recording => rows.push((join_keys(keys), "close help / cancel the search".to_string())),
                _ => {
                    let keys = if keys.is_empty() { "(unbound)".to_string() } else { join_keys(keys) };
                    rows.push((keys, action.describe()));
                }
            }
        }
        rows
    }

    /// The first key of an action that works in `mode` (in a text field, printable keys
    /// type), or None.
    pub fn hint_in(&self, mode: InputMode, action: &Action) -> Option<String> {
        let typed = |chord: &&KeyChord| {
            mode == InputMode::Text
                && matches!(chord.code, KeyCode::Char(_))
                && !chord.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT)
        };
        self.keys_for(action).iter().find(|c| !typed(c)).map(ToString::to_string)
    }

    /// The first key of an action, for hints (`?`), or None when unbound.
    pub fn hint(&self, action: &Action) -> Option<String> {
        self.keys_for(action).first().map(ToString::to_string)
    }
}

fn join_keys(keys: &[KeyChord]) -> String {
    keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The fixed editing keys of a text field: printable characters type; the usual line
/// editing keys edit. Anything else goes through the keymap (Enter, Esc, Tab, Ctrl-C...).
fn text_edit(key: &KeyEvent) -> Option<InputRequest> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    Some(match key.code {
        KeyCode::Char(c) if !ctrl && !alt => InputRequest::InsertChar(c),
        KeyCode::Char('w') if ctrl => InputRequest::DeletePrevWord,
        KeyCode::Char('u') if ctrl => InputRequest::DeleteLine,
        KeyCode::Backspace => InputRequest::DeletePrevChar,
        KeyCode::Delete => InputRequest::DeleteNextChar,
        KeyCode::Left => InputRequest::GoToPrevChar,
        KeyCode::Right => InputRequest::GoToNextChar,
        KeyCode::Home => InputRequest::GoToStart,
        KeyCode::End => InputRequest::GoToEnd,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, modifiers)
    }

    #[test]
    fn chords_parse_and_print() {
        for (text, shown) in [
            ("q", "q"),
            ("ctrl-c", "ctrl-c"),
            ("Ctrl-C", "ctrl-c"),
            ("L", "L"),
            ("shift-l", "L"),
            ("shift-tab", "backtab"),
            ("pgdn", "pagedown"),
            ("f5", "f5"),
            ("space", "space"),
            ("alt-enter", "alt-enter"),
        ] {
            assert_eq!(KeyChord::parse(text).unwrap().to_string(), shown, "{text}");
        }
        assert_eq!(KeyChord::parse("f99").unwrap_err(), "unknown key \"f99\"");
        assert_eq!(KeyChord::parse("hyper-x").unwrap_err(), "unknown key \"hyper-x\"");
    }

    #[test]
    fn terminal_shift_reports_match_the_plain_chord() {
        let km = Keymap::default();
        assert_eq!(km.map_key(InputMode::Normal, &press(KeyCode::Char('L'), KeyModifiers::SHIFT)), Some(Action::CycleLayout));
        assert_eq!(km.map_key(InputMode::Normal, &press(KeyCode::BackTab, KeyModifiers::SHIFT)), Some(Action::FocusPrev));
        assert_eq!(km.map_key(InputMode::Normal, &press(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Action::Quit));
        assert_eq!(km.map_key(InputMode::Normal, &press(KeyCode::Char('3'), KeyModifiers::NONE)), Some(Action::ApplyRemedy(3)));
    }

    #[test]
    fn text_mode_types_printable_keys_but_keeps_ctrl_c_and_enter() {
        let km = Keymap::default();
        let q = press(KeyCode::Char('q'), KeyModifiers::NONE);
        assert_eq!(km.map_key(InputMode::Text, &q), Some(Action::Edit(InputRequest::InsertChar('q'))));
        assert_eq!(km.map_key(InputMode::Normal, &q), Some(Action::Quit));
        assert_eq!(km.map_key(InputMode::Text, &press(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Action::Quit));
        assert_eq!(km.map_key(InputMode::Text, &press(KeyCode::Enter, KeyModifiers::NONE)), Some(Action::Submit));
        assert_eq!(km.map_key(InputMode::Text, &press(KeyCode::Tab, KeyModifiers::NONE)), Some(Action::FocusNext));
        assert_eq!(km.hint_in(InputMode::Text, &Action::Quit).as_deref(), Some("ctrl-c"), "q types in a text field");
        assert_eq!(km.hint_in(InputMode::Normal, &Action::Quit).as_deref(), Some("q"));
        assert_eq!(
            km.map_key(InputMode::Text, &press(KeyCode::Backspace, KeyModifiers::NONE)),
            Some(Action::Edit(InputRequest::DeletePrevChar))
        );
    }

    #[test]
    fn a_keymap_file_rebinds_and_steals_keys() {
        let text = "[bindings]\nrelaunch = \"ctrl-r\"\nfollow = [\"F\", \"r\"]\n";
        let km = Keymap::default().patched("keymap.toml", text).unwrap();
        assert_eq!(km.action_for(KeyChord::parse("ctrl-r").unwrap()), Some(Action::Relaunch));
        assert_eq!(km.action_for(KeyChord::plain('r')), Some(Action::ToggleFollow));
        assert_eq!(km.action_for(KeyChord::plain('f')), None);
        assert_eq!(km.keys_for(&Action::Quit).len(), 2);
        let help = km.help_rows();
        assert!(help.contains(&("ctrl-r".to_string(), "relaunch with the current spec".to_string())), "{help:?}");
        assert_eq!(help.len(), 30);
        assert_eq!(help[2], ("1-9".to_string(), "apply that remedy of the diagnosis and relaunch".to_string()));
        let moved = Keymap::default().patched("k.toml", "[bindings]\nremedy-1 = \"F1\"\n").unwrap().help_rows();
        assert_eq!(moved.len(), 38);
        assert_eq!(moved[2].0, "f1");
    }

    #[test]
    fn keymap_errors_name_the_file_and_line() {
        let err = Keymap::default().patched("k.toml", "[bindings]\nquit = \"q\"\nrelanch = \"r\"\n").unwrap_err();
        assert_eq!(err.to_string(), "k.toml:3: unknown action \"relanch\" (see `?` in the console for the list)");
        let err = Keymap::default().patched("k.toml", "[bindings]\n\nquit = \"hyper-q\"\n").unwrap_err();
        assert_eq!(err.to_string(), "k.toml:3: unknown key \"hyper-q\"");
        let err = Keymap::default().patched("k.toml", "[bindings]\nquit = \"x\"\nrelaunch = \"x\"\n").unwrap_err();
        assert_eq!(err.to_string(), "k.toml:3: key x is bound to both quit (line 2) and relaunch");
        let err = Keymap::default().patched("k.toml", "[bindings]\nquit = \n").unwrap_err();
        assert!(err.to_string().starts_with("k.toml:2: "), "{err}");
        let err = Keymap::default().patched("k.toml", "[keys]\nquit = \"q\"\n").unwrap_err();
        assert!(err.to_string().starts_with("k.toml:1: unknown field `keys`"), "{err}");
    }
}
