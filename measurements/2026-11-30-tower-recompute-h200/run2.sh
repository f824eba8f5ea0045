#!/usr/bin/env bash
# The second run (the build where `train` plans for the GPU's memory as nvidia-smi reports it):
# three runs of `configs/3b-1gpu.toml` from a folder (steps 2-10) and one with the tower trained,
# all without --gpu-memory; `bench rollout` at 8 x 8 and 32 x 8 (medians of 5) and `bench train
# --checkpoint tower`, each with libtorch's default BLAS choice and with TORCH_BLAS_PREFER_CUBLASLT=1;
# the foreach shim's CUDA tests. Run from the repository root with the `cuda` build at
# .device/groundrl; $OUT gets table.txt, gpu-tests.txt and raw.tgz (logs, records, JSON rows).
set -uo pipefail
source scripts/gpu/env.sh
bin=$PWD/.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-tower-recompute
mkdir -p "$out" "$work/raw"
raw=$work/raw
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$raw/gpu.txt"
timeout 60 .device/groundrl-tensor-tests foreach --test-threads=1 > "$out/gpu-tests.txt" 2>&1
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
for i in 1 2 3; do run "folder$i"; done
run tower model.freeze_vision=false
for blas in default cublaslt; do
  [ $blas = cublaslt ] && export TORCH_BLAS_PREFER_CUBLASLT=1
  for p in 8 32; do
    timeout 60 "$bin" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts $p --n 8 \
      --bandwidth-gbs 4800 --repeats 5 2> "$raw/bench-rollout-$p-$blas.log" | sed "s/^{/{\"blas\":\"$blas\",/" >> "$raw/bench_rollout.jsonl"
  done
  timeout 100 "$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --checkpoint tower \
    2> "$raw/bench-train-$blas.log" | sed "s/^{/{\"blas\":\"$blas\",/" >> "$raw/bench_train.jsonl"
done
unset TORCH_BLAS_PREFER_CUBLASLT
python3 - "$raw" <<'PY' > "$out/table.txt"
import json, os, re, statistics as st, sys
raw = sys.argv[1]
print(open(f"{raw}/gpu.txt").read().strip())
print(open(f"{raw}/exits.txt").read().strip())
for name in ["folder1", "folder2", "folder3", "tower"]:
    log = open(f"{raw}/{name}.log").read()
    said = "; ".join(l for l in log.splitlines() if "planning for" in l or "gradient_checkpointing" in l)
    path = f"{raw}/{name}.metrics.jsonl"
    if not os.path.exists(path):
        print(f"{name}: no metrics ({said})"); continue
    rows = [json.loads(l)["train"] for l in open(path)][1:]
    med = lambda k: st.median(r[k] for r in rows)
    peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
    print(f"{name}: steps 2-{len(rows)+1} step {med('time/step'):.3f} s, rollout {med('time/rollout'):.3f}, update {med('time/update'):.3f}, "
          f"{med('mfu_model_flops'):.1%}, peak {peak:.2f} GiB; steps " + " ".join(f"{r['time/step']:.3f}" for r in rows) + f" ({said})")
for line in open(f"{raw}/bench_rollout.jsonl"):
    r = json.loads(line)
    print(f"bench rollout {r['prompts']} x {r['n']} ({r['blas']}): {r['generated_tokens_per_s']:.0f} tokens/s, decode step {r['decode_step_ms']:.3f} ms, "
          f"{r['roofline_fraction']:.1%} of the roofline, prefill {r['prefill_seconds']:.3f} s, whole {r['seconds']:.3f} s (medians of {r['repeats']})")
for line in open(f"{raw}/bench_train.jsonl"):
    r = json.loads(line)
    print(f"bench train --checkpoint {r['checkpoint']} ({r['blas']}): {r['ms']:.1f} ms, {r['mfu_model_flops']:.1%} MFU by model FLOPs, {r['device_memory_gib']:.1f} GiB")
PY
cat "$out/table.txt"
tail -3 "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
