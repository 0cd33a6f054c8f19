//! Styles. The default theme uses only the 16 ANSI colours, which every terminal and SSH
//! session renders. With `--color never` (or `NO_COLOR` set), colours are dropped and the modifiers (bold,
//! reversed, underlined) carry the meaning alone, so nothing depends on colour.

use ratatui::style::{Color, Modifier, Style};

use crate::event::{LogLevel, PhaseState};
use crate::finding_text::ColorChoice;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// The theme `--color` asks for; the console always draws on a terminal, so `auto`
    /// colours unless `NO_COLOR` is set to a non-empty value (no-color.org).
    pub fn for_choice(choice: ColorChoice) -> Theme {
        Theme { color: choice.colors(true) }
    }

    pub fn colored() -> Theme {
        Theme { color: true }
    }

    pub fn monochrome() -> Theme {
        Theme { color: false }
    }

    fn fg(&self, color: Color) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }

    pub fn border(&self, focused: bool) -> Style {
        if focused {
            self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
        } else {
            self.fg(Color::DarkGray)
        }
    }

    pub fn title(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    pub fn dim(&self) -> Style {
        self.fg(Color::DarkGray)
    }

    pub fn phase(&self, state: Option<PhaseState>) -> Style {
        match state {
            None => self.dim(),
            Some(PhaseState::Started) => self.fg(Color::Yellow).add_modifier(Modifier::BOLD),
            Some(PhaseState::Done) => self.fg(Color::Green),
            Some(PhaseState::Failed) => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            Some(PhaseState::Skipped) => self.dim(),
        }
    }

    pub fn gauge(&self) -> Style {
        self.fg(Color::Blue)
    }

    pub fn error(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub fn warning(&self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    pub fn good(&self) -> Style {
        self.fg(Color::Green).add_modifier(Modifier::BOLD)
    }

    pub fn level(&self, level: LogLevel) -> Style {
        match level {
            LogLevel::Debug => self.dim(),
            LogLevel::Info => Style::new(),
            LogLevel::Warning => self.warning(),
            LogLevel::Error => self.error(),
        }
    }

    /// A config line holding an evidence key.
    pub fn evidence(&self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::REVERSED | Modifier::BOLD)
    }

    pub fn search_match(&self) -> Style {
        self.fg(Color::Magenta).add_modifier(Modifier::REVERSED)
    }

    /// Draft tokens the target accepted: underlined as well as coloured, so they stay
    /// distinct without colour.
    pub fn drafted_token(&self) -> Style {
        self.fg(Color::Green).add_modifier(Modifier::UNDERLINED)
    }

    pub fn target_token(&self) -> Style {
        Style::new()
    }

    pub fn key(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    pub fn cursor(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monochrome_keeps_modifiers_and_drops_colours() {
        let t = Theme::monochrome();
        assert_eq!(t.evidence(), Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD));
        assert_eq!(t.drafted_token(), Style::new().add_modifier(Modifier::UNDERLINED));
        assert_eq!(t.border(false), Style::new());
        let c = Theme::colored();
        assert_eq!(c.drafted_token().fg, Some(Color::Green));
    }

    #[test]
    fn default_theme_uses_only_the_16_ansi_colours() {
        let t = Theme::colored();
        let styles = [
            t.border(true),
            t.border(false),
            t.dim(),
            t.gauge(),
            t.error(),
            t.warning(),
            t.good(),
            t.evidence(),
            t.search_match(),
            t.drafted_token(),
            t.key(),
            t.phase(Some(PhaseState::Started)),
        ];
        for s in styles {
            for c in [s.fg, s.bg].into_iter().flatten() {
                assert!(!matches!(c, Color::Rgb(..) | Color::Indexed(_)), "{c:?}");
            }
        }
    }
}
