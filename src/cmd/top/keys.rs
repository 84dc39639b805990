//! What a key press does in `jetsink top`'s live view: cycle the sort, type a filter,
//! quit. Kept apart from the terminal so each key is tested without one. Pure.

use super::view::SortKey;

/// The keys the view reacts to, whatever the terminal library calls them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Ctrl-C (raw mode delivers it as a key, not as SIGINT).
    CtrlC,
}

/// The view's settings that keys change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controls {
    /// The sort key.
    pub sort: SortKey,
    /// The filter applied.
    pub filter: String,
    /// The filter being typed after `/`, until Enter applies it or Esc drops it.
    pub editing: Option<String>,
    /// Whether the view should end.
    pub quit: bool,
}

impl Controls {
    /// The settings the flags start with.
    pub fn new(sort: SortKey, filter: String) -> Controls {
        Controls {
            sort,
            filter,
            editing: None,
            quit: false,
        }
    }

    /// Applies one key press.
    pub fn press(&mut self, key: Key) {
        if key == Key::CtrlC {
            self.quit = true;
            return;
        }
        if let Some(text) = &mut self.editing {
            match key {
                Key::Char(c) if !c.is_control() => text.push(c),
                Key::Backspace => {
                    text.pop();
                }
                Key::Enter => self.filter = self.editing.take().unwrap_or_default(),
                Key::Esc => self.editing = None,
                _ => {}
            }
            return;
        }
        match key {
            Key::Char('q') | Key::Char('Q') => self.quit = true,
            Key::Char('s') | Key::Char('S') => self.sort = self.sort.next(),
            Key::Char('/') => self.editing = Some(String::new()),
            Key::Esc => self.filter.clear(),
            _ => {}
        }
    }

    /// The filter to show rows by: the one being typed, live, else the one applied.
    pub fn shown_filter(&self) -> &str {
        self.editing.as_deref().unwrap_or(&self.filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(c: &mut Controls, text: &str) {
        for ch in text.chars() {
            c.press(Key::Char(ch));
        }
    }

    #[test]
    fn q_and_ctrl_c_quit_but_q_inside_a_filter_is_text() {
        let mut c = Controls::new(SortKey::Name, String::new());
        c.press(Key::Char('/'));
        typed(&mut c, "sq");
        assert!(!c.quit);
        assert_eq!(c.sort, SortKey::Name, "s inside a filter does not sort");
        assert_eq!(c.shown_filter(), "sq");
        c.press(Key::CtrlC);
        assert!(c.quit, "Ctrl-C quits even while typing");
        let mut c = Controls::new(SortKey::Name, String::new());
        c.press(Key::Char('q'));
        assert!(c.quit);
    }

    #[test]
    fn a_filter_is_typed_applied_with_enter_dropped_with_esc_and_cleared() {
        let mut c = Controls::new(SortKey::Rate, "old".into());
        c.press(Key::Char('/'));
        typed(&mut c, "ordx");
        c.press(Key::Backspace);
        assert_eq!(c.shown_filter(), "ord");
        c.press(Key::Enter);
        assert_eq!((c.filter.as_str(), c.editing.is_none()), ("ord", true));
        c.press(Key::Char('/'));
        typed(&mut c, "zzz");
        c.press(Key::Esc);
        assert_eq!(
            c.shown_filter(),
            "ord",
            "Esc while typing keeps the old filter"
        );
        c.press(Key::Esc);
        assert_eq!(c.shown_filter(), "", "Esc outside clears it");
    }

    #[test]
    fn s_cycles_the_sort_key() {
        let mut c = Controls::new(SortKey::Name, String::new());
        c.press(Key::Char('s'));
        assert_eq!(c.sort, SortKey::Rate);
        c.press(Key::Char('S'));
        assert_eq!(c.sort, SortKey::Pending);
    }
}
