//! `load_model`: an HF folder, a run folder and a checkpoint folder load the weights they hold (a
//! LoRA run's adapters included, a bf16 run's weights in f32 when asked), and what is not a model is
//! a clear error.

use std::path::Path;

use groundrl_tensor::hf_folder::{self, RandomFolder};
use groundrl_train::checkpoint::{CheckpointParts, save_checkpoint};
use groundrl_train::config::TrainConfig;
use groundrl_train::load_model::{LoadError, ModelSource, initial_model_dir, load_model, lora_spec};
use groundrl_train::run_folder::CONFIG_FILE;
use tch::{Device, Kind, Tensor};

/// A run folder as the trainer leaves it: config.toml, the tiny preset as its initial model, and a
/// checkpoint of step 3 whose tensors (adapters too with `lora_rank`) differ from the initial ones.
/// Returns the checkpoint's tensors.
fn fake_run(run: &Path, lora_rank: u32, dtype: &str) -> Vec<(String, Tensor)> {
    let mut cfg = TrainConfig::from_toml_str(
        &format!(
            "[model]\npreset = \"tiny\"\ndtype = \"{dtype}\"\nlora_rank = {lora_rank}\nmax_pixels = 100352\n\
             [data]\ntrain = \"samples.jsonl\""
        ),
        &[],
    )
    .unwrap();
    cfg.trainer.run_dir = run.to_path_buf();
    assert_eq!(cfg.model.preset.folder(), Some(RandomFolder::Tiny));
    std::fs::create_dir_all(run).unwrap();
    std::fs::write(run.join(CONFIG_FILE), cfg.to_toml().unwrap()).unwrap();
    let base = initial_model_dir(&cfg.model, run);
    hf_folder::write_tiny(&base, cfg.model.seed, cfg.model.dtype.kind()).unwrap();
    let mut policy = hf_folder::load(&base, Device::Cpu, cfg.model.dtype.kind()).unwrap();
    if let Some(spec) = lora_spec(&cfg.model) {
        policy.model.add_lora(&spec).unwrap();
    }
    let weights: Vec<(String, Tensor)> = policy
        .model
        .var_store()
        .variables()
        .into_iter()
        .map(|(name, t)| {
            let trained = t.detach() + 0.25;
            (name, trained)
        })
        .collect();
    let parts = CheckpointParts {
        weights: &weights,
        optimizer: &[],
        state: &serde_json::json!({"step": 3}),
    };
    save_checkpoint(run, 3, &parts, 0).unwrap();
    weights
}

fn assert_loaded(
    loaded: &groundrl_train::load_model::LoadedModel,
    expected: &[(String, Tensor)],
    kind: Kind,
) {
    let variables = loaded.hf.model.var_store().variables();
    assert_eq!(variables.len(), expected.len());
    for (name, want) in expected {
        let got = &variables[name];
        assert_eq!(got.kind(), kind, "{name}");
        assert!(
            got.equal(&want.to_kind(kind)),
            "{name} differs from the checkpoint"
        );
    }
}

#[test]
fn a_run_folder_and_its_checkpoint_load_the_trained_tensors_with_the_runs_pixel_budget() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let weights = fake_run(&run, 0, "f32");
    for path in [run.clone(), run.join("checkpoints/step-3")] {
        let loaded = load_model(&path, Device::Cpu, None).unwrap();
        assert_loaded(&loaded, &weights, Kind::Float);
        let info = loaded.run.as_ref().unwrap();
        assert_eq!((info.step, info.run_dir.as_path()), (3, run.as_path()));
        assert_eq!(loaded.base, run.join("initial-model"));
        assert_eq!(loaded.hf.processor.image.max_pixels, 100352);
        assert!(
            loaded.describe().contains("step 3 of run"),
            "{}",
            loaded.describe()
        );
    }
}

#[test]
fn a_lora_run_loads_its_adapters_and_a_bf16_run_loads_in_f32_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let weights = fake_run(&run, 2, "bf16");
    assert!(weights.iter().any(|(n, _)| n.contains("lora")));
    let loaded = load_model(&run, Device::Cpu, None).unwrap();
    assert_loaded(&loaded, &weights, Kind::BFloat16);
    assert!(!loaded.hf.model.lora_variables().is_empty());
    assert!(loaded.describe().contains("LoRA rank 2"), "{}", loaded.describe());
    let f32 = load_model(&run, Device::Cpu, Some(Kind::Float)).unwrap();
    assert_loaded(&f32, &weights, Kind::Float);
}

#[test]
fn an_hf_folder_loads_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    assert_eq!(
        ModelSource::locate(dir.path()).unwrap(),
        ModelSource::Folder(dir.path().to_path_buf())
    );
    let loaded = load_model(dir.path(), Device::Cpu, None).unwrap();
    assert!(loaded.run.is_none());
    assert_eq!(loaded.hf.processor.image.max_pixels, hf_folder::TINY_MAX_PIXELS);
}

#[test]
fn what_is_not_a_model_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = load_model(dir.path(), Device::Cpu, None).unwrap_err();
    assert!(matches!(err, LoadError::NotAModel { .. }), "{err}");
    assert!(err.to_string().contains("expected an HF model folder"), "{err}");
    // A run stopped before its first checkpoint.
    std::fs::write(dir.path().join(CONFIG_FILE), "").unwrap();
    let err = load_model(dir.path(), Device::Cpu, None).unwrap_err();
    assert!(err.to_string().contains("no checkpoint yet"), "{err}");
    // A checkpoint whose tensors do not fit the run's model.
    let run = dir.path().join("run");
    fake_run(&run, 0, "f32");
    std::fs::write(
        run.join(CONFIG_FILE),
        std::fs::read_to_string(run.join(CONFIG_FILE))
            .unwrap()
            .replace("lora_rank = 0", "lora_rank = 4"),
    )
    .unwrap();
    let err = load_model(&run, Device::Cpu, None).unwrap_err();
    assert!(err.to_string().contains("lora"), "{err}");
}
