//! `groundrl export`: a 2-step tiny run (CPU) exported as an HF folder gives, loaded by
//! `groundrl model logits`, the logits of the trained model bit for bit; a LoRA run's export holds
//! merged weights and no adapter tensors; bad run folders, steps and output folders are clear errors.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{groundrl, synth, text, tiny_training_config};
use groundrl_tensor::processor::chat_template::RenderOptions;
use groundrl_tensor::qwen2_5_vl::model::Batch;
use groundrl_tensor::tch::{self, Device, Kind, Tensor};
use groundrl_train::load_model::load_model;
use serde_json::json;

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Trains the tiny preset for two steps on easy synthetic screenshots (a checkpoint after each) with
/// the reward `configs/rewards/length-only.toml`, which a random model's completions differ on, so
/// the weights move; `overrides` are dotted config keys. Returns the run folder.
fn train(dir: &Path, name: &str, overrides: &[&str]) -> PathBuf {
    let data = dir.join("data");
    if !data.exists() {
        synth(&data, &["--n", "8", "--difficulty", "easy"]);
    }
    let config = tiny_training_config(&data.join("samples.jsonl"), 1e-2, 2, "");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let run = dir.join(name);
    let run_dir = format!("trainer.run_dir=\"{}\"", run.display());
    let mut args = vec!["train", arg(&path), run_dir.as_str()];
    args.extend(overrides);
    let out = groundrl(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    run
}

fn export(run: &Path, extra: &[&str], out: &Path) -> Output {
    let mut args = vec!["export", arg(run)];
    args.extend(extra);
    args.extend(["--out", arg(out)]);
    groundrl(&args)
}

/// Two rows, left-padded: a chat with a 112 x 84 screenshot-like image and a text-only chat, encoded
/// by the run's processor and written as `groundrl model logits` reads them.
fn write_inputs(run: &Path, path: &Path) {
    let processor = load_model(run, Device::Cpu, None).unwrap().hf.processor;
    let image = image::RgbImage::from_fn(112, 84, |x, y| {
        image::Rgb([(x * 2) as u8, (y * 3) as u8, ((x + y) % 7 * 30) as u8])
    });
    let options = RenderOptions {
        add_generation_prompt: true,
        ..RenderOptions::default()
    };
    let with_image = json!([{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "Click the Save button."}]}]);
    let text_only = json!([{"role": "user", "content": "Where is the search field?"}]);
    let encode = |chat: &serde_json::Value, images: &[image::DynamicImage]| {
        processor
            .encode_chat(chat.as_array().unwrap(), images, &options)
            .unwrap()
    };
    let batch = processor.batch(vec![
        encode(&with_image, &[image.into()]),
        encode(&text_only, &[]),
    ]);
    let rows = |r: &[Vec<i64>]| Tensor::from_slice2(r);
    let grids: Vec<Vec<i64>> = batch.image_grids.iter().map(|g| g.to_vec()).collect();
    let tensors = [
        ("input_ids", rows(&batch.input_ids)),
        ("attention_mask", rows(batch.attention_mask.as_ref().unwrap())),
        ("pixel_values", batch.pixel_values.unwrap()),
        ("image_grid_thw", rows(&grids)),
    ];
    Tensor::write_safetensors(&tensors, path).unwrap();
}

