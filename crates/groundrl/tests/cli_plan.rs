//! `groundrl plan`: the table of the shipped configs (numbers derived by hand in
//! `groundrl-train/src/plan.rs`'s tests), exit code 2 with the knob when a config does not fit, and a
//! clean error for unknown keys.

use crate::common;

use std::process::Output;

use common::{command, repo_root, text};

/// Runs `groundrl plan` from the repository root, where the shipped configs' paths start.
fn plan(args: &[&str]) -> Output {
    command()
        .current_dir(repo_root())
        .arg("plan")
        .args(args)
        .output()
        .unwrap()
}

/// [`plan`] with `PATH` holding only `bin` (where a stand-in `nvidia-smi` may be).
fn plan_with_path(bin: &std::path::Path, args: &[&str]) -> Output {
    command()
        .current_dir(repo_root())
        .env("PATH", bin)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .arg("plan")
        .args(args)
        .output()
        .unwrap()
}

/// Without `--gpu-memory` a CUDA config is planned for the GPU's memory as `nvidia-smi` lists it
/// (a stand-in printing an H200's 143,771 MiB: checkpointing off, the plan filling 65%), and for
/// 80 GiB when there is no `nvidia-smi` (checkpointing on); stderr says which.
#[test]
fn without_a_size_the_gpu_s_memory_is_read_from_nvidia_smi() {
    let bin = tempfile::tempdir().unwrap();
    let out = plan_with_path(bin.path(), &["configs/3b-1gpu.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stderr.starts_with("planning for 80 GiB: no GPU memory read from nvidia-smi"),
        "{stderr}"
    );
    assert!(
        stdout.contains("\"auto\": on (the plan without it fills 115% of the GPU's 80.00 GiB"),
        "{stdout}"
    );
    let smi = bin.path().join("nvidia-smi");
    std::fs::write(&smi, "#!/bin/sh\necho '0, GPU-5e1f, 143771'\n").unwrap();
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = plan_with_path(bin.path(), &["configs/3b-1gpu.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stderr.starts_with("planning for the GPU's 140.40 GiB (nvidia-smi"),
        "{stderr}"
    );
    assert!(
        stdout.contains("\"auto\": off (the plan without it fills 65% of the GPU's 140.40 GiB")
            && stdout
                .lines()
                .any(|l| l.starts_with("GPU ") && l.ends_with(" 140.401")),
        "{stdout}"
    );
}

#[test]
fn the_tiny_config_table() {
    let out = plan(&["configs/cpu-tiny.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Bytes from plan.rs's tiny test (the engine kept through the update, so its KV caches and
    // decoding weights are resident; a micro-batch is one shared-prefix row); peak 69,282,560 +
    // 6,928,256 of slack.
    assert_eq!(
        text(&out.stdout),
        "\
configs/cpu-tiny.toml: 1.21M parameters, 0.87M trainable, f32 on cpu; no reference model, f32 master weights
part                          phase           GiB
parameters                    resident      0.005
gradients                     resident      0.003
optimizer state               resident      0.007
reference model               resident      0.000
KV cache                      resident      0.016
decoding weights              resident      0.002
prefill                       rollout       0.018
activations                   update        0.027
log-prob chunk                update        0.001
vision tower                  update        0.004
context and allocator slack   resident      0.006
peak (resident + update)                    0.071
the config trains on the cpu: no GPU memory to check (--gpu-memory applies to CUDA configs)
"
    );
}

#[test]
fn the_3b_config_fits_80_gib() {
    let out = plan(&["configs/3b-1gpu.toml", "--gpu-memory", "80GiB"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // 7,509,245,952 B = 6.994 GiB of bf16 parameters; 3,085,938,688 text parameters train: 5.748 GiB
    // of gradients and 12 bytes each of AdamW state with f32 masters (34.488 GiB); the kept engine's
    // KV caches (120 rows: the step's 64 and the ledger's last batch of at most 56) and decoding weights
    // are resident; a micro-batch is two prompts' 8 completions, two shared-prefix rows, twice the
    // activations, vision tower and scored tokens of plan.rs's hand-derived micro-batch of 8
    // (`the_config_in_micro_batches_of_16`); peak, in the update, 68.632 GiB.
    assert_eq!(
        text(&out.stdout),
        "\
configs/3b-1gpu.toml: 3.75B parameters, 3.09B trainable, bf16 on cuda; no reference model, f32 master weights
model.gradient_checkpointing = \"auto\": on (the plan without it fills 115% of the GPU's 80.00 GiB: over 90%)
part                          phase           GiB
parameters                    resident      6.994
gradients                     resident      5.748
optimizer state               resident     34.488
reference model               resident      0.000
KV cache                      resident      6.328
decoding weights              resident      3.375
prefill                       rollout       2.218
activations                   update        1.967
log-prob chunk                update        2.029
vision tower                  update        0.555
context and allocator slack   resident      7.148
peak (resident + update)                   68.632
GPU                                        80.000
free                                       11.368
"
    );
}

/// On a 139 GiB H200 the shipped config's `gradient_checkpointing = "auto"` turns it off: the plan
/// without it (91.84 GiB) fills 66%.
#[test]
fn auto_checkpointing_is_off_on_an_h200() {
    let out = plan(&["configs/3b-1gpu.toml", "--gpu-memory", "139GiB"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "model.gradient_checkpointing = \"auto\": off (the plan without it fills 66% of the GPU's \
             139.00 GiB: room for the activations)\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("peak (resident + update)                   91.839\n"),
        "{stdout}"
    );
}

/// Without checkpointing the 3B config in micro-batches of 8 fits 80 GiB under the shared-prefix
/// update (78.21 GiB, plan.rs) and not in the row layout, where the knob to turn is named.
#[test]
fn a_config_that_does_not_fit_exits_2_with_the_knob() {
    let eight = "trainer.micro_batch_size=8";
    let out = plan(&[
        "configs/3b-1gpu.toml",
        eight,
        "model.gradient_checkpointing=false",
        "--gpu-memory",
        "80GiB",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("peak (resident + update)                   78.211\n"));
    let out = plan(&[
        "configs/3b-1gpu.toml",
        eight,
        "model.gradient_checkpointing=false",
        "trainer.shared_prefix=false",
        "--gpu-memory",
        "80GiB",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stdout).contains("activations                   update       58.269\n"));
    assert_eq!(
        text(&out.stderr),
        "error: the plan needs 131.76 GiB but the GPU has 80.00 GiB (51.76 GiB short); the largest part \
         that can shrink is activations (58.27 GiB): set `model.gradient_checkpointing = true` \
         (activations then 4.97 GiB)\n"
    );
    // 50 GB = 46.566 GiB: the checkpointed config's largest shrinkable part is the optimizer state.
    let out = plan(&["configs/3b-1gpu.toml", "--gpu-memory", "50GB"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stdout).ends_with("GPU                                        46.566\nfree                                      -22.066\n"));
    assert!(
        text(&out.stderr).contains("optimizer state (34.49 GiB): turn LoRA on (`model.lora_rank`, e.g. 16)"),
        "{}",
        text(&out.stderr)
    );
}

/// `--largest-micro-batch` plans the largest micro-batch that fits (plan.rs's test derives 32 for
/// the 3B config on 80 GiB: 4 of the step's 8 prompts in a micro-batch) and says so; where none
/// fits, the config's own plan is refused as usual.
#[test]
fn the_largest_micro_batch_that_fits_is_planned_and_named() {
    let out = plan(&[
        "configs/3b-1gpu.toml",
        "--gpu-memory",
        "80GiB",
        "--largest-micro-batch",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.ends_with(
            "trainer.micro_batch_size = 32 is the largest that fits (the config has 16): override it \
             with trainer.micro_batch_size=32\n"
        ),
        "{stdout}"
    );
    // The table is the plan of 32: 4 rows of 1,408 + 8 x 128 tokens (3.935 GiB of activations).
    assert!(
        stdout.contains("activations                   update        3.935\n"),
        "{stdout}"
    );
    let out = plan(&[
        "configs/3b-1gpu.toml",
        "--gpu-memory",
        "40GiB",
        "--largest-micro-batch",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!text(&out.stdout).contains("is the largest that fits"));
    assert!(
        text(&out.stderr).starts_with("error: the plan needs 68.63 GiB"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn unknown_keys_and_bad_values_are_refused_cleanly() {
    let out = plan(&["configs/3b-1gpu.toml", "rollout.temprature=0.7"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "error: config configs/3b-1gpu.toml: unknown key `rollout.temprature`; did you mean \
         `rollout.temperature`?\n"
    );
    let out = plan(&["configs/3b-1gpu.toml", "trainer.micro_batch_size=3"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: config configs/3b-1gpu.toml: `trainer.micro_batch_size`: 3 does not divide \
         trainer.mini_batch_size 64\n"
    );
}

/// One GPU of 4 and of 2 for the 7B shape's full fine-tune under ZeRO stage 1 (numbers from
/// plan.rs's 7B test, which, as here, does not keep the engine between steps): 91.39 GB of AdamW
/// state, a quarter on each of 4 GPUs (21.278 GiB), peak 72,789,860,812 B = 67.791 GiB, which fits;
/// half on each of 2 (42.556 GiB), 93.250 GiB, which does not.
#[test]
fn the_7b_shape_over_4_gpus_with_zero_stage_1_fits_80_gib() {
    let args = |world: &'static str| {
        [
            "configs/3b-1gpu.toml",
            "model.preset=7b",
            "distributed.zero_stage=1",
            "rollout.keep_engine=false",
            "--gpu-memory",
            "80GiB",
            "--nproc-per-node",
            world,
        ]
    };
    let out = plan(&args("4"));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "configs/3b-1gpu.toml: 8.29B parameters, 7.62B trainable, bf16 on cuda; no reference model, f32 master weights\n",
        "one GPU of 4: 1/4 of each step's prompts and 1/4 of the optimizer state on each (distributed.zero_stage = 1)\n",
        "optimizer state               resident     21.278\n",
        "peak (resident + rollout)                  67.791\n",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}");
    }
    let out = plan(&args("2"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("optimizer state               resident     42.556\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("peak (resident + rollout)                  93.250\n"),
        "{stdout}"
    );
}
