//! Checkpoints: exact round trips, crash leftovers ignored, pruning, errors that name the path, and a run
//! resumed from a checkpoint that continues bit for bit.

use std::fs;
use std::path::Path;

use groundrl_core::atomic::remove_temporaries;
use groundrl_train::checkpoint::{
    CheckpointError, CheckpointParts, LoadedCheckpoint, checkpoint_steps, has_checkpoint, latest_checkpoint,
    load_checkpoint, load_latest, load_resumable, load_weights, restore_tensors, save_checkpoint,
};
use groundrl_train::optim::{AdamW, OptimConfig};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor, nn};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Resume {
    step: u64,
    rng: Vec<u64>,
    label: String,
}

fn resume(step: u64) -> Resume {
    Resume {
        step,
        rng: vec![u64::MAX, 7],
        label: "run".into(),
    }
}

/// Values that differ per element and per `seed`, without the global RNG (tests run in parallel).
fn values(shape: &[i64], seed: f64) -> Tensor {
    let numel = shape.iter().product::<i64>();
    (Tensor::arange(numel, (Kind::Float, Device::Cpu)) * 0.77 + seed)
        .sin()
        .reshape(shape)
        * 2.0
}

fn tensors() -> Vec<(String, Tensor)> {
    vec![
        ("model.a".into(), values(&[2, 3], 0.0)),
        ("model.b".into(), values(&[4], 1.0).to_kind(Kind::BFloat16)),
        // Not contiguous: saved through a host copy.
        ("model.c".into(), values(&[3, 2], 2.0).transpose(0, 1)),
    ]
}

fn save(run: &Path, step: u64, keep: usize) -> std::path::PathBuf {
    let weights = tensors();
    let optimizer = vec![("step/model.a".to_string(), Tensor::from(step as i64))];
    let parts = CheckpointParts {
        weights: &weights,
        optimizer: &optimizer,
        state: &resume(step),
    };
    save_checkpoint(run, step, &parts, keep).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn assert_same(a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    let mut a: Vec<_> = a.iter().collect();
    let mut b: Vec<_> = b.iter().collect();
    a.sort_by(|x, y| x.0.cmp(&y.0));
    b.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(a.len(), b.len());
    for ((na, ta), (nb, tb)) in a.into_iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(ta.kind(), tb.kind(), "{na}");
        assert!(
            ta.equal(tb),
            "`{na}` differs: {} vs {}",
            ta.to_kind(Kind::Float),
            tb.to_kind(Kind::Float)
        );
    }
}

#[test]
fn a_checkpoint_round_trips_bit_for_bit_in_f32_and_bf16() {
    let run = tempfile::tempdir().unwrap();
    let dir = save(run.path(), 3, 2);
    assert_eq!(dir, run.path().join("checkpoints/step-3"));
    assert_eq!(entries(&run.path().join("checkpoints")), ["latest", "step-3"]);
    assert_eq!(
        fs::read_to_string(run.path().join("checkpoints/latest")).unwrap(),
        "step-3\n"
    );
    assert_eq!(
        entries(&dir),
        [
            "manifest.json",
            "optimizer.safetensors",
            "state.json",
            "weights.safetensors"
        ]
    );

    let loaded: LoadedCheckpoint<Resume> = load_latest(run.path()).unwrap();
    assert_eq!((loaded.dir.as_path(), loaded.step), (dir.as_path(), 3));
    assert_same(&loaded.weights, &tensors());
    assert_same(
        &loaded.optimizer.read_all().unwrap(),
        &[("step/model.a".into(), Tensor::from(3i64))],
    );
    assert_eq!(loaded.state, resume(3));
}

