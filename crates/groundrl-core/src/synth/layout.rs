//! Screen layouts, one per generator family: where each element goes. Elements are placed in rows
//! inside the window with a gap between them, so no two overlap and every box is exact.

use crate::raster::draw::Rect;
use crate::raster::font::text_size;
use crate::rng::SplitMix64;

use super::random::Draws;
use super::vocab::{self, TextPicker, Words};
use super::widgets::{Element, ICON_COLOURS, Icon, IconShape, Kind, Style};

/// A generator family; each is its own `source`, so curriculum statistics can tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// An application window: icon toolbar, tabs, a grid of buttons.
    Toolbar,
    /// A form: labelled text fields, checkboxes, a row of buttons.
    Dialog,
    /// A menu bar over a list of items with a column of buttons beside it.
    List,
}

impl Family {
    pub const ALL: [Family; 3] = [Family::Toolbar, Family::Dialog, Family::List];

    /// The name `synth --layouts` takes.
    pub fn name(self) -> &'static str {
        match self {
            Family::Toolbar => "toolbar",
            Family::Dialog => "dialog",
            Family::List => "list",
        }
    }

    /// The sample `source`, e.g. `synth/toolbar`.
    pub fn source(self) -> &'static str {
        match self {
            Family::Toolbar => "synth/toolbar",
            Family::Dialog => "synth/dialog",
            Family::List => "synth/list",
        }
    }
}

/// What a layout needs besides the random source: the area to fill and how crowded to make it.
pub struct LayoutInput<'a> {
    pub area: Rect,
    pub style: Style,
    /// At most this many elements (clutter).
    pub max_elements: usize,
    pub distractor_rate: f64,
    pub picker: &'a mut TextPicker,
}

/// Places elements left to right in rows, top to bottom, inside an area.
struct Flow {
    area: Rect,
    x: u32,
    y: u32,
    row_height: u32,
    gap: u32,
}

impl Flow {
    fn new(area: Rect, gap: u32) -> Self {
        Self {
            area,
            x: area.x,
            y: area.y,
            row_height: 0,
            gap,
        }
    }

    /// The next spot of `w` x `h` on the current row, if it fits there.
    fn place(&mut self, w: u32, h: u32) -> Option<Rect> {
        if self.x + w > self.area.right() || self.y + h > self.area.bottom() {
            return None;
        }
        let rect = Rect::new(self.x, self.y, w, h);
        self.x += w + self.gap;
        self.row_height = self.row_height.max(h);
        Some(rect)
    }

    fn next_row(&mut self) {
        self.y += self.row_height + self.gap;
        self.x = self.area.x;
        self.row_height = 0;
    }
}

/// Lays out one screen of `family`.
pub fn layout(family: Family, rng: &mut SplitMix64, input: LayoutInput) -> Vec<Element> {
    let mut builder = Builder {
        rng,
        elements: Vec::new(),
        input,
        icons: Vec::new(),
    };
    match family {
        Family::Toolbar => builder.toolbar(),
        Family::Dialog => builder.dialog(),
        Family::List => builder.list(),
    }
    builder.elements
}

/// Layout state shared by the families.
struct Builder<'r, 'a> {
    rng: &'r mut SplitMix64,
    elements: Vec<Element>,
    input: LayoutInput<'a>,
    /// Icons already on screen: each (shape, colour) appears once.
    icons: Vec<Icon>,
}

impl Builder<'_, '_> {
    fn gap(&self) -> u32 {
        (self.input.style.font_px / 2.0).round().max(3.0) as u32
    }

    fn full(&self) -> bool {
        self.elements.len() >= self.input.max_elements
    }

    fn push(&mut self, kind: Kind, rect: Rect, text: Option<String>) {
        self.elements.push(Element {
            kind,
            rect,
            text,
            icon: None,
            checked: false,
        });
    }

    fn pick(&mut self, words: Words) -> Option<String> {
        self.input
            .picker
            .pick(self.rng, words, self.input.distractor_rate)
    }

    /// Up to `count` text elements of `kind` on the current row of `flow`.
    fn text_row(&mut self, flow: &mut Flow, kind: Kind, words: Words, count: usize) {
        for _ in 0..count {
            if self.full() {
                return;
            }
            let Some(text) = self.pick(words) else { return };
            let (w, h) = self.input.style.text_box(&text);
            let Some(rect) = flow.place(w, h) else { return };
            self.push(kind, rect, Some(text));
        }
    }

