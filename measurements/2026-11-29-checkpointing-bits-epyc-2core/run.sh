#!/usr/bin/env bash
# Gradient checkpointing against none, one process, 2 GRPO steps of 2 micro-batches of 8 (an
# accumulation), lr 1e-2, for the `tiny` (Qwen2.5-VL) and `qwen3-tiny` presets with the vision tower
# trained, and the words-length reward (which differs between a random model's completions, so the
# advantages are not 0): prints each run's gradient norms, and whether each pair's step records
# (timings left out) and step-2 weights are equal.
set -euo pipefail
bin=${BIN:-target/debug/groundrl}
w=${WORK:-/tmp/ckpt-bits}
rm -rf "$w" && mkdir -p "$w"
export OMP_WAIT_POLICY=PASSIVE
for preset in tiny qwen3-tiny; do
  frame=$([ "$preset" = tiny ] && echo resized || echo qwen1000)
  "$bin" synth --out "$w/$preset-data" --n 8 --seed 0 --difficulty easy --prompt instruct --answer-frame "$frame" > /dev/null
  cat > "$w/$preset.toml" <<TOML
[model]
preset = "$preset"
dtype = "f32"
device = "cpu"
freeze_vision = false
[data]
train = "$w/$preset-data/samples.jsonl"
[rollout]
n = 4
prompts_per_step = 4
max_new_tokens = 8
[reward]
spec = "$PWD/configs/rewards/words-length.toml"
correct_component = "words"
correct_threshold = 0.5
[optim]
lr = 1e-2
[trainer]
total_epochs = 10
max_steps = 2
mini_batch_size = 16
micro_batch_size = 8
save_freq = 1
keep_checkpoints = 0
test_freq = 0
[rounds]
final_ledger = false
TOML
  for ckpt in false true; do
    "$bin" train "$w/$preset.toml" model.gradient_checkpointing=$ckpt trainer.run_dir="$w/$preset-$ckpt" 2>&1 | tail -1
  done
done
python3 - "$w" <<'PY'
import hashlib, json, sys, glob
w = sys.argv[1]
def untimed(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        t = r.get("train", {})
        for k in list(t):
            if k.startswith("time/") or k in ("generated_tokens_per_s", "mfu", "mfu_model_flops", "peak_memory_bytes"):
                t.pop(k)
        out.append(r)
    return out
def weights(run):
    files = sorted(glob.glob(f"{w}/{run}/checkpoints/step-2/*.safetensors"))
    return hashlib.sha256(b"".join(open(f, "rb").read() for f in files)).hexdigest()[:16]
for preset in ["tiny", "qwen3-tiny"]:
    a, b = f"{preset}-false", f"{preset}-true"
    norms = [r["train"]["grad_norm"] for r in untimed(f"{w}/{b}/metrics.jsonl")]
    print(f"{preset}: gradient norms of the steps {norms}")
    same = untimed(f"{w}/{a}/metrics.jsonl") == untimed(f"{w}/{b}/metrics.jsonl")
    print(f"{preset}: step records equal with and without checkpointing (timings left out): {same}")
    print(f"{preset}: step-2 weights sha256 without {weights(a)}, with {weights(b)}")
PY
