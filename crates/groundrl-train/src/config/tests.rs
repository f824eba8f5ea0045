use std::path::{Path, PathBuf};

use groundrl_core::tool::AnswerView;
use groundrl_score::frame::{Frame, FrameChoice};
use groundrl_score::resize::PixelBudget;
use groundrl_tensor::hf_folder::RandomFolder;
use groundrl_tensor::model::Recompute;

use super::*;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn overrides(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A small config that validates; tests change one thing at a time.
const VALID: &str = r#"
[model]
preset = "tiny"

[data]
train = "train.jsonl"

[reward]
spec = "reward.toml"
"#;

fn valid_with(changes: &[&str]) -> Result<(), ConfigError> {
    TrainConfig::from_toml_str(VALID, &overrides(changes))?.validate()
}

#[test]
fn missing_keys_take_the_documented_defaults() {
    let c = TrainConfig::from_toml_str(VALID, &[]).unwrap();
    assert_eq!(c.model.preset.folder(), Some(RandomFolder::Tiny));
    assert_eq!(c.model.dtype, Dtype::F32);
    assert!(c.model.freeze_vision && c.model.gradient_checkpointing.recompute() == Recompute::All);
    assert_eq!(c.model.lora_targets.len(), 7);
    assert_eq!(
        (c.rollout.n, c.rollout.prompts_per_step, c.rollout.max_new_tokens),
        (8, 8, 128)
    );
    assert_eq!(
        (c.trainer.total_epochs, c.trainer.max_steps, c.trainer.ppo_epochs),
        (1, 0, 1)
    );
    assert_eq!(c.trainer.early_stopping_mode, EarlyStoppingMode::Max);
    assert_eq!(c.rollout, RolloutConfig::default());
    c.validate().unwrap();
}

#[test]
fn the_resolved_config_loads_back_equal() {
    let text = r#"
[model]
path = "models/qwen"
dtype = "bf16"
device = "cuda"
lora_rank = 16
lora_alpha = 0.1
lora_targets = ["q_proj", "v_proj"]
[rollout]
temperature = 0.7
top_p = 0.95
[reward.inline]
model_frame = "resized"
[reward.inline.components.click]
kind = "point_in_box"
weight = 1.0
[trainer]
early_stopping_mode = "min"
seed = 18446744073709551
[data.held_out]
boxes = "boxes.jsonl"
[data.held_out_rewards.boxes]
spec = "detection.toml"
correct_threshold = 0.5
"#;
    let c = TrainConfig::from_toml_str(text, &overrides(&["rollout.n=3", "data.seed=7"])).unwrap();
    let written = c.to_toml().unwrap();
    assert_eq!(TrainConfig::from_toml_str(&written, &[]).unwrap(), c);
    // Every key is written, so the file documents the whole run.
    assert!(written.contains("max_prompts_per_step = 32"), "{written}");
    assert!(written.contains("lora_alpha = 0.1"), "{written}");
    let defaults = TrainConfig::default();
    assert_eq!(
        TrainConfig::from_toml_str(&defaults.to_toml().unwrap(), &[]).unwrap(),
        defaults
    );
}

#[test]
fn overrides_replace_file_values_at_any_depth() {
    let c = TrainConfig::from_toml_str(
        VALID,
        &overrides(&[
            "rollout.n=16",
            "trainer.total_epochs=3",
            "model.lora_targets=[\"q_proj\"]",
            "model.dtype=bf16",
            "trainer.run_dir=runs/try 2",
            "rollout.temperature=1",
            "reward.inline.components.c.kind=iou",
        ]),
    )
    .unwrap();
    assert_eq!(c.rollout.n, 16);
    assert_eq!(c.trainer.total_epochs, 3);
    assert_eq!(c.model.lora_targets, vec!["q_proj".to_string()]);
    assert_eq!(c.model.dtype, Dtype::Bf16);
    assert_eq!(c.trainer.run_dir, PathBuf::from("runs/try 2"));
    assert_eq!(c.rollout.temperature, 1.0);
    assert_eq!(c.reward.inline["components"]["c"]["kind"].as_str(), Some("iou"));
}

#[test]
fn unknown_keys_are_refused_with_the_nearest_name() {
    let cases = [
        (
            "[rollout]\ntemprature = 0.5\n",
            vec![],
            "unknown key `rollout.temprature`; did you mean `rollout.temperature`?",
        ),
        (
            VALID,
            vec!["trainer.micro_batch=2"],
            "unknown key `trainer.micro_batch`; did you mean `trainer.micro_batch_size`?",
        ),
        (
            "[modle]\npreset = \"tiny\"\n",
            vec![],
            "unknown key `modle`; did you mean `model`?",
        ),
        (
            VALID,
            vec!["model.lora_rnk=8"],
            "unknown key `model.lora_rnk`; did you mean `model.lora_rank`?",
        ),
    ];
    for (text, changes, message) in cases {
        let e = TrainConfig::from_toml_str(text, &overrides(&changes)).unwrap_err();
        assert_eq!(e.to_string(), message);
    }
}

#[test]
fn wrong_types_name_the_key_and_the_type_expected() {
    let cases = [
        (
            "rollout.n=eight",
            "`rollout.n`: invalid type: string \"eight\", expected u32",
        ),
        (
            "rollout.n=-1",
            "`rollout.n`: invalid value: integer `-1`, expected u32",
        ),
        (
            "model.dtype=f16",
            "`model.dtype`: unknown variant `f16`, expected `f32` or `bf16`",
        ),
        (
            "model.lora_targets=[1]",
            "`model.lora_targets[0]`: invalid type: integer `1`, expected a string",
        ),
        (
            "rollout=3",
            "`rollout`: invalid type: integer `3`, expected struct RolloutConfig",
        ),
        (
            "model.gradient_checkpointing=sometimes",
            "`model.gradient_checkpointing`: expected true, false, \"tower\" or \"auto\", got \"sometimes\"",
        ),
    ];
    for (change, message) in cases {
        let e = TrainConfig::from_toml_str(VALID, &overrides(&[change])).unwrap_err();
        assert_eq!(e.to_string(), message, "{change}");
    }
}

#[test]
fn bad_toml_and_missing_files_are_reported() {
    let e = TrainConfig::from_toml_str("[rollout\nn = 1", &[]).unwrap_err();
    assert!(e.to_string().starts_with("config is not valid TOML"), "{e}");
    let e = TrainConfig::load(Path::new("/nonexistent/x.toml"), &[]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot read config /nonexistent/x.toml"),
        "{e}"
    );
}

#[test]
fn validation_names_the_key_to_change() {
    let cases = [
        ("rollout.n=0", "`rollout.n`: must be at least 1, found 0"),
        ("rollout.top_p=0", "`rollout.top_p`: must be in (0, 1], found 0"),
        (
            "rollout.top_p=1.5",
            "`rollout.top_p`: must be in (0, 1], found 1.5",
        ),
        (
            "rollout.temperature=0",
            "`rollout.temperature`: must be above 0 (greedy completions of a prompt would all be equal), found 0",
        ),
        (
            "trainer.micro_batch_size=3",
            "`trainer.micro_batch_size`: 3 does not divide trainer.mini_batch_size 64",
        ),
        (
            "trainer.mini_batch_size=48",
            "`trainer.mini_batch_size`: 48 does not divide the 64 completions of a step \
             (rollout.prompts_per_step 8 x rollout.n 8)",
        ),
        (
            "trainer.ppo_epochs=0",
            "`trainer.ppo_epochs`: must be at least 1, found 0",
        ),
        (
            "model.path=models/qwen",
            "`model.path`: give exactly one of `model.path` (a model folder) and `model.preset` (tiny, small, 3b or 7b)",
        ),
        (
            "model.min_pixels=20000000",
            "`model.max_pixels`: 12845056 is smaller than model.min_pixels 20000000",
        ),
        (
            "model.lora_vision=true",
            "`model.lora_vision`: needs LoRA on (model.lora_rank > 0)",
        ),
        (
            "model.lora_rank=8 model.lora_targets=[\"qkv\"]",
            "`model.lora_targets`: \"qkv\" is not a projection; use q_proj, k_proj, v_proj, o_proj, \
             gate_proj, up_proj, down_proj",
        ),
        (
            "model.lora_rank=8 model.lora_targets=[\"q_proj\",\"q_proj\"]",
            "`model.lora_targets`: \"q_proj\" is listed twice",
        ),
        (
            "data.train=",
            "`data.train`: is required: the training samples (JSONL or Parquet)",
        ),
        (
            "reward.inline.model_frame=resized",
            "`reward.spec`: give exactly one of `reward.spec` (a file) and `[reward.inline]` (the spec in place)",
        ),
        (
            "rollout.dynamic_sampling=true rollout.max_prompts_per_step=4",
            "`rollout.max_prompts_per_step`: 4 is below rollout.prompts_per_step 8",
        ),
        (
            "trainer.early_stopping_patience=3",
            "`trainer.early_stopping_metric`: is required when trainer.early_stopping_patience > 0",
        ),
        (
            "trainer.early_stopping_patience=3 trainer.early_stopping_metric=val/accuracy",
            "`data.val`: is required for early stopping (it watches validation metrics)",
        ),
        (
            "trainer.early_stopping_patience=3 trainer.early_stopping_metric=accuracy data.val=v.jsonl",
            "`trainer.early_stopping_metric`: `accuracy` is not one of val/accuracy, val/reward",
        ),
        (
            "data.held_out.hard=h.jsonl data.held_out_rewards.boxes.spec=detection.toml",
            "`data.held_out_rewards`: `boxes` names no set of data.held_out",
        ),
        (
            "data.held_out.boxes=b.jsonl data.held_out_rewards.boxes.correct_threshold=0.5",
            "`data.held_out_rewards.boxes.spec`: give exactly one of `data.held_out_rewards.boxes.spec` \
             (a file) and `[data.held_out_rewards.boxes.inline]` (the spec in place)",
        ),
        (
            "distributed.zero_stage=2",
            "`distributed.zero_stage`: must be 0 (whole optimizer state on every rank) or 1 \
             (optimizer state sharded over the ranks), found 2; stage 2 (sharded gradients) does not \
             exist yet",
        ),
    ];
    for (changes, message) in cases {
        let changes: Vec<&str> = changes.split(' ').collect();
        let e = valid_with(&changes).unwrap_err();
        assert_eq!(e.to_string(), message, "{changes:?}");
    }
    valid_with(&[
        "data.held_out.boxes=b.jsonl",
        "data.held_out_rewards.boxes.spec=detection.toml",
        "model.lora_rank=8",
        "model.lora_vision=true",
        "rollout.temperature=0.01",
        "distributed.zero_stage=1",
    ])
    .unwrap();
}

#[test]
fn the_inline_reward_spec_is_checked_when_loaded() {
    let mut c = TrainConfig::from_toml_str(
        VALID,
        &overrides(&[
            "reward.spec=",
            "reward.inline.components.click.kind=point_in_box",
            "reward.inline.components.click.weight=1.0",
            "reward.correct_component=click",
        ]),
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.reward.load_spec().unwrap().components()[0].name, "click");
    c.reward.correct_component = "iou".into();
    assert_eq!(
        c.reward.load_spec().unwrap_err().to_string(),
        "`reward.correct_component`: \"iou\" is not a component of the reward spec (click)"
    );
    // The spec's own unknown-key check runs on the inline table.
    let typo = TrainConfig::from_toml_str(
        &c.to_toml().unwrap(),
        &overrides(&["reward.inline.components.click.wieght=1.0"]),
    )
    .unwrap();
    let e = typo.reward.load_spec().unwrap_err().to_string();
    assert!(e.contains("wieght"), "{e}");
}

#[test]
fn the_answer_frame_is_the_model_familys_unless_named() {
    let qwen3 = repo_root().join("crates/groundrl-tensor/tests/fixtures/qwen3_vl/tiny_a");
    let qwen3 = format!("model.path={}", qwen3.display());
    let frame = |changes: &[&str]| -> Result<Frame, ConfigError> {
        let mut all = vec![
            "reward.spec=",
            "reward.inline.components.click.kind=point_in_box",
            "reward.inline.components.click.weight=1.0",
        ];
        all.extend(changes);
        let c = TrainConfig::from_toml_str(VALID, &overrides(&all))?;
        Ok(c.reward.spec_for(&c.model)?.model_frame)
    };
    // `auto` everywhere: the tiny preset is a Qwen2.5-VL, the folder a Qwen3-VL.
    assert_eq!(frame(&[]).unwrap(), Frame::Resized);
    assert_eq!(frame(&["model.preset=none", &qwen3]).unwrap(), Frame::Qwen1000);
    // A frame named by the model section or by the spec wins over the family's.
    assert_eq!(
        frame(&["model.preset=none", &qwen3, "model.answer_frame=pixel"]).unwrap(),
        Frame::Pixel
    );
    assert_eq!(
        frame(&["model.preset=none", &qwen3, "reward.inline.model_frame=resized"]).unwrap(),
        Frame::Resized
    );
    assert_eq!(
        frame(&["model.answer_frame=qwen1000", "reward.inline.model_frame=auto"]).unwrap(),
        Frame::Qwen1000
    );
    let both = frame(&["model.answer_frame=qwen1000", "reward.inline.model_frame=resized"]);
    assert_eq!(
        both.unwrap_err().to_string(),
        "`model.answer_frame`: is qwen1000, but the reward spec reads answers in resized (its \
         model_frame): name one frame, or leave either as auto"
    );
    let no_folder = frame(&["model.preset=none", "model.path=/nonexistent"]).unwrap_err();
    assert!(matches!(no_folder, ConfigError::Family(_)), "{no_folder}");
    let typo = frame(&["model.answer_frame=qwen3"]).unwrap_err().to_string();
    assert!(
        typo.contains("model.answer_frame") && typo.contains("expected one of auto"),
        "{typo}"
    );
}

#[test]
fn shipped_configs_load_and_validate() {
    let root = repo_root();
    for (name, preset, dtype, layers) in [
        ("cpu-tiny.toml", RandomFolder::Tiny, Dtype::F32, 4),
        ("3b-1gpu.toml", RandomFolder::Qwen3b, Dtype::Bf16, 36),
    ] {
        let mut c = TrainConfig::load(&root.join("configs").join(name), &[]).unwrap();
        c.validate().unwrap();
        assert_eq!(
            (c.model.preset.folder(), c.model.dtype),
            (Some(preset), dtype),
            "{name}"
        );
        assert_eq!(c.model.architecture().unwrap().layers, layers);
        // The reward spec path is relative to the repository root, where runs start.
        c.reward.spec = root.join(&c.reward.spec);
        let spec = c.reward.spec_for(&c.model).unwrap();
        assert_eq!(spec.components().len(), 2, "{name}");
        assert_eq!(
            (spec.frame_choice, spec.model_frame),
            (FrameChoice::Auto, Frame::Resized),
            "{name}"
        );
    }
    let c = TrainConfig::load(&root.join("configs/3b-1gpu.toml"), &[]).unwrap();
    assert_eq!(
        (c.rollout.prompts_per_step, c.rollout.n, c.model.device),
        (8, 8, DeviceKind::Cuda)
    );
    assert!(c.model.gradient_checkpointing.recompute() == Recompute::All && c.model.freeze_vision);
}

/// `model.gradient_checkpointing` takes `true`, `false`, `"tower"` or `"auto"` and writes back what
/// it read; undecided, `auto` recomputes every block (the memory-safe choice).
#[test]
fn gradient_checkpointing_is_on_off_tower_or_auto() {
    for (value, expected, recompute) in [
        ("true", Checkpointing::On, Recompute::All),
        ("false", Checkpointing::Off, Recompute::Off),
        ("tower", Checkpointing::Tower, Recompute::TOWER),
        ("auto", Checkpointing::Auto, Recompute::All),
        ("\"auto\"", Checkpointing::Auto, Recompute::All),
    ] {
        let change = format!("model.gradient_checkpointing={value}");
        let c = TrainConfig::from_toml_str(VALID, &overrides(&[&change])).unwrap();
        assert_eq!(c.model.gradient_checkpointing, expected, "{value}");
        assert_eq!(c.model.gradient_checkpointing.recompute(), recompute, "{value}");
        let written = c.to_toml().unwrap();
        assert_eq!(TrainConfig::from_toml_str(&written, &[]).unwrap(), c, "{written}");
    }
}

#[test]
fn the_tools_section_defaults_to_no_tools() {
    let c = TrainConfig::from_toml_str(VALID, &[]).unwrap();
    let t = &c.tools;
    assert!(t.enabled.is_empty() && !t.is_on());
    assert_eq!(
        (t.max_turns, t.max_total_tokens, t.max_zoom, t.answer_view),
        (3, 0, 4, AnswerView::Full)
    );
    assert_eq!((t.warm_up_zoom_below, t.warm_up_zoom_context), (0.0, 4.0));
    assert!(t.toolbox(PixelBudget::default()).is_empty());
    let written = c.to_toml().unwrap();
    assert!(
        written.contains("[tools]\nenabled = []\nmax_turns = 3\n"),
        "{written}"
    );
    assert!(written.contains("answer_view = \"full\""), "{written}");
}

#[test]
fn a_full_tools_section_loads_and_overrides_apply() {
    let text = format!(
        "{VALID}\n[tools]\nenabled = [\"zoom\"]\nmax_turns = 4\nmax_total_tokens = 2048\nmax_zoom = 2\n\
         answer_view = \"last\"\nwarm_up_zoom_below = 0.05\nwarm_up_zoom_context = 3.0\n"
    );
    let c = TrainConfig::from_toml_str(&text, &[]).unwrap();
    c.validate().unwrap();
    let t = &c.tools;
    assert_eq!(t.enabled, ["zoom"]);
    assert_eq!(
        (t.max_turns, t.max_total_tokens, t.max_zoom, t.answer_view),
        (4, 2048, 2, AnswerView::Last)
    );
    assert_eq!((t.warm_up_zoom_below, t.warm_up_zoom_context), (0.05, 3.0));
    assert_eq!(TrainConfig::from_toml_str(&c.to_toml().unwrap(), &[]).unwrap(), c);
    let toolbox = t.toolbox(PixelBudget::default());
    assert!(toolbox.offers("zoom") && !toolbox.offers("pan"));
    // An explicit budget is taken as it is.
    assert_eq!(t.total_token_budget(128, 448 * 448), 2048);

    let c = TrainConfig::from_toml_str(
        &text,
        &overrides(&["tools.max_turns=2", "tools.answer_view=full", "tools.enabled=[]"]),
    )
    .unwrap();
    assert_eq!(
        (c.tools.max_turns, c.tools.answer_view, c.tools.is_on()),
        (2, AnswerView::Full, false)
    );
}

#[test]
fn the_default_token_budget_has_room_for_every_turn_and_tool_image() {
    let tools = ToolsConfig {
        enabled: vec!["zoom".into()],
        ..ToolsConfig::default()
    };
    // 3 turns of 128 tokens, and 2 tool turns of 448² / 28² = 256 image tokens + 64 of text.
    assert_eq!(tools.total_token_budget(128, 448 * 448), 3 * 128 + 2 * (256 + 64));
    let one_turn = ToolsConfig {
        max_turns: 1,
        ..ToolsConfig::default()
    };
    assert_eq!(one_turn.total_token_budget(128, 448 * 448), 128);
}

#[test]
fn bad_tools_settings_name_the_key() {
    let cases = [
        (
            "tools.enabled=[\"pan\"]",
            "`tools.enabled`: \"pan\" is not a tool; known: zoom",
        ),
        (
            "tools.enabled=[\"zoom\",\"zoom\"]",
            "`tools.enabled`: \"zoom\" is listed twice",
        ),
        (
            "tools.max_turns=0",
            "`tools.max_turns`: must be at least 1, found 0",
        ),
        (
            "tools.enabled=[\"zoom\"] tools.max_turns=1",
            "`tools.max_turns`: must be at least 2 with tools enabled (a call in the last turn is never \
             run), found 1",
        ),
        (
            "tools.max_total_tokens=100",
            "`tools.max_total_tokens`: 100 is below rollout.max_new_tokens 128 (0 = the default budget)",
        ),
        ("tools.max_zoom=0", "`tools.max_zoom`: must be 1 to 8, found 0"),
        ("tools.max_zoom=9", "`tools.max_zoom`: must be 1 to 8, found 9"),
        (
            "tools.warm_up_zoom_below=1",
            "`tools.warm_up_zoom_below`: must be in [0, 1), found 1",
        ),
        (
            "tools.warm_up_zoom_below=-0.1",
            "`tools.warm_up_zoom_below`: must be in [0, 1), found -0.1",
        ),
        (
            "tools.warm_up_zoom_below=0.05",
            "`tools.warm_up_zoom_below`: needs \"zoom\" in tools.enabled (the reference trajectories \
             call it)",
        ),
        (
            "tools.warm_up_zoom_context=0.5",
            "`tools.warm_up_zoom_context`: must be at least 1, found 0.5",
        ),
    ];
    for (changes, message) in cases {
        let changes: Vec<&str> = changes.split(' ').collect();
        let e = valid_with(&changes).unwrap_err();
        assert_eq!(e.to_string(), message, "{changes:?}");
    }
    valid_with(&["tools.enabled=[\"zoom\"]", "tools.max_total_tokens=128"]).unwrap();
    // Names and types are the deserializer's: the key and what was expected.
    let e = TrainConfig::from_toml_str(VALID, &overrides(&["tools.answer_view=zoomed"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`tools.answer_view`: unknown variant `zoomed`, expected `full` or `last`"
    );
    let e = TrainConfig::from_toml_str(VALID, &overrides(&["tools.max_turn=2"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown key `tools.max_turn`; did you mean `tools.max_turns`?"
    );
}

#[test]
fn the_profiled_step_is_off_by_default_and_must_be_one_the_run_reaches() {
    assert_eq!(
        TrainConfig::from_toml_str(VALID, &[])
            .unwrap()
            .trainer
            .profile_step,
        0
    );
    let c = TrainConfig::from_toml_str(VALID, &overrides(&["trainer.profile_step=3"])).unwrap();
    assert_eq!(c.trainer.profile_step, 3);
    // Without a step cap the epochs decide the run's length, which the config does not know.
    c.validate().unwrap();
    valid_with(&["trainer.profile_step=4", "trainer.max_steps=4"]).unwrap();
    // Each round runs up to trainer.max_steps steps.
    valid_with(&["trainer.profile_step=8", "trainer.max_steps=4", "rounds.count=2"]).unwrap();
    let e = valid_with(&["trainer.profile_step=5", "trainer.max_steps=4"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`trainer.profile_step`: step 5 comes after the run's last, 4 (trainer.max_steps 4 x \
         rounds.count 1): nothing would be recorded"
    );
    let e = TrainConfig::from_toml_str(VALID, &overrides(&["trainer.profile_step=-1"])).unwrap_err();
    assert!(e.to_string().starts_with("`trainer.profile_step`: "), "{e}");
}

#[test]
fn a_profiled_step_is_refused_where_the_profiler_is_unavailable() {
    let off = TrainConfig::default().trainer;
    off.check_profiler(false).unwrap();
    let on = TrainConfig::from_toml_str(VALID, &overrides(&["trainer.profile_step=2"]))
        .unwrap()
        .trainer;
    on.check_profiler(true).unwrap();
    assert_eq!(
        on.check_profiler(false).unwrap_err().to_string(),
        "`trainer.profile_step`: the profiler needs a build with the `cuda` feature; set 0 (off) on \
         this one"
    );
}

/// With 2 ranks the warm-up, dynamic sampling and curriculum rounds run split over them; what cannot be split in equal
/// shares is refused by name: 8 prompts a step over 3 ranks, a mini-batch of 6 over 4.
#[test]
fn the_world_size_must_split_the_prompts_and_mini_batches_evenly() {
    let with = |changes: &[&str]| TrainConfig::from_toml_str(VALID, &overrides(changes)).unwrap();
    let split = with(&[
        "sft.steps=2",
        "rounds.count=2",
        "rollout.dynamic_sampling=true",
        "rollout.max_prompts_per_step=16",
        "trainer.mini_batch_size=8",
    ]);
    split.validate().unwrap();
    split.validate_world_size(2).unwrap();
    let err = split.validate_world_size(3).unwrap_err().to_string();
    assert!(
        err.contains("rollout.prompts_per_step") && err.contains("8 does not divide by the world size 3"),
        "{err}"
    );
    let err = with(&["trainer.mini_batch_size=6"])
        .validate_world_size(4)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("trainer.mini_batch_size") && err.contains("6 does not divide by the world size 4"),
        "{err}"
    );
}