#[test]
fn leftovers_of_a_crashed_save_are_ignored() {
    let run = tempfile::tempdir().unwrap();
    save(run.path(), 1, 0);
    let root = run.path().join("checkpoints");
    // A crash while writing step 2 ...
    fs::create_dir(root.join(".tmp-step-2-4242")).unwrap();
    fs::write(root.join(".tmp-step-2-4242/weights.safetensors"), b"half a file").unwrap();
    // ... or after renaming it, before `latest` moved on.
    fs::create_dir(root.join("step-2")).unwrap();
    let loaded: LoadedCheckpoint<Resume> = load_latest(run.path()).unwrap();
    assert_eq!((loaded.step, loaded.state), (1, resume(1)));
    // The temporary folder is what a process restarting in the run folder removes (whatever pid
    // left it); the renamed folder is a checkpoint's name and stays until it is saved again.
    let removed = remove_temporaries(run.path()).unwrap();
    assert_eq!(removed, [root.join(".tmp-step-2-4242")]);
    assert_eq!(entries(&root), ["latest", "step-1", "step-2"]);
    assert!(has_checkpoint(run.path()));
    assert!(!has_checkpoint(&run.path().join("elsewhere")));

    // Saving step 2 again replaces the stale folder; saving the step `latest` names is refused.
    save(run.path(), 2, 0);
    let loaded: LoadedCheckpoint<Resume> = load_latest(run.path()).unwrap();
    assert_eq!(loaded.state, resume(2));
    let weights = tensors();
    let parts = CheckpointParts {
        weights: &weights,
        optimizer: &[],
        state: &resume(2),
    };
    let err = save_checkpoint(run.path(), 2, &parts, 0).unwrap_err().to_string();
    assert!(
        err.contains("checkpoints/step-2") && err.contains("latest"),
        "{err}"
    );
    assert_eq!(load_latest::<Resume>(run.path()).unwrap().state, resume(2));
}

#[test]
fn keep_removes_the_oldest_checkpoints_once_the_new_one_is_complete() {
    let run = tempfile::tempdir().unwrap();
    let root = run.path().join("checkpoints");
    for step in [1, 2, 3] {
        save(run.path(), step, 2);
    }
    assert_eq!(entries(&root), ["latest", "step-2", "step-3"]);
    assert_eq!(checkpoint_steps(run.path()).unwrap(), [2, 3]);
    // keep 0 keeps everything.
    save(run.path(), 4, 0);
    assert_eq!(entries(&root), ["latest", "step-2", "step-3", "step-4"]);
    // A later step left by an abandoned continuation is not older, so it stays.
    fs::create_dir(root.join("step-9")).unwrap();
    save(run.path(), 5, 1);
    assert_eq!(entries(&root), ["latest", "step-5", "step-9"]);
    assert_eq!(checkpoint_steps(run.path()).unwrap(), [5, 9]);
    assert_eq!(
        checkpoint_steps(&run.path().join("elsewhere")).unwrap(),
        [0u64; 0]
    );
    assert_eq!(latest_checkpoint(run.path()).unwrap(), root.join("step-5"));
}

#[test]
fn errors_name_the_path_at_fault() {
    let run = tempfile::tempdir().unwrap();
    let root = run.path().join("checkpoints");
    let err = load_latest::<Resume>(run.path()).unwrap_err().to_string();
    assert!(
        err.contains("checkpoints/latest") && err.contains("missing"),
        "{err}"
    );

    let dir = save(run.path(), 7, 0);
    fs::write(root.join("latest"), "banana").unwrap();
    let err = load_latest::<Resume>(run.path()).unwrap_err().to_string();
    assert!(
        err.contains("checkpoints/latest") && err.contains("banana"),
        "{err}"
    );

    fs::write(root.join("latest"), "step-8\n").unwrap();
    let err = load_latest::<Resume>(run.path()).unwrap_err().to_string();
    assert!(
        err.contains("checkpoints/latest") && err.contains("step-8"),
        "{err}"
    );

    fs::write(dir.join("state.json"), "{\"step\": 7").unwrap();
    let err = load_checkpoint::<Resume>(&dir).unwrap_err().to_string();
    assert!(err.contains("step-7/state.json"), "{err}");

    fs::write(dir.join("state.json"), serde_json::to_string(&resume(7)).unwrap()).unwrap();
    fs::write(dir.join("optimizer.safetensors"), b"not safetensors").unwrap();
    let err = load_checkpoint::<Resume>(&dir).unwrap_err().to_string();
    assert!(err.contains("step-7/optimizer.safetensors"), "{err}");

    fs::remove_file(dir.join("weights.safetensors")).unwrap();
    let err = load_checkpoint::<Resume>(&dir).unwrap_err().to_string();
    assert!(
        err.contains("step-7/weights.safetensors") && err.contains("missing"),
        "{err}"
    );

    let err = load_checkpoint::<Resume>(run.path()).unwrap_err().to_string();
    assert!(err.contains("step-N"), "{err}");

    // A save that fails midway names the file and leaves nothing behind.
    let weights = vec![(
        "z".to_string(),
        Tensor::zeros([2], (Kind::ComplexFloat, Device::Cpu)),
    )];
    let parts = CheckpointParts {
        weights: &weights,
        optimizer: &[],
        state: &resume(8),
    };
    let err = save_checkpoint(run.path(), 8, &parts, 0).unwrap_err().to_string();
    assert!(
        err.contains(".tmp-step-8-") && err.contains("weights.safetensors"),
        "{err}"
    );
    assert_eq!(entries(&root), ["latest", "step-7"]);
}

