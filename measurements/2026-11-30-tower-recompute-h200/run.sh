#!/usr/bin/env bash
# One H200: `groundrl bench train` (8 rows x 1,390 tokens, the whole 3B model trained) recomputing
# every block and the tower's alone; three runs of `configs/3b-1gpu.toml` from a folder (steps 2-10)
# and one with the tower trained; `bench rollout` at 8 x 8 and 32 x 8 with medians of 5 runs; the
# foreach shim's CUDA tests.
# Run from the repository root with the `cuda` build at .device/groundrl; raw output under $OUT.
set -uo pipefail
source scripts/gpu/env.sh
bin=.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-tower-recompute
mkdir -p "$out" "$work"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
# The multi-tensor shim's CUDA tests (its error path now shared with the fused kernels').
timeout 60 .device/groundrl-tensor-tests foreach --test-threads=1 > "$out/gpu-tests.txt" 2>&1
tail -1 "$out/gpu-tests.txt"
for c in tower all; do
  timeout 100 "$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --checkpoint "$c" \
    >> "$out/bench_train.jsonl" 2> "$out/bench-train-$c.log"
  echo "bench train --checkpoint $c: exit $?"
done
"$bin" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
"$bin" synth --out "$work/data" --n 600 --seed 0 --difficulty medium --prompt instruct > /dev/null || exit 1
common=(data.train="$work/data/samples.jsonl" 'data.val=""' trainer.test_freq=0 trainer.save_freq=0
        rounds.final_ledger=false model.device=cuda model.dtype=bf16 model.preset=none
        model.path="$work/model" trainer.max_steps=10)
run() {
  local name=$1; shift
  timeout 90 "$bin" train configs/3b-1gpu.toml "${common[@]}" trainer.run_dir="$work/$name" "$@" \
    > "$out/$name.log" 2>&1
  echo "$name: exit $?"
  cp "$work/$name/metrics.jsonl" "$out/$name.metrics.jsonl" 2> /dev/null
}
for i in 1 2 3; do run "folder$i"; done
run tower model.freeze_vision=false
for p in 8 32; do
  timeout 60 "$bin" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts $p --n 8 \
    --bandwidth-gbs 4800 --repeats 5 >> "$out/bench_rollout.jsonl" 2> "$out/bench-rollout-$p.log"
done
python3 - "$out" <<'PY' | tee "$out/table.txt"
import glob, json, os, statistics as st, sys
out = sys.argv[1]
for line in open(f"{out}/bench_train.jsonl"):
    r = json.loads(line)
    print(f"bench train --checkpoint {r['checkpoint']}: {r['ms']:.1f} ms, {r['mfu_model_flops']:.1%} MFU by model FLOPs, {r['device_memory_gib']:.1f} GiB")
for name in ["folder1", "folder2", "folder3", "tower"]:
    path = f"{out}/{name}.metrics.jsonl"
    if not os.path.exists(path):
        print(f"{name}: no metrics"); continue
    rows = [json.loads(l)["train"] for l in open(path)][1:]
    med = lambda k: st.median(r[k] for r in rows)
    peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
    print(f"{name}: steps 2-{len(rows)+1} step {med('time/step'):.3f} s, rollout {med('time/rollout'):.3f}, update {med('time/update'):.3f}, "
          f"{med('mfu_model_flops'):.1%}, peak {peak:.2f} GiB; steps " + " ".join(f"{r['time/step']:.3f}" for r in rows))
for line in open(f"{out}/bench_rollout.jsonl"):
    r = json.loads(line)
    print(f"bench rollout {r['prompts']} x {r['n']}: {r['generated_tokens_per_s']:.0f} tokens/s, decode step {r['decode_step_ms']:.3f} ms, "
          f"{r['roofline_fraction']:.1%} of the roofline, prefill {r['prefill_seconds']:.3f} s, whole {r['seconds']:.3f} s (medians of {r['repeats']})")
PY
