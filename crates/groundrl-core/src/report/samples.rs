//! Sample screenshots: a few answers of the last evaluation, each drawn as the screenshot with the
//! target boxes (green) and the model's point or box (red) over it.
//!
//! The screenshot is embedded as a PNG data URI, shrunk to at most 640 px a side so eight of them keep
//! the page light; the overlay is an SVG in the original image's pixels (the records' frame), so the
//! boxes land where they belong whatever the shrinking did.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use base64::prelude::{BASE64_STANDARD, Engine};
use image::ImageFormat;
use image::imageops::FilterType;

use crate::data::image_file::{self, ImageLimits};
use crate::plot::{escape, format_value};
use crate::telemetry::EvalRecord;

/// Samples shown at most.
pub const MAX_SAMPLES: usize = 8;
/// Longest side of an embedded screenshot, in pixels.
const MAX_SIDE: u32 = 640;
/// Width a sample is shown at, small screenshots enlarged and large ones shrunk alike.
const SHOWN_WIDTH: u32 = 360;
/// Completions longer than this are cut in the caption.
const MAX_COMPLETION_CHARS: usize = 300;

/// One answer to show, with its screenshot.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleView {
    pub record: EvalRecord,
    /// The screenshot as a PNG data URI, or why it could not be read.
    pub image: Result<String, String>,
}

/// Picks the samples of `records` (see [`pick`]) and reads their screenshots, paths relative to
/// `images` and kept inside it ([`crate::data::confine`]); a screenshot shared by several samples is
/// read once.
pub(super) fn load(records: &[EvalRecord], images: &Path) -> Vec<SampleView> {
    let mut cache: BTreeMap<&str, Result<String, String>> = BTreeMap::new();
    pick(records, MAX_SAMPLES)
        .into_iter()
        .map(|record| {
            let image = cache
                .entry(&record.image)
                .or_insert_with(|| data_uri(images, &record.image))
                .clone();
            SampleView {
                record: record.clone(),
                image,
            }
        })
        .collect()
}

/// Up to `max` records, half right and half wrong when there are enough of each (either kind fills
/// in for the other), the first of each kind in file order, returned in file order.
fn pick(records: &[EvalRecord], max: usize) -> Vec<&EvalRecord> {
    let right = records.iter().filter(|r| r.correct).count();
    let wrong = records.len() - right;
    let take_wrong = wrong.min(max - right.min(max / 2));
    let take_right = right.min(max - take_wrong);
    let (mut r, mut w) = (0, 0);
    records
        .iter()
        .filter(|rec| {
            let (taken, limit) = if rec.correct {
                (&mut r, take_right)
            } else {
                (&mut w, take_wrong)
            };
            *taken += 1;
            *taken <= limit
        })
        .collect()
}

/// The image `name` in `folder` as a PNG data URI, shrunk to [`MAX_SIDE`]; or why it could not be read.
fn data_uri(folder: &Path, name: &str) -> Result<String, String> {
    let image = image_file::open(folder, name, ImageLimits::default()).map_err(|e| e.to_string())?;
    let image = if image.width() > MAX_SIDE || image.height() > MAX_SIDE {
        image.resize(MAX_SIDE, MAX_SIDE, FilterType::Triangle)
    } else {
        image
    };
    let mut png = Vec::new();
    image
        .to_rgb8()
        .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(format!("data:image/png;base64,{}", BASE64_STANDARD.encode(png)))
}

