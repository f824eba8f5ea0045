#!/usr/bin/env bash
# A tiny random Qwen3-VL (preset qwen3-tiny, gradient checkpointing, 2 micro-batches of 8 a step, the
# words-length reward so that the advantages are not 0) trained 2 GRPO steps in one process and on 2 workers
# (`--nproc-per-node 2`), then with ZeRO-1 on 2 workers; prints whether each run's step records (timings
# left out) equal the one process's, and its step-2 weights' checksum.
set -euo pipefail
bin=${BIN:-target/debug/groundrl}
w=${WORK:-/tmp/dp-words}
rm -rf "$w" && mkdir -p "$w"
"$bin" synth --out "$w/data" --n 8 --seed 0 --difficulty easy --prompt instruct --answer-frame qwen1000 > /dev/null
cat > "$w/c.toml" <<TOML
[model]
preset = "qwen3-tiny"
dtype = "f32"
device = "cpu"
gradient_checkpointing = true
[data]
train = "$w/data/samples.jsonl"
[rollout]
n = 4
prompts_per_step = 4
max_new_tokens = 8
[reward]
spec = "$PWD/configs/rewards/words-length.toml"
correct_component = "words"
correct_threshold = 0.5
[optim]
lr = 1e-3
[trainer]
total_epochs = 10
max_steps = 2
mini_batch_size = 16
micro_batch_size = 8
save_freq = 1
keep_checkpoints = 0
test_freq = 0
[distributed]
checksum_every = 1
TOML
export OMP_WAIT_POLICY=PASSIVE
"$bin" train "$w/c.toml" trainer.run_dir="$w/one" 2>&1 | tail -1
"$bin" train "$w/c.toml" trainer.run_dir="$w/two" --nproc-per-node 2 2>&1 | tail -1
"$bin" train "$w/c.toml" trainer.run_dir="$w/zero1" distributed.zero_stage=1 --nproc-per-node 2 2>&1 | tail -1
python3 - "$w" <<'PY'
import hashlib, json, sys, glob, os
w = sys.argv[1]
def untimed(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        t = r.get("train", {})
        for k in list(t):
            if k.startswith("time/") or k in ("generated_tokens_per_s", "mfu", "mfu_model_flops", "peak_memory_bytes"):
                t.pop(k)
        r.pop("time", None)
        out.append(r)
    return out
one = untimed(f"{w}/one/metrics.jsonl")
print("one process: gradient norms", [r["train"]["grad_norm"] for r in one])
for run in ["two", "zero1"]:
    same = untimed(f"{w}/{run}/metrics.jsonl") == one
    print(f"{run}: step records equal one process's (timings left out): {same}")
for run in ["one", "two", "zero1"]:
    files = sorted(glob.glob(f"{w}/{run}/checkpoints/step-2/*.safetensors"))
    h = hashlib.sha256(b"".join(open(f, "rb").read() for f in files)).hexdigest()[:16]
    print(f"{run}: step-2 weights {[os.path.basename(f) for f in files]} sha256 {h}")
PY
