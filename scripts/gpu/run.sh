#!/usr/bin/env bash
# The GPU machine's measurement session for the Qwen2.5-VL model, in one go:
#   1. the tiny HF goldens regenerated there (CPU and CUDA) and compared with the committed ones;
#   2. bf16 logits parity with transformers on the full 3B shape (random init, one 1262-token screenshot);
#   3. forward and training-step time and device memory of the 3B shape.
# It expects the GPU build of the CLI at .device/groundrl (scripts/gpu/build.sh makes it) and writes a
# short table at the end. Usage on the GPU machine: bash scripts/gpu/run.sh [goldens] [parity] [bench]
# [rollout] [train] [trainstep] [cudnn] [plan] [demo] [tools] [profile] [kernels] [attention] (the first
# five when none is named; each runs within ten minutes). `kernels` runs the tensor and training crates' tests built for
# CUDA (.device/groundrl-{tensor,train}-tests, also made by build.sh), the kernels' CUDA tests among them;
# `attention` times one layer's decoding attention alone (`groundrl bench attention`).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
parts=${*:-goldens parity bench rollout train}
source "$root/scripts/gpu/session.sh"

if want goldens; then
echo "== 1. tiny goldens on this machine (cpu, cuda) vs committed"
for dev in cpu cuda; do
  $py "$root/scripts/goldens/qwen2_5_vl.py" --out "$work/goldens-$dev" --device "$dev" 2>&1 | grep -E "tiny_|transformers"
done
$py - "$root/crates/groundrl-tensor/tests/fixtures/qwen2_5_vl" "$work" <<'EOF'
import sys
from safetensors.torch import load_file
committed, work = sys.argv[1], sys.argv[2]
for name in ["tiny_a", "tiny_b"]:
    ref = load_file(f"{committed}/{name}/expected.safetensors")
    for dev in ["cpu", "cuda"]:
        new = load_file(f"{work}/goldens-{dev}/{name}/expected.safetensors")
        diffs = {k: (ref[k].double() - new[k].double()).abs().max().item() for k in ref}
        print(f"{name} regenerated on {dev}: max |diff| vs committed {diffs}")
EOF
fi

if want parity; then
echo "== 2. 3B bf16 parity"
"$bin" model init --preset 3b --out "$work/q3b" --dtype bf16 --device cuda || exit 1
$py "$root/scripts/gpu/bf16_parity.py" --model "$work/q3b" --work "$work" || exit 1
"$bin" model logits --model "$work/q3b" --inputs "$work/inputs.safetensors" --out "$work/ours_logits.safetensors" \
  --dtype bf16 --device cuda || exit 1
$py "$root/scripts/gpu/bf16_parity.py" --model "$work/q3b" --work "$work" --compare | tee "$out/parity_3b.json"
fi

if want bench; then
echo "== 3. 3B speed and memory (one process per phase)"
bench() { "$bin" bench model --preset 3b --dtype bf16 --device cuda "$@" | tee -a "$out/bench_3b.jsonl"; }
bench --phase forward --rows 8
bench --phase forward --rows 64
bench --phase train --rows 4 --freeze-vision
bench --phase train-checkpoint --rows 8 --freeze-vision
bench --phase train-checkpoint --rows 8
bench --phase train --rows 1
fi

if want rollout; then
echo "== 4. rollout: groundrl vs HF generate, 3B shape, 1,262-token screenshot prompts, 128 new tokens"
for n in 1 8; do
  "$bin" bench rollout --preset 3b --dtype bf16 --device cuda --prompts 8 --n $n --bandwidth-gbs $bw --compare-eager | tee -a "$out/rollout_3b.jsonl"
done
"$bin" bench rollout --preset 3b --dtype bf16 --device cuda --prompts 8 --n 8 --bandwidth-gbs $bw --no-fused | tee -a "$out/rollout_3b.jsonl"
[ -d "$work/q3b" ] || "$bin" model init --preset 3b --out "$work/q3b" --dtype bf16 --device cuda
$py "$root/scripts/bench/rollout_hf.py" --model "$work/q3b" 2>&1 | grep '^{' | tee -a "$out/rollout_3b.jsonl"
fi

if want train; then
echo "== 5. training: GRPO steps of 8 prompts x 8 samples (3B shape), plan vs peak (the single training step: trainstep)"
grpo=$work/grpo
rm -rf "$grpo" && mkdir -p "$grpo"
"$bin" synth --out "$grpo/data" --n 30 --seed 0 --difficulty medium --prompt instruct
overrides=(data.train="$grpo/data/samples.jsonl" 'data.val=""' trainer.run_dir="$grpo/run" trainer.max_steps=3
  trainer.save_freq=0 trainer.test_freq=0)
