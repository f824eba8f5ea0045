//! Generated data passes `data lint` and `data check`, before and after prompts are attached; and
//! `data check` finds each problem it names, counted per source.

use std::path::PathBuf;

use groundrl_core::data::check::{Problem, check, write_previews};
use groundrl_core::data::image_file::ImageLimits;
use groundrl_core::data::jsonl::read_jsonl;
use groundrl_core::data::lint::lint;
use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning, build_prompt};
use groundrl_core::synth::{Difficulty, SynthConfig, generate};
use groundrl_score::data::{Sample, Shape, Task};
use groundrl_score::frame::Frame;

fn generated(name: &str, difficulty: Difficulty, prompt: Option<PromptStyle>) -> (PathBuf, Vec<Sample>) {
    let dir = std::env::temp_dir().join(format!("groundrl-synth-quality-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = SynthConfig {
        screenshots: 12,
        seed: 5,
        size: None,
        knobs: difficulty.knobs(),
        prompt,
    };
    generate(&config, &dir).unwrap();
    let loaded = read_jsonl(&dir.join("samples.jsonl")).unwrap();
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    (dir, loaded.samples)
}

#[test]
fn generated_data_is_lint_and_check_clean_with_and_without_prompts() {
    for (name, difficulty) in [("easy", Difficulty::Easy), ("hard", Difficulty::Hard)] {
        let (plain_dir, plain) = generated(name, difficulty, None);
        assert_eq!(lint(&plain), vec![]);
        assert!(plain.iter().all(|s| s.prompt.is_empty()));
        let report = check(&plain, &plain_dir, ImageLimits::default());
        assert_eq!(report.samples, plain.len());
        assert_eq!(report.issues, vec![]);
        std::fs::remove_dir_all(plain_dir).unwrap();

        let style = PromptStyle {
            preset: Preset::Box,
            reasoning: Reasoning::Enhanced,
            model: ModelKind::Instruct,
            frame: Frame::Resized,
        };
        let (dir, samples) = generated(&format!("{name}-prompted"), difficulty, Some(style));
        assert_eq!(samples.len(), plain.len());
        for s in &samples {
            // The generator asks each task in its own format, whatever preset the style names.
            let format = if s.task == Task::Detection {
                "json_list"
            } else {
                "point"
            };
            assert_eq!(s.metadata["answer_format"], format, "{}", s.id);
            assert_eq!(
                s.prompt,
                build_prompt(s, &style.for_task(s.task)).unwrap(),
                "{}",
                s.id
            );
        }
        assert_eq!(lint(&samples), vec![]);
        let previews = write_previews(&samples, &dir, &dir.join("previews"), 3, ImageLimits::default())
            .unwrap()
            .written;
        assert_eq!(previews.len(), 3);
        let img = image::open(&previews[0]).unwrap().to_rgb8();
        assert_eq!(
            img.dimensions(),
            (samples[0].images[0].width, samples[0].images[0].height)
        );
        assert!(img.pixels().any(|p| p.0 == [255, 0, 200]), "no target drawn");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn check_names_each_problem_and_counts_it_per_source() {
    let (dir, samples) = generated("broken", Difficulty::Easy, None);
    let mut broken: Vec<Sample> = samples[..5].to_vec();
    broken[0].images[0].path = "images/missing.png".into();
    broken[1].images[0].width += 1;
    broken[2].targets[0].shape = Shape::Box([5.0, 5.0, 5.0, 9.0]);
    let w = f64::from(broken[3].images[0].width);
    broken[3].targets[0].shape = Shape::Box([1.0, 1.0, w + 1.0, 9.0]);
    broken[4].none = true;
    broken[4].source = "synth/other".into();
    std::fs::write(dir.join("images/bad.png"), b"not a png").unwrap();
    let mut undecodable = samples[5].clone();
    undecodable.images[0].path = "images/bad.png".into();
    broken.push(undecodable);
    let report = check(&broken, &dir, ImageLimits::default());
    let problems: Vec<(Problem, &str)> = report
        .issues
        .iter()
        .map(|i| (i.problem, i.sample_id.as_str()))
        .collect();
    assert_eq!(
        problems,
        vec![
            (Problem::MissingImage, broken[0].id.as_str()),
            (Problem::SizeMismatch, broken[1].id.as_str()),
            (Problem::DegenerateBox, broken[2].id.as_str()),
            (Problem::OutsideImage, broken[3].id.as_str()),
            (Problem::NoneInconsistent, broken[4].id.as_str()),
            (Problem::UndecodableImage, broken[5].id.as_str()),
        ]
    );
    let counts = report.counts();
    assert_eq!(counts[&(Problem::NoneInconsistent, "synth/other".to_string())], 1);
    assert_eq!(counts.values().sum::<usize>(), 6);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn normalized_and_qwen1000_frames_are_checked_against_their_own_extent() {
    let (dir, samples) = generated("frames", Difficulty::Easy, None);
    let mut s = samples[1].clone();
    s.frame = Frame::Normalized;
    s.targets.truncate(1);
    s.targets[0].shape = Shape::Box([0.1, 0.1, 0.5, 0.5]);
    assert_eq!(
        check(std::slice::from_ref(&s), &dir, ImageLimits::default()).issues,
        vec![]
    );
    s.targets[0].shape = Shape::Box([0.1, 0.1, 1.5, 0.5]);
    assert_eq!(
        check(std::slice::from_ref(&s), &dir, ImageLimits::default()).issues[0].problem,
        Problem::OutsideImage
    );
    s.frame = Frame::Qwen1000;
    assert_eq!(
        check(std::slice::from_ref(&s), &dir, ImageLimits::default()).issues,
        vec![]
    );
    std::fs::remove_dir_all(dir).unwrap();
}
