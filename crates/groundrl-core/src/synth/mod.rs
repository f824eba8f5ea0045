//! The synthetic GUI grounding generator: groundrl's embedded default dataset.
//!
//! Each screenshot is a procedurally drawn window (toolbar, dialog or list family, in one of several
//! themes) whose elements' boxes are known exactly, with several tasks about it: click by visible
//! text, by icon, by position relative to another element, and "find all" detection. The same seed
//! gives byte-identical PNGs and JSONL: screenshot `i` draws from its own generator, seeded by the
//! seed and `i` alone, so rayon's scheduling cannot change anything.
//!
//! ```no_run
//! use groundrl_core::synth::{Difficulty, SynthConfig, generate};
//! let config = SynthConfig { screenshots: 100, seed: 0, size: None, knobs: Difficulty::Easy.knobs(), prompt: None };
//! let summary = generate(&config, std::path::Path::new("synth-out")).unwrap();
//! println!("{} samples", summary.samples);
//! ```

pub mod layout;
mod random;
pub mod tasks;
pub mod theme;
pub mod variety;
pub mod vocab;
pub mod widgets;

mod output;

use std::str::FromStr;

use crate::prompt::PromptStyle;
use crate::raster::draw::{Rect, fill_rect, framed_rect};
use crate::raster::font::{self, draw_text};
use crate::rng::{SplitMix64, keyed};
use groundrl_score::named::parse_name;
use image::RgbImage;

use self::layout::{Family, LayoutInput, layout};
use self::random::Draws;
use self::tasks::{SynthTask, make_tasks};
use self::theme::Theme;
use self::variety::Variety;
use self::vocab::TextPicker;
use self::widgets::{Element, Style, draw_element};

pub use self::output::{Summary, SynthError, generate, samples_of};

/// Presets of the difficulty knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difficulty {
    /// Small images (224 to 448 px), at most 6 large elements, no look-alikes: learnable by a tiny model.
    Easy,
    /// Laptop-like screens (640x400 to 1920x1080), up to 20 elements, some look-alikes.
    Medium,
    /// Up to 4K (3840x2160), up to 60 small elements, many look-alikes.
    Hard,
}

impl Difficulty {
    pub fn name(self) -> &'static str {
        match self {
            Difficulty::Easy => "easy",
            Difficulty::Medium => "medium",
            Difficulty::Hard => "hard",
        }
    }

    /// The knob values of this preset.
    pub fn knobs(self) -> Knobs {
        match self {
            Difficulty::Easy => Knobs {
                difficulty: self,
                sizes: vec![(224, 224), (320, 320), (448, 336), (448, 448)],
                text_height: (0.06, 0.075),
                max_elements: 6,
                distractor_rate: 0.0,
                tasks_per_screenshot: 3,
                window: Window::Full,
                variety: Variety::default(),
            },
            Difficulty::Medium => Knobs {
                difficulty: self,
                sizes: vec![
                    (640, 400),
                    (800, 600),
                    (1024, 768),
                    (1280, 720),
                    (1366, 768),
                    (1920, 1080),
                ],
                text_height: (0.016, 0.026),
                max_elements: 20,
                distractor_rate: 0.3,
                tasks_per_screenshot: 4,
                window: Window::Anywhere,
                variety: Variety::default(),
            },
            Difficulty::Hard => Knobs {
                difficulty: self,
                sizes: vec![(1280, 800), (1920, 1080), (2560, 1440), (3840, 2160)],
                text_height: (0.006, 0.012),
                max_elements: 60,
                distractor_rate: 0.7,
                tasks_per_screenshot: 5,
                window: Window::Anywhere,
                variety: Variety::default(),
            },
        }
    }
}

impl FromStr for Difficulty {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(
            s,
            "difficulty",
            &[Difficulty::Easy, Difficulty::Medium, Difficulty::Hard],
            Difficulty::name,
        )
    }
}

/// What makes a screenshot hard (element size, clutter and look-alike distractors), and what it and
/// its tasks are drawn from.
#[derive(Clone, Debug, PartialEq)]
pub struct Knobs {
    /// The preset these knobs started from (recorded in sample metadata).
    pub difficulty: Difficulty,
    /// Image sizes (width, height) picked uniformly when no size is fixed.
    pub sizes: Vec<(u32, u32)>,
    /// Text height as a fraction of the image height, a range; never below 10 px. Elements scale with it.
    pub text_height: (f32, f32),
    /// At most this many elements per screenshot.
    pub max_elements: usize,
    /// Chance that a new label or icon is a look-alike of one already on screen.
    pub distractor_rate: f64,
    pub tasks_per_screenshot: usize,
    /// Where the window goes: the whole image (easy) or anywhere (medium, hard).
    pub window: Window,
    pub variety: Variety,
}

