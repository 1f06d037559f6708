//! The one key table: the input handler looks keys up here and the `?` overlay is printed from
//! it, so the help can never drift from what the keys do (kdash does the same).
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// A key as the table names it (crossterm's `KeyEvent` carries modifiers and kinds the table
/// does not care about).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Esc,
    Enter,
    Tab,
    BackTab,
    Backspace,
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
}

impl Key {
    /// None for key releases and keys no binding uses.
    pub fn from_event(ev: &KeyEvent) -> Option<Key> {
        // Windows terminals and the kitty protocol report releases too: act once per press.
        if ev.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
        Some(match ev.code {
            KeyCode::Char(c) if ctrl => Key::Ctrl(c.to_ascii_lowercase()),
            KeyCode::Char(c) => Key::Char(c),
            KeyCode::Esc => Key::Esc,
            KeyCode::Enter => Key::Enter,
            KeyCode::Tab => Key::Tab,
            KeyCode::BackTab => Key::BackTab,
            KeyCode::Backspace => Key::Backspace,
            KeyCode::Up => Key::Up,
            KeyCode::Down => Key::Down,
            KeyCode::PageUp => Key::PageUp,
            KeyCode::PageDown => Key::PageDown,
            KeyCode::Home => Key::Home,
            KeyCode::End => Key::End,
            _ => return None,
        })
    }

    /// The crossterm event that produces this key (tests and the help-table check use it).
    pub fn to_event(self) -> KeyEvent {
        let plain = |code| KeyEvent::new(code, KeyModifiers::NONE);
        match self {
            Key::Char(c) => plain(KeyCode::Char(c)),
            Key::Ctrl(c) => KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL),
            Key::Esc => plain(KeyCode::Esc),
            Key::Enter => plain(KeyCode::Enter),
            Key::Tab => plain(KeyCode::Tab),
            Key::BackTab => KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT),
            Key::Backspace => plain(KeyCode::Backspace),
            Key::Up => plain(KeyCode::Up),
            Key::Down => plain(KeyCode::Down),
            Key::PageUp => plain(KeyCode::PageUp),
            Key::PageDown => plain(KeyCode::PageDown),
            Key::Home => plain(KeyCode::Home),
            Key::End => plain(KeyCode::End),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// Close the help or the filter; quit when nothing is open.
    Back,
    Help,
    Up,
    Down,
    PageUp,
    PageDown,
    First,
    Last,
    NextPane,
    PrevPane,
    Zoom,
    SortNext,
    SortReverse,
    Filter,
    Pause,
    Slower,
    Faster,
}

pub struct Binding {
    pub keys: &'static [Key],
    /// How the help overlay and the footer spell the keys.
    pub shown: &'static str,
    pub action: Action,
    pub help: &'static str,
    /// The footer's word for it; empty: not in the footer (the help has it).
    pub short: &'static str,
}

/// Every key `top` understands outside the filter prompt, in the order the help lists them.
pub const KEYS: &[Binding] = &[
    Binding {
        keys: &[Key::Char('q'), Key::Ctrl('c')],
        shown: "q Ctrl-C",
        action: Action::Quit,
        help: "quit",
        short: "quit",
    },
    Binding {
        keys: &[Key::Esc],
        shown: "Esc",
        action: Action::Back,
        help: "close help / clear filter; quit otherwise",
        short: "",
    },
    Binding {
        keys: &[Key::Char('?')],
        shown: "?",
        action: Action::Help,
        help: "show / hide this help",
        short: "help",
    },
    Binding {
        keys: &[Key::Up, Key::Char('k')],
        shown: "Up k",
        action: Action::Up,
        help: "previous pool (or scroll the focused pane)",
        short: "",
    },
    Binding {
        keys: &[Key::Down, Key::Char('j')],
        shown: "Down j",
        action: Action::Down,
        help: "next pool (or scroll the focused pane)",
        short: "",
    },
    Binding {
        keys: &[Key::PageUp],
        shown: "PgUp",
        action: Action::PageUp,
        help: "ten pools up",
        short: "",
    },
    Binding {
        keys: &[Key::PageDown],
        shown: "PgDn",
        action: Action::PageDown,
        help: "ten pools down",
        short: "",
    },
    Binding {
        keys: &[Key::Home, Key::Char('g')],
        shown: "Home g",
        action: Action::First,
        help: "first pool (the worst one in health order)",
        short: "",
    },
    Binding {
        keys: &[Key::End, Key::Char('G')],
        shown: "End G",
        action: Action::Last,
        help: "last pool",
        short: "",
    },
    Binding {
        keys: &[Key::Tab],
        shown: "Tab",
        action: Action::NextPane,
        help: "next pane (pools, detail, devmem/gve)",
        short: "pane",
    },
    Binding {
        keys: &[Key::BackTab],
        shown: "S-Tab",
        action: Action::PrevPane,
        help: "previous pane",
        short: "",
    },
    Binding {
        keys: &[Key::Enter],
        shown: "Enter",
        action: Action::Zoom,
        help: "detail of the selected pool full screen / back",
        short: "detail",
    },
    Binding {
        keys: &[Key::Char('s')],
        shown: "s",
        action: Action::SortNext,
        help: "sort by the next column",
        short: "sort",
    },
    Binding {
        keys: &[Key::Char('r')],
        shown: "r",
        action: Action::SortReverse,
        help: "reverse the sort order",
        short: "",
    },
    Binding {
        keys: &[Key::Char('/')],
        shown: "/",
        action: Action::Filter,
        help: "filter pools by text (Enter keeps, Esc clears)",
        short: "filter",
    },
    Binding {
        keys: &[Key::Char(' '), Key::Char('f')],
        shown: "space f",
        action: Action::Pause,
        help: "pause / resume (the source stops advancing)",
        short: "pause",
    },
    Binding {
        keys: &[Key::Char('+'), Key::Char('=')],
        shown: "+",
        action: Action::Slower,
        help: "longer refresh interval",
        short: "",
    },
    Binding {
        keys: &[Key::Char('-')],
        shown: "-",
        action: Action::Faster,
        help: "shorter refresh interval",
        short: "",
    },
];

pub fn action_of(key: Key) -> Option<Action> {
    KEYS.iter()
        .find(|b| b.keys.contains(&key))
        .map(|b| b.action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_is_bound_twice() {
        let all: Vec<Key> = KEYS.iter().flat_map(|b| b.keys.iter().copied()).collect();
        for (i, k) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(k), "{k:?} bound twice");
        }
    }

    #[test]
    fn events_round_trip() {
        for b in KEYS {
            for k in b.keys {
                assert_eq!(Key::from_event(&k.to_event()), Some(*k));
            }
        }
    }
}