/// The logits `groundrl model logits` writes for the HF folder `model` in f32 on the CPU.
fn cli_logits(model: &Path, inputs: &Path) -> Tensor {
    let out = inputs.with_file_name(format!(
        "logits-{}.safetensors",
        model.file_name().unwrap().to_string_lossy()
    ));
    let args = ["model", "logits", "--model", arg(model), "--inputs", arg(inputs)];
    let run = groundrl(
        &[
            &args[..],
            &["--out", arg(&out), "--device", "cpu", "--dtype", "f32"],
        ]
        .concat(),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    Tensor::read_safetensors(&out).unwrap().remove(0).1
}

/// The logits of the model `path` names (a run, one of its checkpoints, an HF folder) as the library
/// loads it: for a run, the trained model itself, LoRA adapters unmerged.
fn library_logits(path: &Path, inputs: &Path) -> Tensor {
    let model = load_model(path, Device::Cpu, Some(Kind::Float)).unwrap().hf.model;
    let batch = Batch::read_safetensors(inputs).unwrap();
    tch::no_grad(|| model.logits(&batch)).unwrap()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Names of the tensors in a folder's `model.safetensors`.
fn tensor_names(dir: &Path) -> BTreeSet<String> {
    Tensor::read_safetensors(dir.join("model.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The exported folder is the trained model exactly: in f32 on the CPU the same tensors run through
/// the same kernels, so the logits are bit-identical, at the latest step and at `--step 1`.
#[test]
fn an_export_gives_the_trained_models_logits_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let run = train(dir.path(), "run", &[]);
    let inputs = dir.path().join("inputs.safetensors");
    write_inputs(&run, &inputs);
    let exports = dir.path().join("exports");
    let latest = exports.join("latest");
    let done = export(&run, &[], &latest);
    assert!(done.status.success(), "{}", text(&done.stderr));
    assert!(text(&done.stderr).contains("step 2"), "{}", text(&done.stderr));

    let files = [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ];
    assert_eq!(entries(&latest), files.iter().map(|f| f.to_string()).collect());
    let initial = run.join("initial-model");
    assert_eq!(tensor_names(&latest), tensor_names(&initial));
    // The run's answer limit (`rollout.max_new_tokens = 8`), where predict and transformers read it.
    let generation: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(latest.join("generation_config.json")).unwrap())
            .unwrap();
    assert_eq!(generation, serde_json::json!({"max_new_tokens": 8}));

    let trained = library_logits(&run, &inputs);
    let exported = cli_logits(&latest, &inputs);
    assert_eq!(exported.size(), trained.size());
    assert!(
        exported.equal(&trained),
        "max |diff| {}",
        max_abs_diff(&exported, &trained)
    );
    // Training moved the weights, so equal logits are the trained model's, not the initial one's.
    let before = library_logits(&initial, &inputs);
    assert!(max_abs_diff(&trained, &before) > 1e-3);

    // An existing empty folder is taken.
    let first = exports.join("step-1");
    std::fs::create_dir(&first).unwrap();
    let done = export(&run, &["--step", "1"], &first);
    assert!(done.status.success(), "{}", text(&done.stderr));
    let step_1 = library_logits(&run.join("checkpoints/step-1"), &inputs);
    assert!(cli_logits(&first, &inputs).equal(&step_1));
    assert!(max_abs_diff(&step_1, &trained) > 1e-4);
    // Written under a temporary name and renamed: nothing else is left beside the exports.
    assert_eq!(entries(&exports), ["latest", "step-1"].map(String::from).into());
}

/// LoRA adapters are folded into the weights: (W + s B A) x rounds differently in f32 from
/// W x + s B (A x), which the adapter model computes, so the logits agree to a few f32 ulps of their
/// size (about 1 here), not bit for bit: 6e-7 measured on an AMD EPYC on 2026-11-26. The bound, 1e-4,
/// leaves room for other CPUs' summation orders and is four orders below what the adapters change.
#[test]
fn a_lora_export_holds_merged_weights_whose_logits_match_the_adapter_model() {
    let dir = tempfile::tempdir().unwrap();
    let run = train(dir.path(), "lora", &["model.lora_rank=4"]);
    let inputs = dir.path().join("inputs.safetensors");
    write_inputs(&run, &inputs);
    let out = dir.path().join("merged");
    let done = export(&run, &[], &out);
    assert!(done.status.success(), "{}", text(&done.stderr));
    // The tiny preset has 4 decoder layers of 7 adapted projections each.
    assert!(
        text(&done.stderr).contains("LoRA adapters of 28 layers merged"),
        "{}",
        text(&done.stderr)
    );

    let initial = run.join("initial-model");
    let names = tensor_names(&out);
    assert!(names.iter().all(|n| !n.contains("lora")), "{names:?}");
    assert_eq!(names, tensor_names(&initial));

    let adapter = library_logits(&run, &inputs);
    let merged = cli_logits(&out, &inputs);
    let before = library_logits(&initial, &inputs);
    let (diff, moved) = (max_abs_diff(&merged, &adapter), max_abs_diff(&adapter, &before));
    eprintln!("merged vs adapter model: max |diff| {diff:e}; adapter model vs initial: {moved:e}");
    assert!(diff < 1e-4, "max |diff| {diff}");
    // The adapters changed the model by far more than that.
    assert!(moved > 1e-2, "{moved}");
}

/// A run folder as the trainer leaves it, without weights: export reads its folders before loading.
fn run_folder(dir: &Path, steps: &[u64]) -> PathBuf {
    let run = dir.join("run");
    std::fs::create_dir_all(run.join("checkpoints")).unwrap();
    std::fs::write(run.join("config.toml"), "[model]\npreset = \"tiny\"\n").unwrap();
    for step in steps {
        std::fs::create_dir(run.join(format!("checkpoints/step-{step}"))).unwrap();
    }
    if let Some(last) = steps.last() {
        std::fs::write(run.join("checkpoints/latest"), format!("step-{last}\n")).unwrap();
    }
    run
}

#[test]
fn bad_runs_steps_and_output_folders_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let error = |output: Output| {
        assert_eq!(output.status.code(), Some(1));
        text(&output.stderr)
    };
    let run = run_folder(&dir.path().join("trained"), &[1, 2]);
    let message = error(export(&run, &["--step", "7"], &out));
    assert!(
        message.contains("no checkpoint of step 7; its checkpoints: 1, 2"),
        "{message}"
    );
    let message = error(export(dir.path(), &[], &out));
    assert!(message.contains("not a training run folder"), "{message}");

    // A run stopped before its first save.
    let fresh = run_folder(&dir.path().join("fresh"), &[]);
    let message = error(export(&fresh, &[], &out));
    assert!(message.contains("the run has no checkpoint yet"), "{message}");
    let message = error(export(&fresh, &["--step", "2"], &out));
    assert!(message.contains("its checkpoints: none"), "{message}");

    let message = error(export(&run, &[], &dir.path().join("exports/..")));
    assert!(message.contains("name the folder to write"), "{message}");

    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let message = error(export(&run, &[], &out));
    assert!(message.contains("exists and is not empty"), "{message}");
    assert_eq!(entries(&out), ["notes.txt".to_string()].into());
    assert!(entries(dir.path()).iter().all(|e| !e.contains(".tmp-")));
}