#[test]
fn restore_copies_by_name_and_refuses_any_mismatch() {
    let zeros = |shape: &[i64], kind| Tensor::zeros(shape, (kind, Device::Cpu)).set_requires_grad(true);
    let targets = || {
        vec![
            ("model.a".to_string(), zeros(&[2, 3], Kind::Float)),
            ("model.b".to_string(), zeros(&[4], Kind::BFloat16)),
            ("model.c".to_string(), zeros(&[2, 3], Kind::Float)),
        ]
    };
    let into = targets();
    restore_tensors(&into, &tensors()).unwrap();
    assert_same(&into, &tensors());
    assert!(into.iter().all(|(_, t)| t.requires_grad()));

    let mut renamed = tensors();
    renamed[1].0 = "model.z".into();
    let mut reshaped = tensors();
    reshaped[0].1 = reshaped[0].1.reshape([3, 2]);
    let mut recast = tensors();
    recast[1].1 = recast[1].1.to_kind(Kind::Float);
    let cases = [
        (renamed, "`model.b` is not in the checkpoint"),
        (
            tensors().into_iter().take(2).collect(),
            "`model.c` is not in the checkpoint",
        ),
        (
            reshaped,
            "`model.a`: the checkpoint has shape [3, 2], [2, 3] expected",
        ),
        (
            recast,
            "`model.b`: the checkpoint has dtype Float, BFloat16 expected",
        ),
    ];
    for (from, expected) in cases {
        let into = targets();
        let err = restore_tensors(&into, &from).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
        assert!(
            into.iter()
                .all(|(_, t)| t.abs().sum(Kind::Float).double_value(&[]) == 0.0)
        );
    }
    let mut extra = tensors();
    extra.push(("model.d".into(), Tensor::from(1.0f32)));
    let err = restore_tensors(&targets(), &extra).unwrap_err().to_string();
    assert!(err.contains("`model.d`"), "{err}");
}

/// A small bf16 model's trainable variables, sorted by name; `seed` sets the initial values.
fn model(seed: f64) -> (nn::VarStore, Vec<(String, Tensor)>) {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _ = vs.root().var_copy("w", &values(&[3, 4], seed));
    let _ = vs.root().var_copy("b", &values(&[4], seed + 1.0));
    let _ = vs
        .root()
        .var_copy("frozen", &values(&[2], seed))
        .set_requires_grad(false);
    vs.bfloat16();
    let mut trainable: Vec<_> = vs
        .variables()
        .into_iter()
        .filter(|(_, t)| t.requires_grad())
        .collect();
    trainable.sort_by(|a, b| a.0.cmp(&b.0));
    (vs, trainable)
}

/// The same tensors under new handles (tch tensors are not `Clone`).
fn shallow(named: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    named
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect()
}

fn train(params: &[(String, Tensor)], opt: &mut AdamW, steps: std::ops::Range<u64>) {
    for step in steps {
        opt.zero_grad().unwrap();
        let loss = params
            .iter()
            .map(|(_, p)| {
                (p.to_kind(Kind::Float) * (p.to_kind(Kind::Float) + step as f64).sin()).sum(Kind::Float)
            })
            .fold(Tensor::from(0.0f32), |acc, x| acc + x);
        loss.backward();
        opt.step(0.05).unwrap();
    }
}

