//! Colour schemes. Each kind of element has its own border colour so that a drawn element's outline
//! is exactly its target box (the synth tests check this pixel by pixel).

use crate::raster::Rgb;

/// The colours of one look (light, dark, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Theme {
    pub name: &'static str,
    /// Behind the window: the "desktop".
    pub desktop: Rgb,
    pub window: Rgb,
    pub window_border: Rgb,
    pub title_bar: Rgb,
    pub title_text: Rgb,
    pub text: Rgb,
    pub button: Rgb,
    pub button_border: Rgb,
    pub tab: Rgb,
    pub tab_border: Rgb,
    pub menu: Rgb,
    pub menu_border: Rgb,
    pub list_item: Rgb,
    pub list_border: Rgb,
    pub field: Rgb,
    pub field_border: Rgb,
    /// Check marks.
    pub accent: Rgb,
}

/// The themes screenshots are drawn in, picked uniformly.
pub const THEMES: [Theme; 3] = [
    Theme {
        name: "light",
        desktop: [58, 110, 165],
        window: [240, 240, 240],
        window_border: [120, 120, 120],
        title_bar: [222, 226, 232],
        title_text: [20, 20, 20],
        text: [15, 15, 15],
        button: [225, 225, 225],
        button_border: [110, 110, 110],
        tab: [210, 216, 226],
        tab_border: [90, 100, 130],
        menu: [232, 232, 236],
        menu_border: [160, 160, 175],
        list_item: [252, 252, 252],
        list_border: [185, 185, 185],
        field: [255, 255, 255],
        field_border: [70, 70, 70],
        accent: [0, 95, 200],
    },
    Theme {
        name: "dark",
        desktop: [22, 24, 30],
        window: [45, 45, 48],
        window_border: [90, 90, 95],
        title_bar: [30, 30, 32],
        title_text: [220, 220, 220],
        text: [235, 235, 235],
        button: [70, 70, 75],
        button_border: [150, 150, 158],
        tab: [58, 62, 72],
        tab_border: [120, 135, 170],
        menu: [52, 52, 56],
        menu_border: [105, 105, 112],
        list_item: [36, 36, 38],
        list_border: [80, 80, 84],
        field: [28, 28, 28],
        field_border: [175, 175, 175],
        accent: [80, 160, 255],
    },
    Theme {
        name: "ocean",
        desktop: [200, 214, 196],
        window: [247, 250, 252],
        window_border: [40, 80, 120],
        title_bar: [40, 80, 120],
        title_text: [255, 255, 255],
        text: [10, 30, 50],
        button: [214, 232, 248],
        button_border: [30, 90, 150],
        tab: [232, 240, 246],
        tab_border: [60, 120, 160],
        menu: [236, 242, 248],
        menu_border: [130, 160, 190],
        list_item: [255, 255, 255],
        list_border: [170, 190, 210],
        field: [255, 255, 255],
        field_border: [50, 70, 90],
        accent: [220, 90, 30],
    },
];