    fn toolbar(&mut self) {
        let mut flow = Flow::new(self.input.area, self.gap());
        let side = self.input.style.text_box("M").1 + self.gap();
        let icons = self.rng.between(2, 6);
        for _ in 0..icons {
            let Some(rect) = flow.place(side, side) else { break };
            if self.full() {
                return;
            }
            let icon = self.new_icon();
            self.elements.push(Element {
                kind: Kind::IconButton,
                rect,
                text: None,
                icon: Some(icon),
                checked: false,
            });
        }
        flow.next_row();
        let tabs = self.rng.between(2, 5);
        self.text_row(&mut flow, Kind::Tab, vocab::TABS, tabs);
        while !self.full() && flow.y < flow.area.bottom() {
            flow.next_row();
            let before = self.elements.len();
            let per_row = self.rng.between(1, 4);
            self.text_row(&mut flow, Kind::Button, vocab::BUTTONS, per_row);
            if self.elements.len() == before {
                return;
            }
        }
    }

    /// A new icon whose shape and colour pair is not yet on screen; with the distractor rate it
    /// shares its shape or colour with one that is.
    fn new_icon(&mut self) -> Icon {
        loop {
            let mut icon = Icon {
                shape: IconShape::ALL[self.rng.between(0, IconShape::ALL.len() - 1)],
                colour: self.rng.between(0, ICON_COLOURS.len() - 1),
            };
            if !self.icons.is_empty() && self.rng.chance(self.input.distractor_rate) {
                let twin = *self.rng.pick(&self.icons).expect("icons is not empty");
                if self.rng.chance(0.5) {
                    icon.shape = twin.shape;
                } else {
                    icon.colour = twin.colour;
                }
            }
            if !self.icons.contains(&icon) {
                self.icons.push(icon);
                return icon;
            }
        }
    }

    fn dialog(&mut self) {
        let mut flow = Flow::new(self.input.area, self.gap());
        let style = self.input.style;
        for _ in 0..self.rng.between(1, 4) {
            if self.elements.len() + 2 > self.input.max_elements {
                break;
            }
            let Some(label) = self.pick(vocab::FIELD_LABELS) else {
                break;
            };
            let (lw, h) = style.text_box(&label);
            let field_w = (style.font_px * self.rng.uniform(6.0, 14.0)) as u32;
            let (Some(label_rect), Some(field_rect)) = (flow.place(lw, h), flow.place(field_w, h)) else {
                break;
            };
            self.push(Kind::Label, label_rect, Some(label));
            self.push(Kind::TextField, field_rect, None);
            flow.next_row();
        }
        for _ in 0..self.rng.between(1, 3) {
            if self.elements.len() + 2 > self.input.max_elements {
                break;
            }
            let Some(label) = self.pick(vocab::CHECKBOX_LABELS) else {
                break;
            };
            let side = text_size("M", style.font_px).1;
            let (lw, h) = style.text_box(&label);
            let (Some(box_rect), Some(label_rect)) = (flow.place(side, side), flow.place(lw, h)) else {
                break;
            };
            let checked = self.rng.chance(0.5);
            self.elements.push(Element {
                kind: Kind::Checkbox,
                rect: box_rect,
                text: Some(label.clone()),
                icon: None,
                checked,
            });
            self.push(Kind::Label, label_rect, Some(label));
            flow.next_row();
        }
        let buttons = self.rng.between(2, 3);
        self.text_row(&mut flow, Kind::Button, vocab::BUTTONS, buttons);
    }

    fn list(&mut self) {
        let area = self.input.area;
        let mut menu = Flow::new(area, self.gap());
        let menus = self.rng.between(3, 5);
        self.text_row(&mut menu, Kind::MenuItem, vocab::MENUS, menus);
        menu.next_row();
        let top = menu.y.min(area.bottom());
        let list_w = (area.w * 3 / 5).min((self.input.style.font_px * 20.0) as u32);
        let list_area = Rect::new(area.x, top, list_w, area.bottom() - top);
        let side_x = area.x + list_w + self.gap();
        let side_area = Rect::new(
            side_x.min(area.right()),
            top,
            area.right().saturating_sub(side_x),
            area.bottom() - top,
        );
        let items = self.rng.between(3, 10);
        self.column(list_area, Kind::ListItem, vocab::LIST_ITEMS, items, Some(list_w));
        let buttons = self.rng.between(1, 4);
        self.column(side_area, Kind::Button, vocab::BUTTONS, buttons, None);
    }

    /// Up to `count` elements stacked top to bottom in `area`, all `width` wide or each fitting its text.
    fn column(&mut self, area: Rect, kind: Kind, words: Words, count: usize, width: Option<u32>) {
        let mut flow = Flow::new(area, self.gap());
        for _ in 0..count {
            if self.full() {
                return;
            }
            let Some(text) = self.pick(words) else { return };
            let (w, h) = self.input.style.text_box(&text);
            let Some(rect) = flow.place(width.unwrap_or(w).max(w), h) else {
                return;
            };
            self.push(kind, rect, Some(text));
            flow.next_row();
        }
    }
}
