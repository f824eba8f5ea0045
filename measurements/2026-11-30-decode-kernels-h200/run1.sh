#!/usr/bin/env bash
# The decoding step's kernels (a prompt's columns read once for up to 8 of its rows; the matmuls of
# few rows): the fused kernels' CUDA tests, `bench rollout` at 8 x 8 and 32 x 8 with the matmul
# kernel and with cuBLAS's (medians of 5, the same model), then `configs/3b-1gpu.toml` twice (steps
# 2-10) and once with the tower trained; the kernel table of one profiled 8 x 8 generation (per
# decoding step: 127 after the prefill's token). Run from the repository root with the `cuda` build in
# .device/; $OUT gets table.txt, gpu-tests.txt, kernels-rollout-8x8.txt and raw.tgz (logs, records, JSON rows).
set -uo pipefail
source scripts/gpu/env.sh
bin=$PWD/.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-decode-kernels
mkdir -p "$out" "$work/raw"
raw=$work/raw
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$raw/gpu.txt"
timeout 150 .device/groundrl-tensor-tests fused:: --test-threads=1 > "$out/gpu-tests.txt" 2>&1
"$bin" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
for p in 8 32; do
  for mode in kernel cublas; do
    flag=()
    [ $mode = cublas ] && flag=(--no-skinny-gemm)
    timeout 80 "$bin" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts $p --n 8 \
      --bandwidth-gbs 4800 --repeats 5 "${flag[@]}" 2> "$raw/bench-rollout-$p-$mode.log" \
      | sed "s/^{/{\"mode\":\"$mode\",/" >> "$raw/bench_rollout.jsonl"
  done
done
timeout 80 "$bin" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > "$raw/bench-rollout-profile.jsonl" 2> "$raw/bench-rollout-profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  > "$out/kernels-rollout-8x8.txt" 2>&1
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
run folder1
run tower model.freeze_vision=false
run folder2
python3 - "$raw" <<'PY' > "$out/table.txt"
import json, os, statistics as st, sys
raw = sys.argv[1]
print(open(f"{raw}/gpu.txt").read().strip())
print(open(f"{raw}/exits.txt").read().strip())
for line in open(f"{raw}/bench_rollout.jsonl"):
    r = json.loads(line)
    print(f"bench rollout {r['prompts']} x {r['n']} ({r['mode']}): {r['generated_tokens_per_s']:.0f} tokens/s, "
          f"decode step {r['decode_step_ms']:.3f} ms, {r['roofline_fraction']:.1%} of the roofline "
          f"({r['roofline_step_ms']:.3f} ms), {r['roofline_prompts_once_fraction']:.1%} with prompts read once "
          f"({r['roofline_prompts_once_step_ms']:.3f} ms), prefill {r['prefill_seconds']:.3f} s, whole {r['seconds']:.3f} s "
          f"(medians of {r['repeats']})")
for name in ["folder1", "tower", "folder2"]:
    path = f"{raw}/{name}.metrics.jsonl"
    if not os.path.exists(path):
        print(f"{name}: no metrics"); continue
    rows = [json.loads(l)["train"] for l in open(path)][1:]
    med = lambda k: st.median(r[k] for r in rows)
    peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
    print(f"{name}: steps 2-{len(rows)+1} step {med('time/step'):.3f} s, rollout {med('time/rollout'):.3f}, "
          f"update {med('time/update'):.3f}, {med('mfu_model_flops'):.1%}, peak {peak:.2f} GiB; steps "
          + " ".join(f"{r['time/step']:.3f}" for r in rows))
PY
cat "$out/table.txt"
grep -E "^test |test result" "$out/gpu-tests.txt" | tail -40
tar czf "$out/raw.tgz" -C "$work" raw
