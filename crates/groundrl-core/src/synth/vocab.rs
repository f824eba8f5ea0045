//! The words on the screenshots. Words come in groups of look-alikes ("Save", "Save as", "Save all"):
//! the distractor knob picks from a group already on screen, so the model must read the whole label.
//! No text appears twice on one screenshot, which keeps every text instruction unambiguous.

use std::collections::HashSet;

use super::random::Draws;
use crate::rng::SplitMix64;

/// A list of look-alike groups.
pub type Words = &'static [&'static [&'static str]];

pub const BUTTONS: Words = &[
    &["Save", "Save as", "Save all"],
    &["Open", "Open file", "Reopen"],
    &["Cancel", "Cancel all"],
    &["OK"],
    &["Apply", "Apply all"],
    &["Close", "Close all", "Close tab"],
    &["Print", "Print preview"],
    &["Delete", "Delete all", "Undelete"],
    &["Send", "Resend", "Send later"],
    &["Search", "Search all"],
    &["Export", "Export PDF", "Import"],
    &["Copy", "Copy link", "Copy path"],
    &["Next", "Previous"],
    &["Refresh", "Reset", "Restore"],
    &["Share", "Share link"],
    &["Upload", "Download"],
    &["Add", "Add new", "Add row"],
    &["Remove", "Remove all"],
    &["Sign in", "Sign up", "Sign out"],
    &["Run", "Rerun", "Run all"],
];

pub const TABS: Words = &[
    &["General", "General info"],
    &["Advanced"],
    &["Display", "Displays"],
    &["Sound", "Sounds"],
    &["Network", "Networks"],
    &["Privacy"],
    &["Accounts", "Account"],
    &["Updates", "Update"],
    &["Home"],
    &["Review", "Reviews"],
    &["History"],
    &["Security"],
];

pub const MENUS: Words = &[
    &["File", "Files"],
    &["Edit", "Editor"],
    &["View", "Views"],
    &["Tools", "Toolbox"],
    &["Window", "Windows"],
    &["Help"],
    &["Format"],
    &["Insert"],
    &["Go"],
];

pub const LIST_ITEMS: Words = &[
    &["report.pdf", "report_v2.pdf", "report.docx"],
    &["notes.txt", "notes_old.txt"],
    &["photo.png", "photo2.png", "photos.zip"],
    &["budget.xlsx", "budget_2024.xlsx"],
    &["Alice Smith", "Alice Stone"],
    &["Bob Jones", "Bob Jordan"],
    &["Carol White", "Carla White"],
    &["Apple", "Apples", "Pineapple"],
    &["Banana", "Bandana"],
    &["Cherry", "Sherry"],
    &["main.rs", "main.py", "mail.rs"],
    &["Inbox", "Outbox"],
];

pub const FIELD_LABELS: Words = &[
    &["Name", "Username", "Full name"],
    &["Email", "Email again"],
    &["Password", "New password"],
    &["Phone", "Mobile phone"],
    &["Address", "Address line 2"],
    &["City"],
    &["Company"],
    &["Website"],
    &["Country"],
];

pub const CHECKBOX_LABELS: Words = &[
    &["Remember me", "Remember password"],
    &["Show hidden files", "Show file extensions"],
    &["Enable sync"],
    &["Auto save", "Auto update"],
    &["Dark mode"],
    &["Send reports", "Send crash reports"],
    &["Notify me"],
    &["Wrap lines"],
    &["Show grid", "Snap to grid"],
];

pub const TITLES: Words = &[
    &["Settings"],
    &["Untitled - Editor"],
    &["Preferences"],
    &["File Manager"],
    &["Project"],
];

/// Tracks the text already on a screenshot and hands out new, unique text.
#[derive(Debug, Default)]
pub struct TextPicker {
    used: HashSet<String>,
}

impl TextPicker {
    /// A word from `words` not yet on the screenshot, or `None` when all are used. With probability
    /// `distractor_rate` it comes from a group one of whose words is already on screen.
    pub fn pick(&mut self, rng: &mut SplitMix64, words: Words, distractor_rate: f64) -> Option<String> {
        let started: Vec<_> = words.iter().filter(|g| self.has_free_and_used(g)).collect();
        let group = if !started.is_empty() && rng.chance(distractor_rate) {
            *rng.pick(&started)?
        } else {
            let free: Vec<_> = words
                .iter()
                .filter(|g| g.iter().any(|w| !self.is_used(w)))
                .collect();
            *rng.pick(&free)?
        };
        let free: Vec<&str> = group.iter().copied().filter(|w| !self.is_used(w)).collect();
        let word = rng.pick(&free)?.to_string();
        self.used.insert(word.to_lowercase());
        Some(word)
    }

    fn is_used(&self, word: &str) -> bool {
        self.used.contains(&word.to_lowercase())
    }

    fn has_free_and_used(&self, group: &[&str]) -> bool {
        group.iter().any(|w| self.is_used(w)) && group.iter().any(|w| !self.is_used(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_every_word_once_then_none() {
        let mut rng = SplitMix64::new(1);
        let mut picker = TextPicker::default();
        let total: usize = MENUS.iter().map(|g| g.len()).sum();
        let mut got: Vec<String> = (0..total)
            .map(|_| picker.pick(&mut rng, MENUS, 0.5).unwrap())
            .collect();
        assert_eq!(picker.pick(&mut rng, MENUS, 0.5), None);
        got.sort();
        let mut all: Vec<String> = MENUS
            .iter()
            .flat_map(|g| g.iter().map(|w| w.to_string()))
            .collect();
        all.sort();
        assert_eq!(got, all);
    }

    #[test]
    fn full_distractor_rate_stays_in_the_started_group() {
        let mut rng = SplitMix64::new(7);
        let mut picker = TextPicker::default();
        picker.used.insert("save".into());
        let second = picker.pick(&mut rng, BUTTONS, 1.0).unwrap();
        assert!(["Save as", "Save all"].contains(&second.as_str()), "{second}");
        let third = picker.pick(&mut rng, BUTTONS, 1.0).unwrap();
        assert!(
            ["Save as", "Save all"].contains(&third.as_str()) && third != second,
            "{third}"
        );
    }
}
