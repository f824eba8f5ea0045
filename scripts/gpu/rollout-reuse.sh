#!/usr/bin/env bash
# The trainer's rollout phase next to `groundrl bench rollout` on the same batch (docs/design.md, "The
# rollout engine"): five GRPO steps of the 3B shape (configs/3b-1gpu.toml: 8 prompts x 8 samples, 128
# new tokens, random weights) on 1920x1080 synthetic screenshots, once keeping the rollout engine
# between steps (the default) and once starting every generation from a new engine
# (`rollout.keep_engine=false`, what the trainer did before); then `bench rollout` on the first 8
# samples of the same file, encoded by the run's processor at the run's pixel budget. Prints steps 2-5
# (time/generate, time/rollout, decoding sessions made, tokens generated, peak device memory) and the
# bench's seconds.
# Expects the GPU build at .device/groundrl (scripts/gpu/build.sh). Usage on one H100 (about 3 minutes):
#   bash scripts/gpu/rollout-reuse.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${BIN:-$root/.device/groundrl}
py=${PYTHON:-python3}
work=${WORK:-/tmp/groundrl-rollout-reuse}
out=${OUT:-$work/out}
rm -rf "$work" && mkdir -p "$work" "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in *H100*) bw=3350 ;; *) bw=4800 ;; esac
gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1/1024}')
# configs/3b-1gpu.toml's budget: a 1920x1080 screenshot resizes to 1316x728, 1,222 image tokens.
max_pixels=1003520
"$bin" synth --out "$work/data" --n 30 --seed 0 --difficulty medium --size 1920x1080 --prompt instruct > /dev/null
data=$work/data/samples.jsonl

for keep in true false; do
  # The second run starts from the first one's initial model instead of writing the preset again.
  model=(); [ "$keep" = false ] && model=(model.preset=none model.path="$work/true/initial-model")
  (cd "$root" && timeout 240 "$bin" train configs/3b-1gpu.toml data.train="$data" 'data.val=""' \
    trainer.run_dir="$work/$keep" trainer.max_steps=5 trainer.save_freq=0 trainer.test_freq=0 \
    model.max_pixels=$max_pixels rollout.keep_engine=$keep "${model[@]}" --gpu-memory "${gpu_gib}GiB") \
    > "$work/train-$keep.log" 2>&1 || { tail -20 "$work/train-$keep.log"; exit 1; }
  cp "$work/$keep/metrics.jsonl" "$out/metrics-keep-$keep.jsonl"
done

# The same prompts, sampled the same way (temperature 1, no top-p or top-k), libtorch's attention off
# cuDNN as in training; the timed run follows an untimed one.
timeout 180 "$bin" bench rollout --model "$work/true/initial-model" --data "$data" --max-pixels $max_pixels \
  --prompts 8 --n 8 --new-tokens 128 --dtype bf16 --device cuda --no-cudnn-attention --bandwidth-gbs $bw \
  | tee "$out/bench-rollout.jsonl"

$py - "$out" <<'PY'
import json, sys
out = sys.argv[1]
bench = json.loads(open(f"{out}/bench-rollout.jsonl").readline())
print(f"bench rollout: {bench['seconds']:.3f} s for {bench['batch']} x {bench['new_tokens']} tokens "
      f"({bench['prompt_tokens']}-token prompts), prefill {bench['prefill_seconds']:.3f} s")
print(f"{'engine':<6} {'step':>4} {'generate s':>10} {'rollout s':>9} {'sessions':>8} {'tokens':>6} "
      f"{'generate / bench':>16} {'peak GiB':>8}")
for keep in ["true", "false"]:
    rows = [json.loads(l) for l in open(f"{out}/metrics-keep-{keep}.jsonl")]
    generate = []
    for r in rows:
        t = r["train"]
        tokens = t["generated_tokens_per_s"] * t["time/rollout"]
        if r["step"] >= 2:
            generate.append(t["time/generate"])
        print(f"{'kept' if keep == 'true' else 'new':<6} {r['step']:>4} {t['time/generate']:>10.3f} "
              f"{t['time/rollout']:>9.3f} {t.get('rollout/decode_sessions', float('nan')):>8.0f} "
              f"{tokens:>6.0f} {t['time/generate'] / bench['seconds']:>16.3f} "
              f"{t.get('peak_memory_bytes', 0) / 2**30:>8.2f}")
    mean = sum(generate) / len(generate)
    print(f"{'kept' if keep == 'true' else 'new':<6} steps 2-5: mean generate {mean:.3f} s, "
          f"{mean / bench['seconds']:.3f} x bench rollout (goal: at most 1.10 with the kept engine)")
PY
