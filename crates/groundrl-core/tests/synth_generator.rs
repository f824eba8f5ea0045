//! The synthetic generator: determinism, exact target boxes on the drawn pixels, unambiguous
//! instructions.

use std::path::{Path, PathBuf};

use groundrl_core::raster::draw::Rect;
use groundrl_core::synth::layout::Family;
use groundrl_core::synth::tasks::{TaskKind, describe};
use groundrl_core::synth::variety::{Variety, Wording};
use groundrl_core::synth::widgets::{Element, Kind};
use groundrl_core::synth::{
    Difficulty, Screenshot, SynthConfig, Window, generate, render_screenshot, samples_of,
};
use groundrl_score::data::{Sample, Shape, Task};
use groundrl_score::frame::Frame;
use image::RgbImage;

fn config(difficulty: Difficulty, seed: u64, screenshots: u64) -> SynthConfig {
    SynthConfig {
        screenshots,
        seed,
        size: None,
        knobs: difficulty.knobs(),
        prompt: None,
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("groundrl-synth-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![(
        "samples.jsonl".to_string(),
        std::fs::read(dir.join("samples.jsonl")).unwrap(),
    )];
    let mut names: Vec<_> = std::fs::read_dir(dir.join("images"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names {
        files.push((
            name.to_string_lossy().into(),
            std::fs::read(dir.join("images").join(&name)).unwrap(),
        ));
    }
    files
}

#[test]
fn same_seed_gives_byte_identical_files_and_another_seed_does_not() {
    let (a, b, c) = (temp_dir("a"), temp_dir("b"), temp_dir("c"));
    let cfg = config(Difficulty::Medium, 42, 20);
    let summary = generate(&cfg, &a).unwrap();
    assert_eq!(summary.screenshots, 20);
    assert_eq!(summary.samples, 20 * 4);
    generate(&cfg, &b).unwrap();
    generate(&config(Difficulty::Medium, 43, 20), &c).unwrap();
    let (fa, fb, fc) = (files_of(&a), files_of(&b), files_of(&c));
    assert_eq!(fa.len(), 21);
    assert!(fa == fb, "same seed, different output");
    assert_ne!(fa[0].1, fc[0].1);
    let text = std::str::from_utf8(&fa[0].1).unwrap();
    let lines: Vec<Sample> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 80);
    assert_eq!(lines[0].id, "synth-42-000000-0");
    assert_eq!(lines[79].id, "synth-42-000019-3");
    assert_eq!(lines[79].images[0].path, "images/000019.png");
    for dir in [a, b, c] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// Screenshots of every difficulty, with their config and index.
fn screenshots() -> Vec<(SynthConfig, u64, Screenshot)> {
    let mut out = Vec::new();
    for (difficulty, n) in [
        (Difficulty::Easy, 60),
        (Difficulty::Medium, 60),
        (Difficulty::Hard, 12),
    ] {
        let cfg = config(difficulty, 7, 0);
        for i in 0..n {
            out.push((cfg.clone(), i, render_screenshot(&cfg, i)));
        }
    }
    out
}

fn pixels(img: &RgbImage, rect: Rect) -> impl Iterator<Item = [u8; 3]> + '_ {
    (rect.y..rect.bottom()).flat_map(move |y| (rect.x..rect.right()).map(move |x| img.get_pixel(x, y).0))
}

/// The one-pixel lines just inside the box: top, bottom, left, right.
fn edge_pixels(img: &RgbImage, r: Rect) -> Vec<[u8; 3]> {
    let lines = [
        Rect::new(r.x, r.y, r.w, 1),
        Rect::new(r.x, r.bottom() - 1, r.w, 1),
        Rect::new(r.x, r.y, 1, r.h),
        Rect::new(r.right() - 1, r.y, 1, r.h),
    ];
    lines.into_iter().flat_map(|l| pixels(img, l)).collect()
}

/// The one-pixel ring just outside the box, where it is inside the image.
fn ring_pixels(img: &RgbImage, r: Rect) -> Vec<[u8; 3]> {
    let (w, h) = img.dimensions();
    let mut out = Vec::new();
    for y in r.y.saturating_sub(1)..=r.bottom() {
        for x in r.x.saturating_sub(1)..=r.right() {
            let outside = x + 1 == r.x || x == r.right() || y + 1 == r.y || y == r.bottom();
            if outside && x < w && y < h {
                out.push(img.get_pixel(x, y).0);
            }
        }
    }
    out
}

fn share(pixels: &[[u8; 3]], colour: [u8; 3]) -> f64 {
    pixels.iter().filter(|&&p| p == colour).count() as f64 / pixels.len() as f64
}

#[test]
fn every_target_box_is_exactly_the_drawn_outline_with_its_content_inside() {
    let mut checked = 0;
    for (cfg, i, shot) in screenshots() {
        let samples = samples_of(&shot, &cfg, i, "x.png");
        for (sample, task) in samples.iter().zip(&shot.tasks) {
            for (target, &e) in sample.targets.iter().zip(&task.targets) {
                let el = &shot.elements[e];
                assert_eq!(target.shape, Shape::Box(el.rect.xyxy()));
                let border = el.kind.border(shot.theme).expect("targets are outlined");
                let edge = edge_pixels(&shot.image, el.rect);
                assert!(
                    share(&edge, border) >= 0.97,
                    "{}: edge of {el:?} is not its border colour",
                    sample.id
                );
                let ring = ring_pixels(&shot.image, el.rect);
                assert!(
                    share(&ring, border) < 0.5,
                    "{}: outline continues outside {el:?}",
                    sample.id
                );
                let inside: Vec<_> = pixels(&shot.image, el.rect.inset(shot.style.border)).collect();
                assert_content_drawn(el, &inside, shot.theme.text, shot.theme.accent, &sample.id);
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "only {checked} targets checked");
}

/// Text elements hold pixels inked close to the text colour (anti-aliased strokes of small text never
/// reach it exactly), icons their colour, checked checkboxes the accent.
fn assert_content_drawn(el: &Element, inside: &[[u8; 3]], text: [u8; 3], accent: [u8; 3], id: &str) {
    if let Some(icon) = el.icon {
        assert!(
            share(inside, icon.rgb()) > 0.1,
            "{id}: icon {icon:?} not drawn in {el:?}"
        );
    } else if el.kind == Kind::Checkbox {
        assert_eq!(
            share(inside, accent) > 0.0,
            el.checked,
            "{id}: check mark of {el:?}"
        );
    } else if el.text.is_some() {
        let close = |p: &&[u8; 3]| p.iter().zip(text).all(|(&a, b)| a.abs_diff(b) <= 48);
        assert!(
            inside.iter().filter(close).count() >= 5,
            "{id}: no text pixels in {el:?}"
        );
    }
}

#[test]
fn elements_lie_inside_the_image_and_never_overlap() {
    for (_, _, shot) in screenshots() {
        let (w, h) = shot.image.dimensions();
        for (a, ea) in shot.elements.iter().enumerate() {
            assert!(ea.rect.w > 0 && ea.rect.h > 0 && ea.rect.right() <= w && ea.rect.bottom() <= h);
            for eb in &shot.elements[a + 1..] {
                let apart = ea.rect.right() <= eb.rect.x
                    || eb.rect.right() <= ea.rect.x
                    || ea.rect.bottom() <= eb.rect.y
                    || eb.rect.bottom() <= ea.rect.y;
                assert!(apart, "{ea:?} overlaps {eb:?}");
            }
        }
    }
}

#[test]
fn each_click_instruction_names_exactly_one_element() {
    let mut seen = [0; 3];
    for (_, _, shot) in screenshots() {
        for task in &shot.tasks {
            let target = &shot.elements[task.targets[0]];
            let matching: Vec<&Element> = match task.kind {
                TaskKind::Text | TaskKind::Icon => {
                    seen[usize::from(task.kind == TaskKind::Icon)] += 1;
                    let says =
                        |e: &&Element| describe(e).is_some_and(|d| task.instruction == format!("Click {d}."));
                    shot.elements.iter().filter(says).collect()
                }
                TaskKind::Relative => {
                    seen[2] += 1;
                    relative_matches(&shot, &task.instruction)
                }
                TaskKind::Detection => continue,
            };
            assert_eq!(task.targets.len(), 1);
            assert_eq!(matching, vec![target], "{:?}", task.instruction);
        }
    }
    assert!(
        seen.iter().all(|&n| n > 20),
        "task kinds seen (text, icon, relative): {seen:?}"
    );
}

/// For "Click the <noun> <direction> <anchor>.": the anchor must be unique; returns the elements of
/// kind <noun> nearest to it in that direction among those overlapping it sideways at all.
fn relative_matches<'a>(shot: &'a Screenshot, instruction: &str) -> Vec<&'a Element> {
    let names = |e: &&Element| describe(e).is_some_and(|d| instruction.ends_with(&format!(" {d}.")));
    let anchors: Vec<&Element> = shot.elements.iter().filter(names).collect();
    let [anchor] = anchors.as_slice() else {
        panic!("anchor of {instruction:?} is not unique: {anchors:?}")
    };
    let a = anchor.rect;
    let gap = |r: Rect| -> Option<u32> {
        let rows_overlap = r.y.max(a.y) < r.bottom().min(a.bottom());
        let columns_overlap = r.x.max(a.x) < r.right().min(a.right());
        if instruction.contains(" right of ") {
            (rows_overlap && r.x >= a.right()).then(|| r.x - a.right())
        } else if instruction.contains(" left of ") {
            (rows_overlap && r.right() <= a.x).then(|| a.x - r.right())
        } else if instruction.contains(" below ") {
            (columns_overlap && r.y >= a.bottom()).then(|| r.y - a.bottom())
        } else {
            assert!(instruction.contains(" above "), "{instruction:?}");
            (columns_overlap && r.bottom() <= a.y).then(|| a.y - r.bottom())
        }
    };
    let of_noun = |e: &&Element| instruction.starts_with(&format!("Click the {} ", e.kind.noun()));
    let candidates: Vec<(u32, &Element)> = shot
        .elements
        .iter()
        .filter(of_noun)
        .filter_map(|e| Some((gap(e.rect)?, e)))
        .collect();
    let best = candidates.iter().map(|c| c.0).min();
    candidates
        .into_iter()
        .filter(|c| Some(c.0) == best)
        .map(|c| c.1)
        .collect()
}

#[test]
fn samples_are_pixel_frame_boxes_inside_their_image_with_a_source_per_family() {
    let mut sources = std::collections::BTreeSet::new();
    for (cfg, i, shot) in screenshots() {
        for s in samples_of(&shot, &cfg, i, "x.png") {
            assert_eq!(s.frame, Frame::Pixel);
            assert_eq!(s.task == Task::Detection, s.instruction.starts_with("Find all "));
            let (w, h) = (f64::from(s.images[0].width), f64::from(s.images[0].height));
            for t in &s.targets {
                let Shape::Box([x1, y1, x2, y2]) = t.shape else {
                    panic!("not a box")
                };
                assert!(0.0 <= x1 && x1 < x2 && x2 <= w && 0.0 <= y1 && y1 < y2 && y2 <= h);
            }
            sources.insert(s.source);
        }
    }
    let expected = ["synth/dialog", "synth/list", "synth/toolbar"].map(String::from);
    assert_eq!(sources.into_iter().collect::<Vec<_>>(), expected);
}

#[test]
fn easy_screenshots_are_small_with_few_large_elements() {
    for i in 0..30 {
        let shot = render_screenshot(&config(Difficulty::Easy, 3, 0), i);
        let (w, h) = shot.image.dimensions();
        assert!((224..=448).contains(&w) && (224..=448).contains(&h));
        assert!(shot.elements.len() <= 6);
        assert!(shot.style.font_px >= 13.0);
    }
}

/// Easy screenshots of one size and layout put their first element within a few pixels of one
/// place when the window fills the image (the text height alone moves it); a window placed anywhere
/// moves it across the image, and every element stays inside the image.
#[test]
fn a_window_placed_anywhere_moves_the_elements() {
    let mut cfg = config(Difficulty::Easy, 5, 0);
    cfg.size = Some((224, 224));
    cfg.knobs.variety.layouts = vec![Family::Toolbar];
    // The largest distance, in pixels along x and along y, between the first elements of 40 screenshots.
    let spread = |cfg: &SynthConfig| {
        let firsts: Vec<Rect> = (0..40)
            .map(|i| render_screenshot(cfg, i))
            .inspect(|shot| {
                let inside = |r: &Rect| r.right() <= 224 && r.bottom() <= 224;
                assert!(shot.elements.iter().all(|el| inside(&el.rect)));
            })
            .map(|shot| shot.elements[0].rect)
            .collect();
        let range = |of: fn(&Rect) -> u32| {
            let values = firsts.iter().map(of);
            values.clone().max().unwrap() - values.min().unwrap()
        };
        (range(|r| r.x), range(|r| r.y))
    };
    assert_eq!(cfg.knobs.window, Window::Full);
    let (x, y) = spread(&cfg);
    assert!(x <= 4 && y <= 8, "{x}, {y}");
    cfg.knobs.window = Window::Anywhere;
    let (x, y) = spread(&cfg);
    assert!(x >= 80 && y >= 80, "{x}, {y}");
    assert_eq!("anywhere".parse(), Ok(Window::Anywhere));
}

#[test]
fn a_fixed_size_is_honoured_up_to_4k() {
    let mut cfg = config(Difficulty::Hard, 1, 0);
    cfg.size = Some((3840, 2160));
    assert_eq!(render_screenshot(&cfg, 0).image.dimensions(), (3840, 2160));
}

/// A held-out variety (the dialog layout alone, the ocean theme, paraphrased instructions) draws only
/// what it names, and paraphrasing changes the words alone: the same elements, tasks and targets as
/// the click wording, each instruction the click one with another verb.
#[test]
fn a_variety_draws_only_what_it_names_and_paraphrases_the_same_tasks() {
    let mut held_out = config(Difficulty::Medium, 7, 40);
    held_out.knobs.variety = Variety {
        layouts: vec![Family::Dialog],
        themes: Variety::parse_themes("ocean").unwrap(),
        wording: Wording::Paraphrased,
    };
    let mut clicks = held_out.clone();
    clicks.knobs.variety.wording = Wording::Click;
    let dialog = [Kind::Label, Kind::TextField, Kind::Checkbox, Kind::Button];
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..40 {
        let (shot, click) = (render_screenshot(&held_out, i), render_screenshot(&clicks, i));
        assert_eq!((shot.family, shot.theme.name), (Family::Dialog, "ocean"));
        assert!(shot.elements.iter().all(|el| dialog.contains(&el.kind)));
        let rects = |s: &Screenshot| s.elements.iter().map(|el| el.rect).collect::<Vec<_>>();
        assert_eq!(rects(&shot), rects(&click));
        assert_eq!(shot.tasks.len(), click.tasks.len());
        for (task, plain) in shot.tasks.iter().zip(&click.tasks) {
            assert_eq!((task.kind, &task.targets), (plain.kind, &plain.targets));
            let verb = if task.kind == TaskKind::Detection {
                "Find "
            } else {
                "Click "
            };
            let rest = plain.instruction.strip_prefix(verb).unwrap();
            assert!(
                task.instruction.ends_with(rest) && !task.instruction.starts_with(verb),
                "{task:?}"
            );
            seen.insert(task.instruction.split(' ').next().unwrap().to_string());
        }
    }
    assert!(seen.len() >= 4, "{seen:?}");
}
