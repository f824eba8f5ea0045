//! What screenshots and instructions are drawn from: the window layouts (each with its own element
//! kinds: text fields and checkboxes only in dialogs, menu and list items only in lists, tabs and
//! icons only in toolbars), the colour themes and the wording of instructions. By default all of
//! them; a subset lets a test set hold what training never saw (a layout and so its element kinds, a
//! theme, other verbs), the out-of-distribution sets of docs/learning.md.

use std::str::FromStr;

use groundrl_score::named::parse_name;

use super::layout::Family;
use super::theme::{THEMES, Theme};

/// The layouts, themes and wording screenshots and their tasks are drawn from.
#[derive(Clone, Debug, PartialEq)]
pub struct Variety {
    /// Picked uniformly; never empty.
    pub layouts: Vec<Family>,
    /// Picked uniformly; never empty.
    pub themes: Vec<&'static Theme>,
    pub wording: Wording,
}

impl Default for Variety {
    /// Every layout and theme, instructions worded as clicks.
    fn default() -> Self {
        Self {
            layouts: Family::ALL.to_vec(),
            themes: THEMES.iter().collect(),
            wording: Wording::Click,
        }
    }
}

impl Variety {
    /// The layouts named in `names` (comma-separated: toolbar, dialog, list).
    pub fn parse_layouts(names: &str) -> Result<Vec<Family>, String> {
        names
            .split(',')
            .map(|name| parse_name(name.trim(), "layout", &Family::ALL, Family::name))
            .collect()
    }

    /// The themes named in `names` (comma-separated: light, dark, ocean).
    pub fn parse_themes(names: &str) -> Result<Vec<&'static Theme>, String> {
        let all: Vec<usize> = (0..THEMES.len()).collect();
        names
            .split(',')
            .map(|name| {
                let i = parse_name(name.trim(), "theme", &all, |i| THEMES[i].name)?;
                Ok(&THEMES[i])
            })
            .collect()
    }
}

/// How instructions are worded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wording {
    /// "Click the \"Save\" button.", "Find all checkboxes."
    Click,
    /// The same targets in other words: "Select the \"Save\" button.", "Locate all checkboxes.";
    /// the verb taken in turn by target (no random draw, so the tasks are the click wording's).
    Paraphrased,
}

/// Verbs of paraphrased click instructions and of detection instructions.
const CLICK_VERBS: [&str; 4] = ["Select", "Tap", "Press", "Choose"];
const FIND_VERBS: [&str; 4] = ["Locate all", "Mark all", "Point out all", "Highlight all"];

impl Wording {
    pub const ALL: [Wording; 2] = [Wording::Click, Wording::Paraphrased];

    pub fn name(self) -> &'static str {
        match self {
            Wording::Click => "click",
            Wording::Paraphrased => "paraphrased",
        }
    }

    /// The instruction to click `what` (a description such as `the "Save" button`), whose target is
    /// element `target`.
    pub fn click(self, what: &str, target: usize) -> String {
        match self {
            Wording::Click => format!("Click {what}."),
            Wording::Paraphrased => format!("{} {what}.", CLICK_VERBS[target % CLICK_VERBS.len()]),
        }
    }

    /// The instruction to find every element called `plural` ("checkboxes"), the `nth` kind of the
    /// detection kinds.
    pub fn find(self, plural: &str, nth: usize) -> String {
        match self {
            Wording::Click => format!("Find all {plural}."),
            Wording::Paraphrased => format!("{} {plural}.", FIND_VERBS[nth % FIND_VERBS.len()]),
        }
    }
}

impl FromStr for Wording {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(s, "wording", &Wording::ALL, Wording::name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_ones_are_listed() {
        assert_eq!(
            Variety::parse_layouts("dialog, list"),
            Ok(vec![Family::Dialog, Family::List])
        );
        let themes = Variety::parse_themes("ocean").unwrap();
        assert_eq!(themes.iter().map(|t| t.name).collect::<Vec<_>>(), ["ocean"]);
        assert_eq!(
            Variety::parse_layouts("toolbar,form"),
            Err("unknown layout \"form\"; expected one of toolbar, dialog, list".to_string())
        );
        assert_eq!(
            Variety::parse_themes("sepia"),
            Err("unknown theme \"sepia\"; expected one of light, dark, ocean".to_string())
        );
        assert_eq!("paraphrased".parse(), Ok(Wording::Paraphrased));
    }

    #[test]
    fn wordings_name_the_same_target() {
        assert_eq!(
            Wording::Click.click("the \"Save\" button", 5),
            "Click the \"Save\" button."
        );
        assert_eq!(
            Wording::Paraphrased.click("the \"Save\" button", 5),
            "Tap the \"Save\" button."
        );
        assert_eq!(Wording::Click.find("checkboxes", 6), "Find all checkboxes.");
        assert_eq!(
            Wording::Paraphrased.find("checkboxes", 6),
            "Point out all checkboxes."
        );
    }
}
