//! `data lint` rules, each on the text that triggers it and on its fixed form.

use std::collections::BTreeMap;

use groundrl_core::data::lint::{Rule, lint, text_problems};
use groundrl_score::data::{Content, ImageRef, Message, Sample, Task};
use groundrl_score::frame::Frame;

fn rules(text: &str) -> Vec<Rule> {
    text_problems(text).into_iter().map(|(r, _)| r).collect()
}

#[test]
fn missing_space_after_a_sentence_is_found_and_the_fixed_text_is_clean() {
    let bad = "detect: person sit on motorcycle; motorcycle is sat on by person.Output each detected target.";
    let good =
        "detect: person sit on motorcycle; motorcycle is sat on by person. Output each detected target.";
    assert_eq!(rules(bad), vec![Rule::MissingSpace]);
    assert_eq!(rules(good), vec![]);
    assert_eq!(rules("Open report.pdf, e.g. with 0.5 zoom."), vec![]);
}

#[test]
fn doubled_spaces_tags_and_template_leftovers_are_found() {
    assert_eq!(rules("Click  the button."), vec![Rule::DoubledSpace]);
    assert_eq!(rules("<think> a </think><answer> b"), vec![Rule::UnbalancedTag]);
    assert_eq!(rules("<think> a </think><answer> b </answer>"), vec![]);
    assert_eq!(
        rules("Find {{ target }}."),
        vec![Rule::UnfilledVariable, Rule::UnfilledVariable]
    );
    assert_eq!(rules("Find {target}."), vec![Rule::UnfilledVariable]);
    assert_eq!(rules("Answer [{\"bbox_2d\": [1, 2, 3, 4]}]."), vec![]);
}

fn sample(task: Task, prompt: &str, metadata: BTreeMap<String, serde_json::Value>) -> Sample {
    Sample {
        id: "x-7".into(),
        source: "s".into(),
        task,
        images: vec![ImageRef {
            path: "a.png".into(),
            width: 10,
            height: 10,
        }],
        instruction: "Find it.".into(),
        targets: vec![],
        frame: Frame::Pixel,
        none: true,
        prompt: vec![Message {
            role: "user".into(),
            content: vec![Content::Text { text: prompt.into() }],
        }],
        metadata,
    }
}

#[test]
fn a_prompt_asking_for_another_format_than_expected_is_found_with_the_sample_id() {
    let point = "Find it. Answer with the click point (x, y) in pixels.";
    assert_eq!(
        lint(&[sample(Task::PointGrounding, point, BTreeMap::new())]),
        vec![]
    );
    let findings = lint(&[sample(Task::Detection, point, BTreeMap::new())]);
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].rule, Rule::FormatMismatch);
    assert_eq!(
        findings[0].to_string(),
        "x-7: prompt: format-mismatch: the prompt asks for point; expected json_list"
    );
    let meta = BTreeMap::from([("answer_format".to_string(), serde_json::json!("box"))]);
    assert_eq!(
        lint(&[sample(Task::PointGrounding, point, meta)])[0].rule,
        Rule::FormatMismatch
    );
    let findings = lint(&[sample(Task::PointGrounding, "Find it.", BTreeMap::new())]);
    assert_eq!(
        findings[0].detail,
        "the prompt asks for no answer format; expected point or box"
    );
}

/// A box wholly outside its image (negative coordinates) is found, naming the sample and the target;
/// one that only crosses an edge is not.
#[test]
fn a_target_wholly_outside_its_image_is_found() {
    use groundrl_score::data::{Shape, Target};
    let mut s = sample(Task::BoxGrounding, "Find it.", BTreeMap::new());
    s.none = false;
    s.targets = vec![Target {
        shape: Shape::Box([-4.0, -3.0, -1.0, -0.5]),
        label: None,
    }];
    let outside = |s: &Sample| -> Vec<_> {
        lint(std::slice::from_ref(s))
            .into_iter()
            .filter(|f| f.rule == Rule::TargetOutsideImage)
            .collect()
    };
    let findings = outside(&s);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].field, "targets");
    assert_eq!(
        findings[0].to_string(),
        "x-7: targets: target-outside-image: targets[0]: Box([-4.0, -3.0, -1.0, -0.5]) lies wholly \
         outside the 10x10 pixel frame"
    );
    s.targets[0].shape = Shape::Box([-4.0, -3.0, 2.0, 2.0]);
    assert_eq!(outside(&s), vec![]);
}