/// Where a screenshot's window goes, and with it every element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The window fills the image: a layout puts its elements at nearly the same places in every
    /// screenshot (only the texts' widths move them).
    Full,
    /// A random part of the image, at least half of each side: the elements move from screenshot
    /// to screenshot, so a model cannot answer from places alone.
    Anywhere,
}

impl Window {
    pub const ALL: [Window; 2] = [Window::Full, Window::Anywhere];

    pub fn name(self) -> &'static str {
        match self {
            Window::Full => "full",
            Window::Anywhere => "anywhere",
        }
    }
}

impl FromStr for Window {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(s, "window", &Window::ALL, Window::name)
    }
}

/// What `generate` makes.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    pub screenshots: u64,
    pub seed: u64,
    /// A fixed (width, height); `None` picks from `knobs.sizes`.
    pub size: Option<(u32, u32)>,
    pub knobs: Knobs,
    /// Attach a chat prompt to every sample, in the format of its task ([`PromptStyle::for_task`]);
    /// `None` leaves `Sample::prompt` empty.
    pub prompt: Option<PromptStyle>,
}

/// One drawn screenshot with its elements and tasks.
pub struct Screenshot {
    pub image: RgbImage,
    pub family: Family,
    pub theme: &'static Theme,
    pub style: Style,
    pub elements: Vec<Element>,
    pub tasks: Vec<SynthTask>,
}

/// Smallest text height drawn, in pixels: below it DejaVu Sans stops being legible.
const MIN_TEXT_PX: f32 = 10.0;

/// Draws screenshot `index` of `config`; depends only on the seed, the index and the knobs.
pub fn render_screenshot(config: &SynthConfig, index: u64) -> Screenshot {
    let mut rng = SplitMix64::new(keyed(config.seed, &format!("synth/{index}")));
    let knobs = &config.knobs;
    let (width, height) = config
        .size
        .unwrap_or_else(|| *rng.pick(&knobs.sizes).expect("knobs list at least one size"));
    let variety = &knobs.variety;
    let family = *rng
        .pick(&variety.layouts)
        .expect("a variety lists at least one layout");
    let theme = *rng
        .pick(&variety.themes)
        .expect("a variety lists at least one theme");
    let (lo, hi) = knobs.text_height;
    let font_px = (height as f32 * rng.uniform(lo, hi)).max(MIN_TEXT_PX);
    let style = Style {
        font_px,
        border: (font_px / 12.0).round().max(1.0) as u32,
        padding: (font_px / 2.0).round() as u32,
    };
    let mut image = RgbImage::from_pixel(width, height, image::Rgb(theme.desktop));
    let mut picker = TextPicker::default();
    let content = draw_window(&mut image, &mut rng, theme, &style, knobs, &mut picker);
    let input = LayoutInput {
        area: content,
        style,
        max_elements: knobs.max_elements,
        distractor_rate: knobs.distractor_rate,
        picker: &mut picker,
    };
    let elements = layout(family, &mut rng, input);
    for el in &elements {
        draw_element(&mut image, el, theme, &style);
    }
    let tasks = make_tasks(&elements, &mut rng, knobs.tasks_per_screenshot, variety.wording);
    Screenshot {
        image,
        family,
        theme,
        style,
        elements,
        tasks,
    }
}

/// Where the window goes in a `w` x `h` image (see [`Window`]).
fn window_rect((w, h): (u32, u32), rng: &mut SplitMix64, window: Window) -> Rect {
    if window == Window::Full {
        return Rect::new(0, 0, w, h);
    }
    let between = |rng: &mut SplitMix64, lo: u32, hi: u32| rng.between(lo as usize, hi as usize) as u32;
    let (ww, wh) = (between(rng, w / 2, w), between(rng, h / 2, h));
    Rect::new(between(rng, 0, w - ww), between(rng, 0, h - wh), ww, wh)
}

/// Draws the window frame and title bar; returns the area left for the content.
fn draw_window(
    image: &mut RgbImage,
    rng: &mut SplitMix64,
    theme: &Theme,
    style: &Style,
    knobs: &Knobs,
    picker: &mut TextPicker,
) -> Rect {
    let window = window_rect(image.dimensions(), rng, knobs.window);
    framed_rect(image, window, theme.window, theme.window_border, style.border);
    let title_h = (style.font_px * 1.8) as u32;
    let bar = Rect::new(window.x, window.y, window.w, title_h).inset(style.border);
    fill_rect(image, bar, theme.title_bar);
    if let Some(title) = picker.pick(rng, vocab::TITLES, 0.0) {
        let y = bar.y + (bar.h.saturating_sub(font::text_size(&title, style.font_px).1)) / 2;
        draw_text(
            image,
            bar.x + style.padding,
            y,
            &title,
            style.font_px,
            theme.title_text,
        );
    }
    let pad = style.padding + style.border;
    Rect::new(
        window.x + pad,
        window.y + title_h + pad,
        window.w.saturating_sub(2 * pad),
        window.h.saturating_sub(title_h + 2 * pad),
    )
}