(cd "$root" && "$bin" plan configs/3b-1gpu.toml "${overrides[@]}" --gpu-memory "${gpu_gib}GiB") | tee "$out/plan_3b.txt"
(cd "$root" && "$bin" train configs/3b-1gpu.toml "${overrides[@]}" --gpu-memory "${gpu_gib}GiB") 2>&1 | tail -5
cp "$grpo/run/metrics.jsonl" "$out/grpo_3b_metrics.jsonl"
$py - "$grpo/run/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); t = r["train"]
    print(json.dumps({"step": r["step"], "time_step_s": t["time/step"], "time_rollout_s": t["time/rollout"],
                      "time_encode_s": t.get("time/encode"), "time_generate_s": t.get("time/generate"),
                      "time_update_s": t["time/update"], "mfu_update": t.get("mfu"),
                      "generated_tokens_per_s": t["generated_tokens_per_s"],
                      "peak_memory_gib": t.get("peak_memory_bytes", 0) / 2**30,
                      "reward_mean": r["rollout"]["reward"]["mean"]}))
PY
fi

if want trainstep; then
echo "== 5b. the full fine-tune and frozen-tower steps with and without our CUDA kernels; a profiled step"
for freeze in "" --freeze-vision; do
  for fused in "" --no-fused; do
    "$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 $freeze $fused | tee -a "$out/train_step_3b.jsonl"
  done
done
prof=$work/profile
rm -rf "$prof" && mkdir -p "$prof"
"$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --profile "$prof/train.json" > /dev/null
$py "$root/scripts/bench/kernel_table.py" "$prof/train.json" --top 40 | tee "$out/profile_train.txt"
fi

if want cudnn; then
echo "== 5c. libtorch's attention with and without cuDNN's kernels: fixed-shape training steps, GRPO steps"
for freeze in "" --freeze-vision; do
  for cudnn in "" --no-cudnn-attention; do
    "$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 $freeze $cudnn | tee -a "$out/train_step_cudnn.jsonl"
  done
done
grpo=$work/grpo-cudnn
rm -rf "$grpo" && mkdir -p "$grpo"
"$bin" synth --out "$grpo/data" --n 30 --seed 0 --difficulty medium --prompt instruct > /dev/null
for cudnn in false true; do
  # The second run starts from the first one's initial model instead of writing the preset again.
  model=(); [ "$cudnn" = true ] && model=(model.preset=none model.path="$grpo/false/initial-model")
  (cd "$root" && "$bin" train configs/3b-1gpu.toml data.train="$grpo/data/samples.jsonl" 'data.val=""' \
    trainer.run_dir="$grpo/$cudnn" trainer.max_steps=4 trainer.save_freq=0 trainer.test_freq=0 \
    model.cudnn_attention=$cudnn "${model[@]}" --gpu-memory "${gpu_gib}GiB") > /dev/null 2>&1
  cp "$grpo/$cudnn/metrics.jsonl" "$out/grpo_cudnn_$cudnn.jsonl"
  $py - "$grpo/$cudnn/metrics.jsonl" "$cudnn" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); t = r["train"]
    print(json.dumps({"cudnn_attention": sys.argv[2], "step": r["step"], "time_step_s": round(t["time/step"], 3),
                      "time_generate_s": round(t["time/generate"], 3), "time_update_s": round(t["time/update"], 3),
                      "peak_memory_gib": round(t.get("peak_memory_bytes", 0) / 2**30, 2)}))
PY
done
fi

if want plan; then
echo "== 6. memory plan vs measured peak for more 3B-shape GRPO configs (two steps each)"
grpo=$work/grpo-plan
rm -rf "$grpo" && mkdir -p "$grpo"
"$bin" synth --out "$grpo/data" --n 30 --seed 0 --difficulty medium --prompt instruct > /dev/null
source "$root/scripts/gpu/plan-check.sh"
variant() { plan_check configs/3b-1gpu.toml "$grpo" "$@"; }
variant lora16 model.lora_rank=16 model.lora_alpha=32 | tee -a "$out/plan_check.jsonl"
variant n16 rollout.n=16 trainer.mini_batch_size=128 | tee -a "$out/plan_check.jsonl"
variant vision model.freeze_vision=false | tee -a "$out/plan_check.jsonl"
fi