#[test]
fn a_run_resumed_from_a_checkpoint_continues_bit_for_bit() {
    let cfg = OptimConfig {
        weight_decay: 0.1,
        grad_clip: 0.5,
        ..OptimConfig::default()
    };
    let (_straight_vs, straight) = model(5.0);
    let mut straight_opt = AdamW::new(shallow(&straight), &cfg).unwrap();
    train(&straight, &mut straight_opt, 0..5);

    let run = tempfile::tempdir().unwrap();
    {
        let (_vs, first) = model(5.0);
        let mut opt = AdamW::new(shallow(&first), &cfg).unwrap();
        train(&first, &mut opt, 0..2);
        let parts = CheckpointParts {
            weights: &first,
            optimizer: &opt.state(),
            state: &resume(2),
        };
        save_checkpoint(run.path(), 2, &parts, 1).unwrap();
    }

    // A fresh process: other initial values, then everything from the checkpoint.
    let (_vs, resumed) = model(99.0);
    let mut opt = AdamW::new(shallow(&resumed), &cfg).unwrap();
    let loaded: LoadedCheckpoint<Resume> = load_latest(run.path()).unwrap();
    restore_tensors(&resumed, &loaded.weights).unwrap();
    opt.load_state(&loaded.optimizer.read_all().unwrap()).unwrap();
    train(&resumed, &mut opt, loaded.state.step..5);

    assert_same(&resumed, &straight);
    assert_same(&opt.state(), &straight_opt.state());
}

/// Flips one bit of the file at `path`, `at` bytes from its end (inside the tensor data).
fn flip_bit(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    let i = bytes.len() - at;
    bytes[i] ^= 0x10;
    fs::write(path, bytes).unwrap();
}

/// The safetensors file at `path` with the data offsets of its tensors `a` and `b` (of one size)
/// swapped in its header: a valid file whose tensors hold each other's values.
fn swap_offsets(path: &Path, a: &str, b: &str) {
    let bytes = fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let offsets = |h: &serde_json::Value, name: &str| h[name]["data_offsets"].clone();
    let (oa, ob) = (offsets(&header, a), offsets(&header, b));
    header[a]["data_offsets"] = ob;
    header[b]["data_offsets"] = oa;
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(n, b' ');
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(&bytes[8 + n..]);
    fs::write(path, out).unwrap();
}