impl SampleView {
    /// The sample as an HTML `<figure>`: the screenshot with targets and answer drawn, and a caption
    /// with the instruction, the verdict, the reward and the raw completion.
    pub fn html(&self) -> String {
        let r = &self.record;
        let (w, h) = (r.width.max(1), r.height.max(1));
        let shown_h = (f64::from(h) * f64::from(SHOWN_WIDTH) / f64::from(w)).round();
        let verdict = if r.correct { "right" } else { "wrong" };
        let mut svg = format!(
            r#"<svg class="sample-view" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{SHOWN_WIDTH}" height="{shown_h}" role="img">"#
        );
        match &self.image {
            Ok(uri) => svg.push_str(&format!(
                r#"<image href="{uri}" x="0" y="0" width="{w}" height="{h}" preserveAspectRatio="none"/>"#
            )),
            Err(_) => svg.push_str(&format!(r##"<rect width="{w}" height="{h}" fill="#ddd"/>"##)),
        }
        for target in &r.targets {
            svg.push_str(&rect(target, "target", "#1a9641", ""));
        }
        if let Some(pred) = &r.pred_box {
            svg.push_str(&rect(pred, "pred-box", "#d7191c", r#" stroke-dasharray="6 4""#));
        }
        if let Some(point) = r.point {
            svg.push_str(&crosshair(point, w.max(h)));
        }
        svg.push_str("</svg>");
        let mut caption = format!(
            r#"<b class="verdict">{verdict}</b> · {} · {} · reward {}<br>{}<br><code>{}</code>"#,
            escape(&r.id),
            escape(&r.source),
            format_value(r.reward),
            escape(&r.instruction),
            escape(&shorten(&r.completion)),
        );
        if let Some(confidence) = r.confidence {
            caption.push_str(&format!("<br>stated confidence {}", format_value(confidence)));
        }
        if r.point.is_none() && r.pred_box.is_none() {
            caption.push_str(r#"<br><span class="note">no answer could be read</span>"#);
        }
        if let Err(why) = &self.image {
            caption.push_str(&format!(
                r#"<br><span class="note">image not shown: {}</span>"#,
                escape(why)
            ));
        }
        format!(r#"<figure class="sample {verdict}">{svg}<figcaption>{caption}</figcaption></figure>"#)
    }
}

/// An outlined box (corners in either order), its stroke as thick on screen whatever the scaling.
fn rect(b: &[f64; 4], class: &str, colour: &str, extra: &str) -> String {
    let (x, y) = (b[0].min(b[2]), b[1].min(b[3]));
    let (w, h) = ((b[2] - b[0]).abs(), (b[3] - b[1]).abs());
    format!(
        r#"<rect class="{class}" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="{colour}" stroke-width="3" vector-effect="non-scaling-stroke"{extra}/>"#,
        format_value(x),
        format_value(y),
        format_value(w),
        format_value(h)
    )
}

/// A ring with a cross through it at the predicted click, sized to the image.
fn crosshair([x, y]: [f64; 2], side: u32) -> String {
    let r = f64::from(side) / 60.0;
    let (cx, cy, rr, arm) = (
        format_value(x),
        format_value(y),
        format_value(r),
        format_value(r * 1.8),
    );
    format!(
        r##"<g class="pred-point" stroke="#d7191c" stroke-width="3" vector-effect="non-scaling-stroke" fill="none"><circle cx="{cx}" cy="{cy}" r="{rr}" vector-effect="non-scaling-stroke"/><path d="M{} {cy}h{arm}M{cx} {}v{arm}" vector-effect="non-scaling-stroke"/></g>"##,
        format_value(x - r * 0.9),
        format_value(y - r * 0.9),
    )
}

/// The completion, cut with "…" past [`MAX_COMPLETION_CHARS`].
fn shorten(text: &str) -> String {
    if text.chars().count() <= MAX_COMPLETION_CHARS {
        text.to_string()
    } else {
        text.chars().take(MAX_COMPLETION_CHARS).chain(['…']).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, correct: bool) -> EvalRecord {
        EvalRecord {
            id: id.into(),
            source: "synth".into(),
            image: "shot.png".into(),
            width: 200,
            height: 100,
            instruction: "click <OK>".into(),
            targets: vec![[10.0, 20.0, 50.0, 40.0]],
            completion: "(30, 30)".into(),
            point: Some([30.0, 30.0]),
            pred_box: None,
            correct,
            reward: if correct { 1.0 } else { 0.0 },
            confidence: None,
            tool_calls: 0,
            tool_calls_ok: 0,
            target_size: None,
            sampled: None,
        }
    }

    fn ids(picked: &[&EvalRecord]) -> Vec<String> {
        picked.iter().map(|r| r.id.clone()).collect()
    }

    #[test]
    fn picks_mix_right_and_wrong_in_file_order() {
        // r0 w1 r2 r3 r4 r5 r6 w7 w8 w9 w10 w11: four of each.
        let pattern = [
            true, false, true, true, true, true, true, false, false, false, false, false,
        ];
        let records: Vec<EvalRecord> = pattern
            .iter()
            .enumerate()
            .map(|(i, &c)| record(&format!("{}{i}", if c { "r" } else { "w" }), c))
            .collect();
        assert_eq!(
            ids(&pick(&records, 8)),
            ["r0", "w1", "r2", "r3", "r4", "w7", "w8", "w9"]
        );
        // Two wrong only: right answers fill in to eight.
        let few_wrong: Vec<EvalRecord> = records[..8].to_vec();
        assert_eq!(
            ids(&pick(&few_wrong, 8)),
            ["r0", "w1", "r2", "r3", "r4", "r5", "r6", "w7"]
        );
        assert_eq!(ids(&pick(&records[..3], 8)), ["r0", "w1", "r2"]);
        assert!(pick(&[], 8).is_empty());
    }

    #[test]
    fn a_figure_draws_targets_and_the_answer_in_image_pixels() {
        let view = SampleView {
            record: record("s1", false),
            image: Ok("data:image/png;base64,AAAA".into()),
        };
        let html = view.html();
        assert!(html.starts_with(r#"<figure class="sample wrong"><svg class="sample-view" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 200 100" width="360" height="180""#));
        assert!(
            html.contains(r#"<image href="data:image/png;base64,AAAA" x="0" y="0" width="200" height="100""#)
        );
        assert!(html.contains(
            r##"<rect class="target" x="10" y="20" width="40" height="20" fill="none" stroke="#1a9641""##
        ));
        // Ring of radius 200 / 60 = 3.333 around (30, 30).
        assert!(html.contains(r#"<circle cx="30" cy="30" r="3.333""#));
        assert!(html.contains("click &lt;OK&gt;"));
        assert!(!html.contains("image not shown"));
    }

    #[test]
    fn a_missing_image_is_a_grey_field_with_a_note() {
        let mut r = record("s2", true);
        r.point = None;
        r.pred_box = Some([60.0, 40.0, 20.0, 10.0]);
        r.width = 1000;
        r.height = 500;
        let view = SampleView {
            record: r,
            image: Err("shot.png: No such file".into()),
        };
        let html = view.html();
        assert!(!html.contains("<image"));
        assert!(html.contains(r#"viewBox="0 0 1000 500" width="360" height="180""#));
        assert!(html.contains(r#"<rect class="pred-box" x="20" y="10" width="40" height="30""#));
        assert!(html.contains("image not shown: shot.png: No such file"));
    }

    #[test]
    fn screenshots_are_shrunk_png_data_uris() {
        let dir = tempfile::tempdir().unwrap();
        image::RgbImage::from_pixel(1280, 320, image::Rgb([10, 20, 30]))
            .save(dir.path().join("big.png"))
            .unwrap();
        let uri = data_uri(dir.path(), "big.png").unwrap();
        let png = BASE64_STANDARD
            .decode(uri.strip_prefix("data:image/png;base64,").unwrap())
            .unwrap();
        let shrunk = image::load_from_memory(&png).unwrap();
        assert_eq!((shrunk.width(), shrunk.height()), (640, 160));
        let err = data_uri(dir.path(), "none.png").unwrap_err();
        assert!(err.ends_with("none.png does not exist"), "{err}");
        let err = data_uri(&dir.path().join("sub"), "../big.png").unwrap_err();
        assert!(err.contains("\"../big.png\" steps up with `..`"), "{err}");
    }
}