if want demo; then
echo "== 7. groundrl demo --gpu: the small preset from random weights, warm-up, GRPO, held-out before/after"
demo=$work/demo-gpu
rm -rf "$demo"
(cd "$work" && timeout 560 "$bin" demo --gpu --out "$demo") 2>&1 | grep -v '^\s*$' | tail -12
cp "$demo/summary.json" "$out/demo_gpu_summary.json" 2>/dev/null
for f in sft.jsonl metrics.jsonl report.html config.toml; do cp "$demo/seed-0/$f" "$out/demo_gpu_$f" 2>/dev/null; done
for label in before after; do cp "$demo/seed-0/eval/$label.jsonl" "$out/demo_gpu_eval_$label.jsonl" 2>/dev/null; done
fi

if want tools; then
echo "== 8. groundrl demo --tools --gpu: the small preset learns to zoom; mixed batches of zooming and direct answers"
demo=$work/demo-tools-gpu
rm -rf "$demo"
(cd "$work" && timeout 590 "$bin" demo --tools --gpu --out "$demo" --seeds 1 --test-tasks 183 \
  sft.steps=300 trainer.max_steps=40) 2>&1 | grep -v '^\s*$' | tail -12
for f in sft.jsonl metrics.jsonl report.html config.toml; do cp "$demo/seed-0/$f" "$out/demo_tools_gpu_$f" 2>/dev/null; done
for label in before after; do cp "$demo/seed-0/eval/$label.jsonl" "$out/demo_tools_gpu_eval_$label.jsonl" 2>/dev/null; done
$py - "$demo/seed-0/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows[:3] + rows[-3:]:
    t, ro = r["train"], r["rollout"]
    print(json.dumps({"step": r["step"], "tool_use_rate": ro.get("tool_use_rate"),
                      "calls_per_sample": ro.get("tool_calls_per_sample"),
                      "accuracy": ro.get("accuracy", {}).get("share"),
                      "generated_tokens_per_s": round(t["generated_tokens_per_s"]),
                      "time_rollout_s": round(t["time/rollout"], 3), "time_step_s": round(t["time/step"], 3)}))
PY
fi

if want profile; then
echo "== 9. where the device time goes: kernel tables of a batch-64 rollout and a training step (3B shape)"
prof=$work/profile
rm -rf "$prof" && mkdir -p "$prof"
"$bin" bench rollout --preset 3b --dtype bf16 --device cuda --prompts 8 --n 8 --bandwidth-gbs $bw \
  --profile "$prof/rollout" | tee -a "$out/profile_rollout_3b.jsonl"
$py "$root/scripts/bench/kernel_table.py" "$prof/rollout/prefill.json" --top 20 | tee "$out/profile_prefill.txt"
$py "$root/scripts/bench/kernel_table.py" "$prof/rollout/generate.json" --top 30 --per 128 | tee "$out/profile_generate.txt"
"$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --profile "$prof/train.json" | tee -a "$out/profile_train_3b.jsonl"
$py "$root/scripts/bench/kernel_table.py" "$prof/train.json" --top 30 | tee "$out/profile_train.txt"
fi

if want kernels; then
echo "== 10. the tensor crate's tests on the GPU (fused kernels against transformers' order of operations)"
(cd "$root/crates/groundrl-tensor" && "$root/.device/groundrl-tensor-tests" --test-threads 1 fused sampling \
  rotary 2>&1 | tail -20) | tee "$out/kernels_tests.txt"
(cd "$root/crates/groundrl-train" && "$root/.device/groundrl-train-tests" --test-threads 1 --nocapture \
  the_cuda_kernel 2>&1 | tail -20) | tee -a "$out/kernels_tests.txt"
fi

if want attention; then
echo "== 11. one layer's decoding attention alone (3B heads, 1,326 keys): SDPA vs our kernel per split count"
for rows in 64 8; do
  prof=$work/attention-$rows
  rm -rf "$prof"
  "$bin" bench attention --rows $rows --bandwidth-gbs $bw --iters 100 --profile "$prof" | tee -a "$out/attention_3b.jsonl"
  # Device time per call: the us/call column (the lines above are host-timed, launches included).
  for trace in "$prof"/*.json; do
    echo "rows $rows, $(basename "$trace" .json): device time per call, by kernel"
    $py "$root/scripts/bench/kernel_table.py" "$trace" --top 3 --per 100 | sed -n '/us\/call  kernel/,/host ms/p' | grep -v "host ms"
  done | tee -a "$out/attention_device.txt"
done
fi