/// A flipped bit in the weights or the optimizer state, two tensors' offsets swapped, a state file
/// edited, a manifest removed: each is refused, naming the file, where the files alone still load.
#[test]
fn a_damaged_checkpoint_is_refused_naming_the_file() {
    let run = tempfile::tempdir().unwrap();
    let dir = save(run.path(), 3, 0);
    assert!(load_checkpoint::<Resume>(&dir).is_ok());
    let pristine: Vec<(String, Vec<u8>)> = ["weights.safetensors", "optimizer.safetensors", "state.json"]
        .iter()
        .map(|name| (name.to_string(), fs::read(dir.join(name)).unwrap()))
        .collect();
    let restore = || {
        for (name, bytes) in &pristine {
            fs::write(dir.join(name), bytes).unwrap();
        }
    };
    let refused = |file: &str| {
        let err = load_checkpoint::<Resume>(&dir).unwrap_err();
        assert!(matches!(err, CheckpointError::Unverified { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("step-3/{file}")) && text.contains("the checkpoint is damaged"),
            "{text}"
        );
    };

    flip_bit(&dir.join("optimizer.safetensors"), 3);
    refused("optimizer.safetensors");
    restore();

    flip_bit(&dir.join("weights.safetensors"), 5);
    refused("weights.safetensors");
    // Running or exporting the model checks the weights too.
    let err = load_weights(&dir).unwrap_err().to_string();
    assert!(err.contains("step-3/weights.safetensors"), "{err}");
    restore();

    // model.a (2x3) and model.c (2x3 after the transpose) swap places: still a valid file.
    swap_offsets(&dir.join("weights.safetensors"), "model.a", "model.c");
    refused("weights.safetensors");
    restore();

    fs::write(dir.join("state.json"), serde_json::to_string(&resume(2)).unwrap()).unwrap();
    refused("state.json");
    restore();

    assert!(load_checkpoint::<Resume>(&dir).is_ok());
    fs::remove_file(dir.join("manifest.json")).unwrap();
    let err = load_checkpoint::<Resume>(&dir).unwrap_err().to_string();
    assert!(
        err.contains("step-3/manifest.json") && err.contains("missing"),
        "{err}"
    );
}

/// Weights or optimizer state holding NaN or infinity are never saved: the save is refused, naming
/// the tensor, and the checkpoint before it stays the latest.
#[test]
fn non_finite_tensors_are_never_saved() {
    let run = tempfile::tempdir().unwrap();
    save(run.path(), 1, 0);
    let weights = tensors();
    let _ = weights[1].1.get(2).fill_(f64::INFINITY);
    let optimizer = vec![("exp_avg_sq/model.a".to_string(), values(&[2, 3], 4.0))];
    let parts = CheckpointParts {
        weights: &weights,
        optimizer: &optimizer,
        state: &resume(2),
    };
    let err = save_checkpoint(run.path(), 2, &parts, 0).unwrap_err().to_string();
    assert!(
        err.contains("`model.b`") && err.contains("NaN or infinity"),
        "{err}"
    );

    let weights = tensors();
    let _ = optimizer[0].1.get(1).get(0).fill_(f64::NAN);
    let parts = CheckpointParts {
        weights: &weights,
        optimizer: &optimizer,
        state: &resume(2),
    };
    let err = save_checkpoint(run.path(), 2, &parts, 0).unwrap_err().to_string();
    assert!(err.contains("`exp_avg_sq/model.a`"), "{err}");
    assert_eq!(entries(&run.path().join("checkpoints")), ["latest", "step-1"]);
    assert_eq!(load_latest::<Resume>(run.path()).unwrap().step, 1);
}

/// A resume refuses a damaged latest checkpoint; asked to fall back, it takes the newest that
/// verifies, names it `latest` and renames the damaged ones out of the way of the steps to come.
#[test]
fn a_resume_can_fall_back_to_the_newest_checkpoint_that_verifies() {
    let run = tempfile::tempdir().unwrap();
    let root = run.path().join("checkpoints");
    for step in [2, 4, 6] {
        save(run.path(), step, 0);
    }
    flip_bit(&root.join("step-6/optimizer.safetensors"), 2);
    flip_bit(&root.join("step-4/weights.safetensors"), 2);
    let err = load_resumable::<Resume>(run.path(), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("step-6/optimizer.safetensors"), "{err}");
    assert_eq!(entries(&root), ["latest", "step-2", "step-4", "step-6"]);

    let (checkpoint, passed) = load_resumable::<Resume>(run.path(), true).unwrap();
    assert_eq!((checkpoint.step, checkpoint.state.step), (2, 2));
    let passed: Vec<(String, String)> = passed
        .iter()
        .map(|p| {
            (
                p.dir.file_name().unwrap().to_string_lossy().into_owned(),
                p.error.to_string(),
            )
        })
        .collect();
    assert_eq!(passed[0].0, "damaged-step-6");
    assert!(
        passed[0].1.contains("step-6/optimizer.safetensors"),
        "{}",
        passed[0].1
    );
    assert_eq!(passed[1].0, "damaged-step-4");
    assert!(
        passed[1].1.contains("step-4/weights.safetensors"),
        "{}",
        passed[1].1
    );
    assert_eq!(
        entries(&root),
        ["damaged-step-4", "damaged-step-6", "latest", "step-2"]
    );
    assert_eq!(checkpoint_steps(run.path()).unwrap(), [2]);
    // The run saves step 4 again.
    save(run.path(), 4, 0);
    assert_eq!(load_latest::<Resume>(run.path()).unwrap().step, 4);

    // None verifies: the newest one's error.
    flip_bit(&root.join("step-4/state.json"), 2);
    flip_bit(&root.join("step-2/state.json"), 2);
    let err = load_resumable::<Resume>(run.path(), true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("step-4/state.json"), "{err}");
}
