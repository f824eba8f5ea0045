#!/usr/bin/env bash
# The sixth run (the build where the optimizer drops the gradients after a step instead of zeroing
# them): the optimizer's CUDA tests, then `configs/3b-1gpu.toml` from a folder three times and
# with the tower trained once, without --gpu-memory (steps 2-10). Run from the repository root
# with the `cuda` build at .device/groundrl; $OUT gets table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
bin=$PWD/.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-tower-recompute
raw=$work/raw
mkdir -p "$out" "$raw"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$raw/gpu.txt"
"$bin" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
"$bin" synth --out "$work/data" --n 600 --seed 0 --difficulty medium --prompt instruct > /dev/null || exit 1
common=(data.train="$work/data/samples.jsonl" 'data.val=""' trainer.test_freq=0 trainer.save_freq=0
        rounds.final_ledger=false model.device=cuda model.dtype=bf16 model.preset=none
        model.path="$work/model" trainer.max_steps=10)
run() {
  local name=$1; shift
  timeout 90 "$bin" train configs/3b-1gpu.toml "${common[@]}" trainer.run_dir="$work/$name" "$@" \
    > "$raw/$name.log" 2>&1
  echo "$name: exit $?" >> "$raw/exits.txt"
  cp "$work/$name/metrics.jsonl" "$raw/$name.metrics.jsonl" 2> /dev/null
}
timeout 120 .device/groundrl-train-tests adamw --test-threads=1 > "$out/gpu-tests.txt" 2>&1
for i in 1 2 3; do run "folder$i"; done
run tower1 model.freeze_vision=false
python3 - "$raw" <<'PY' > "$out/table.txt"
import json, os, statistics as st, sys
raw = sys.argv[1]
print(open(f"{raw}/gpu.txt").read().strip())
print(open(f"{raw}/exits.txt").read().strip())
for name in ["folder1", "folder2", "folder3", "tower1"]:
    path = f"{raw}/{name}.metrics.jsonl"
    if not os.path.exists(path):
        print(f"{name}: no metrics"); continue
    rows = [json.loads(l)["train"] for l in open(path)][1:]
    med = lambda k: st.median(r[k] for r in rows)
    peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
    print(f"{name}: steps 2-{len(rows)+1} step {med('time/step'):.3f} s, rollout {med('time/rollout'):.3f}, update {med('time/update'):.3f}, "
          f"{med('mfu_model_flops'):.1%}, peak {peak:.2f} GiB; steps " + " ".join(f"{r['time/step']:.3f}" for r in rows))
PY
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
tail -4 "$out/gpu-tests.txt"
