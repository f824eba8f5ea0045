//! A final answer written about a zoomed view, re-expressed about the full screenshot.
//!
//! With [`super::AnswerView::Last`] the model answers about the last image it was shown: after a
//! zoom, its numbers are positions in the enlarged crop. Rewards and metrics compare answers with
//! targets about the full screenshot, so the answer's coordinates are carried through original
//! pixels ([`View::to_original`], then [`View::from_original`] of the full view) into the same frame
//! about the full view. The mapping is one scale and one offset per axis, so box centres (the
//! clicks of box answers) map to the centres of the mapped boxes.

use serde_json::json;

use super::View;
use groundrl_score::frame::Frame;
use groundrl_score::geometry::Point;
use groundrl_score::parse::{Answer, Parsed, RawBox, RawPoint, ToolCall};

/// `parsed`, written about `shown`, with its coordinates (boxes, points, a tool call's
/// `coordinate`) re-expressed about `full`. The numbers are read in `parsed.frame_hint` when the
/// syntax implies a frame, else in `model_frame`, and written back in that same frame, so
/// `frame_hint` stays true of the result. Everything else (confidence, syntax, structure, labels) is
/// kept. When `shown` is the full view the result is `parsed` itself, bit for bit.
pub fn answer_in_full_view(parsed: &Parsed, shown: &View, full: &View, model_frame: Frame) -> Parsed {
    if shown == full {
        return parsed.clone();
    }
    let frame = parsed.frame_hint.unwrap_or(model_frame);
    let map = |[x, y]: [f64; 2]| {
        let p = full.from_original(shown.to_original(Point::new(x, y), frame), frame);
        [p.x, p.y]
    };
    let answer = match &parsed.answer {
        Answer::Boxes(boxes) => Answer::Boxes(
            boxes
                .iter()
                .map(|b| {
                    let [x1, y1, x2, y2] = b.coords;
                    let ([a, b1], [c, d]) = (map([x1, y1]), map([x2, y2]));
                    RawBox {
                        coords: [a, b1, c, d],
                        label: b.label.clone(),
                    }
                })
                .collect(),
        ),
        Answer::Points(points) => Answer::Points(
            points
                .iter()
                .map(|p| RawPoint {
                    coords: map(p.coords),
                    label: p.label.clone(),
                })
                .collect(),
        ),
        Answer::NoObjects => Answer::NoObjects,
        Answer::ToolCall(call) => Answer::ToolCall(with_coordinate_mapped(call, map)),
    };
    Parsed {
        answer,
        ..parsed.clone()
    }
}

/// `call` with its `coordinate` argument (the click of GUI-agent calls) mapped; other arguments,
/// and calls without a coordinate, are left as they are.
fn with_coordinate_mapped(call: &ToolCall, map: impl Fn([f64; 2]) -> [f64; 2]) -> ToolCall {
    let mut call = call.clone();
    if let (Some(point), Some(arguments)) = (call.coordinate(), call.arguments.as_object_mut()) {
        arguments.insert("coordinate".into(), json!(map(point.coords)));
    }
    call
}

#[cfg(test)]
mod tests {
    use super::*;
    use groundrl_score::frame::{ImageFrames, Size};
    use groundrl_score::parse::parse_completion;

    /// The full screenshot: 400 x 200, resized to 392 x 196 (x 0.98).
    fn full() -> View {
        View::full(ImageFrames {
            original: Size::new(400.0, 200.0),
            resized: Size::new(392.0, 196.0),
        })
    }

    /// The region x 100..300, y 50..150 shown 3x as 600 x 300, resized to 616 x 308.
    fn zoomed() -> View {
        View {
            origin: Point::new(100.0, 50.0),
            region: Size::new(200.0, 100.0),
            frames: ImageFrames {
                original: Size::new(600.0, 300.0),
                resized: Size::new(616.0, 308.0),
            },
        }
    }

    fn mapped(text: &str) -> Parsed {
        answer_in_full_view(
            &parse_completion(text).unwrap(),
            &zoomed(),
            &full(),
            Frame::Resized,
        )
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        let close = got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9);
        assert!(close, "{got:?}, expected {want:?}");
    }

    #[test]
    fn points_and_boxes_move_from_the_zoom_to_the_full_view() {
        // Resized (308, 154) of the zoom is shown pixel (300, 150), original (200, 100), full resized
        // (196, 98). The label and the confidence stay.
        let p = mapped("{\"point_2d\": [308, 154], \"label\": \"OK\"}\n<confidence>0.9</confidence>");
        let Answer::Points(points) = &p.answer else {
            panic!("{p:?}")
        };
        assert_close(&points[0].coords, &[196.0, 98.0]);
        assert_eq!(points[0].label.as_deref(), Some("OK"));
        assert_eq!((p.confidence, p.frame_hint), (Some(0.9), None));
        // The whole zoom [0, 0, 616, 308] is original [100, 50, 300, 150], full [98, 49, 294, 147].
        let b = mapped("[0, 0, 616, 308]");
        assert_close(&b.boxes()[0].coords, &[98.0, 49.0, 294.0, 147.0]);
        assert_close(&b.click_points()[0], &[196.0, 98.0]);
    }

    #[test]
    fn a_frame_hint_decides_the_frame_and_is_kept() {
        // Qwen-VL tokens are on the 0-1000 grid of the zoom: (0, 1000) is original (100, 150), which
        // is (250, 750) on the grid of the full view; (1000, 0) is (300, 50), so (750, 250).
        let p = mapped("<|box_start|>(0,1000),(1000,0)<|box_end|>");
        assert_eq!(p.frame_hint, Some(Frame::Qwen1000));
        assert_close(&p.boxes()[0].coords, &[250.0, 750.0, 750.0, 250.0]);
    }

    #[test]
    fn a_tool_call_coordinate_is_mapped_and_other_arguments_kept() {
        let text = r#"<tool_call>{"name": "computer", "arguments": {"action": "left_click", "coordinate": [308, 154]}}</tool_call>"#;
        let p = mapped(text);
        let Answer::ToolCall(call) = &p.answer else {
            panic!("{p:?}")
        };
        assert_eq!(call.arguments["action"], "left_click");
        assert_close(&call.coordinate().unwrap().coords, &[196.0, 98.0]);
        let zoom = r#"<tool_call>{"name": "zoom", "arguments": {"bbox_2d": [1, 2, 3, 4]}}</tool_call>"#;
        assert_eq!(mapped(zoom), parse_completion(zoom).unwrap());
        assert_eq!(mapped("None"), parse_completion("None").unwrap());
    }

    #[test]
    fn the_full_view_changes_no_bit() {
        // Through original pixels 0.1 resized would come back as 0.1 only up to rounding.
        let parsed = parse_completion("[0.1, 3.3, 391.7, 195.9]\n(17.3, 0.7)").unwrap();
        for frame in Frame::ALL {
            assert_eq!(answer_in_full_view(&parsed, &full(), &full(), frame), parsed);
        }
    }
}
