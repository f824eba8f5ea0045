//! Prompt presets: exact texts, placement by model kind, the stated frame.

use std::collections::BTreeMap;

use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning, apply, build_prompt};
use groundrl_score::data::{Content, ImageRef, Message, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;

fn sample(task: Task, instruction: &str, labels: &[&str]) -> Sample {
    Sample {
        id: "s1".into(),
        source: "synth/toolbar".into(),
        task,
        images: vec![ImageRef {
            path: "a.png".into(),
            width: 640,
            height: 400,
        }],
        instruction: instruction.into(),
        targets: labels
            .iter()
            .map(|l| Target {
                shape: Shape::Box([1.0, 2.0, 3.0, 4.0]),
                label: Some(l.to_string()),
            })
            .collect(),
        frame: Frame::Pixel,
        none: false,
        prompt: vec![],
        metadata: BTreeMap::new(),
    }
}

fn text(m: &Message) -> &str {
    m.content
        .iter()
        .find_map(|c| {
            if let Content::Text { text } = c {
                Some(text.as_str())
            } else {
                None
            }
        })
        .unwrap()
}

#[test]
fn instruct_point_prompt_is_one_user_turn_with_image_then_text_in_the_resized_frame() {
    let style = PromptStyle {
        preset: Preset::Point,
        reasoning: Reasoning::None,
        model: ModelKind::Instruct,
        frame: Frame::Resized,
    };
    let msgs = build_prompt(
        &sample(Task::PointGrounding, "Click the \"Save\" button", &["Save"]),
        &style,
    )
    .unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].role, "user");
    assert_eq!(msgs[0].content[0], Content::Image { image: 0 });
    assert_eq!(
        text(&msgs[0]),
        "Click the \"Save\" button. Answer with the click point (x, y) in pixels of the image as you see it."
    );
}

#[test]
fn base_model_gets_format_and_reasoning_in_the_system_prompt() {
    let style = PromptStyle {
        preset: Preset::Box,
        reasoning: Reasoning::Standard,
        model: ModelKind::Base,
        frame: Frame::Qwen1000,
    };
    let msgs = build_prompt(
        &sample(Task::BoxGrounding, "Click the red circle icon.", &[]),
        &style,
    )
    .unwrap();
    assert_eq!(
        msgs.iter().map(|m| m.role.as_str()).collect::<Vec<_>>(),
        ["system", "user"]
    );
    assert_eq!(
        text(&msgs[0]),
        "Answer with the bounding box [x1, y1, x2, y2] on a 0 to 1000 scale of the image width and height. \
         Output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
    );
    assert_eq!(text(&msgs[1]), "Click the red circle icon.");
}

#[test]
fn ovd_prompt_lists_distinct_labels_and_passes_lint_with_metadata_recorded() {
    let style = PromptStyle {
        preset: Preset::OvdJson,
        reasoning: Reasoning::Enhanced,
        model: ModelKind::Instruct,
        frame: Frame::Pixel,
    };
    let mut s = sample(
        Task::Detection,
        "Find all checkboxes.",
        &["checkbox", "checkbox", "button"],
    );
    apply(&mut s, &style).unwrap();
    let t = text(&s.prompt[0]);
    assert!(t.starts_with(
        "Please carefully observe the image and detect the following targets: checkbox; button. Output each \
         detected target's bbox coordinates in pixels of the original 640x400 image in JSON format."
    ), "{t}");
    assert!(
        t.ends_with("<think> reasoning process here </think><answer> answer here </answer>."),
        "{t}"
    );
    assert_eq!(s.metadata["answer_format"], "json_list");
    assert_eq!(s.metadata["answer_frame"], "pixel");
    assert_eq!(s.metadata["reasoning"], "enhanced");
    assert_eq!(groundrl_core::data::lint::lint(&[s]), vec![]);
}

#[test]
fn every_preset_and_frame_renders_lint_clean() {
    for preset in [Preset::Point, Preset::Box, Preset::OvdJson] {
        for reasoning in [Reasoning::None, Reasoning::Standard, Reasoning::Enhanced] {
            for model in [ModelKind::Instruct, ModelKind::Base] {
                for frame in Frame::ALL {
                    let task = if preset == Preset::OvdJson {
                        Task::Detection
                    } else {
                        Task::PointGrounding
                    };
                    let mut s = sample(task, "Find the thing", &["thing"]);
                    apply(
                        &mut s,
                        &PromptStyle {
                            preset,
                            reasoning,
                            model,
                            frame,
                        },
                    )
                    .unwrap();
                    assert_eq!(groundrl_core::data::lint::lint(&[s.clone()]), vec![], "{s:?}");
                }
            }
        }
    }
}

#[test]
fn a_sample_without_a_prompt_is_asked_in_the_frame_of_the_model_asked() {
    let click = sample(Task::PointGrounding, "Click Save", &["Save"]);
    let asked = |frame| {
        text(&build_prompt(&click, &PromptStyle::unprompted(click.task, frame)).unwrap()[0]).to_string()
    };
    assert_eq!(
        asked(Frame::Qwen1000),
        "Click Save. Answer with the click point (x, y) on a 0 to 1000 scale of the image width and height."
    );
    assert_eq!(
        asked(Frame::Resized),
        "Click Save. Answer with the click point (x, y) in pixels of the image as you see it."
    );
    let detect = sample(Task::Detection, "cats", &["cat"]);
    let style = PromptStyle::unprompted(detect.task, Frame::Qwen1000);
    assert_eq!(
        (style.preset, style.reasoning, style.model),
        (Preset::OvdJson, Reasoning::None, ModelKind::Instruct)
    );
}
