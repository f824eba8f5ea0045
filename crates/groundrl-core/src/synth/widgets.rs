//! The elements a screenshot is made of, and how each one is drawn.
//!
//! Every clickable element is a filled rectangle outlined in its kind's border colour, so its target
//! box is exactly the outline. Labels are plain text: they name other elements but are never targets.

use image::RgbImage;

use super::theme::Theme;
use crate::raster::Rgb;
use crate::raster::draw::{Rect, fill_shape, framed_rect};
use crate::raster::font::{draw_text, text_size};

/// What an element is; the word used for it in instructions comes from [`Kind::noun`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Button,
    IconButton,
    Tab,
    MenuItem,
    ListItem,
    TextField,
    Checkbox,
    /// Text next to a field or checkbox; an anchor for relative instructions, never a target.
    Label,
}

impl Kind {
    /// The word instructions use ("Click the \"Save\" button.").
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Button => "button",
            Kind::IconButton => "icon",
            Kind::Tab => "tab",
            Kind::MenuItem => "menu item",
            Kind::ListItem => "list item",
            Kind::TextField => "text field",
            Kind::Checkbox => "checkbox",
            Kind::Label => "label",
        }
    }

    /// The plural, for detection instructions ("Find all checkboxes.").
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Button => "buttons",
            Kind::IconButton => "icons",
            Kind::Tab => "tabs",
            Kind::MenuItem => "menu items",
            Kind::ListItem => "list items",
            Kind::TextField => "text fields",
            Kind::Checkbox => "checkboxes",
            Kind::Label => "labels",
        }
    }

    /// The snake_case name stored in sample metadata.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Button => "button",
            Kind::IconButton => "icon_button",
            Kind::Tab => "tab",
            Kind::MenuItem => "menu_item",
            Kind::ListItem => "list_item",
            Kind::TextField => "text_field",
            Kind::Checkbox => "checkbox",
            Kind::Label => "label",
        }
    }

    /// The colour of this kind's outline, which is also its target box's edge.
    pub fn border(self, theme: &Theme) -> Option<Rgb> {
        match self {
            Kind::Button | Kind::IconButton => Some(theme.button_border),
            Kind::Tab => Some(theme.tab_border),
            Kind::MenuItem => Some(theme.menu_border),
            Kind::ListItem => Some(theme.list_border),
            Kind::TextField | Kind::Checkbox => Some(theme.field_border),
            Kind::Label => None,
        }
    }

    fn fill(self, theme: &Theme) -> Rgb {
        match self {
            Kind::Button | Kind::IconButton => theme.button,
            Kind::Tab => theme.tab,
            Kind::MenuItem => theme.menu,
            Kind::ListItem => theme.list_item,
            Kind::TextField | Kind::Checkbox => theme.field,
            Kind::Label => theme.window,
        }
    }
}

/// Icon outlines; drawn by [`IconShape::contains`] over the icon's square.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IconShape {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
}

impl IconShape {
    pub const ALL: [IconShape; 5] = [
        IconShape::Circle,
        IconShape::Square,
        IconShape::Triangle,
        IconShape::Diamond,
        IconShape::Cross,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IconShape::Circle => "circle",
            IconShape::Square => "square",
            IconShape::Triangle => "triangle",
            IconShape::Diamond => "diamond",
            IconShape::Cross => "cross",
        }
    }

    /// Whether the point `(u, v)`, each in -1..1 over the icon's square, is inside the shape.
    fn contains(self, u: f32, v: f32) -> bool {
        match self {
            IconShape::Circle => u * u + v * v <= 1.0,
            IconShape::Square => u.abs() <= 0.8 && v.abs() <= 0.8,
            IconShape::Triangle => v <= 0.9 && v >= 2.0 * u.abs() - 1.0,
            IconShape::Diamond => u.abs() + v.abs() <= 1.0,
            IconShape::Cross => (u.abs() <= 0.25 || v.abs() <= 0.25) && u.abs() <= 0.9 && v.abs() <= 0.9,
        }
    }
}

/// Icon colours with the names instructions use; saturated so that no theme colour is mistaken for one.
pub const ICON_COLOURS: [(&str, Rgb); 6] = [
    ("red", [220, 30, 30]),
    ("green", [30, 160, 50]),
    ("blue", [30, 70, 230]),
    ("orange", [245, 140, 0]),
    ("purple", [140, 40, 180]),
    ("yellow", [235, 205, 0]),
];

/// An icon: a shape in one of [`ICON_COLOURS`] (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Icon {
    pub shape: IconShape,
    pub colour: usize,
}

impl Icon {
    /// "red circle".
    pub fn description(&self) -> String {
        format!("{} {}", ICON_COLOURS[self.colour].0, self.shape.name())
    }

    pub fn rgb(&self) -> Rgb {
        ICON_COLOURS[self.colour].1
    }
}

/// One drawn element with its exact box.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    pub kind: Kind,
    pub rect: Rect,
    /// The visible text; for a checkbox, the text of the label right of it.
    pub text: Option<String>,
    pub icon: Option<Icon>,
    /// Checkboxes only: drawn with a check mark.
    pub checked: bool,
}

/// Sizes shared by all elements of one screenshot.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Text height in pixels.
    pub font_px: f32,
    /// Outline width in pixels.
    pub border: u32,
    /// Space between text and outline.
    pub padding: u32,
}

impl Style {
    /// Width and height of an element showing `text` with padding and outline.
    pub fn text_box(&self, text: &str) -> (u32, u32) {
        let (w, h) = text_size(text, self.font_px);
        (
            w + 2 * (self.padding + self.border),
            h + self.padding + 2 * self.border,
        )
    }
}

/// Draws `el` in `theme`; its pixels stay inside `el.rect` (a checkbox's label is a separate element).
pub fn draw_element(img: &mut RgbImage, el: &Element, theme: &Theme, style: &Style) {
    if let Some(border) = el.kind.border(theme) {
        framed_rect(img, el.rect, el.kind.fill(theme), border, style.border);
    }
    if let Some(text) = &el.text
        && el.kind != Kind::Checkbox
    {
        draw_element_text(img, el, text, theme.text, style);
    }
    if let Some(icon) = el.icon {
        let side = el.rect.w.min(el.rect.h) * 3 / 5;
        let square = Rect::new(
            el.rect.x + (el.rect.w - side) / 2,
            el.rect.y + (el.rect.h - side) / 2,
            side,
            side,
        );
        fill_shape(img, square, icon.rgb(), |u, v| icon.shape.contains(u, v));
    }
    if el.checked {
        let mark = el.rect.inset(style.border + (el.rect.w / 5).max(1));
        fill_shape(img, mark, theme.accent, |u, v| {
            (u - v).abs() <= 0.35 || (u + v).abs() <= 0.35
        });
    }
}

/// Text centred vertically; centred horizontally, except list items and labels, which read from the left.
fn draw_element_text(img: &mut RgbImage, el: &Element, text: &str, colour: Rgb, style: &Style) {
    let (w, h) = text_size(text, style.font_px);
    let x = match el.kind {
        Kind::ListItem | Kind::Label => el.rect.x + style.border + style.padding,
        _ => el.rect.x + (el.rect.w.saturating_sub(w)) / 2,
    };
    let y = el.rect.y + (el.rect.h.saturating_sub(h)) / 2;
    draw_text(img, x, y, text, style.font_px, colour);
}
