#!/usr/bin/env bash
# "base" (d89eb95's build, .device/bins-base.tar.xz) beside "split" (the sampler reading a row with two
# blocks when the batch leaves most SMs idle; the step's index, cache column and positions advanced by
# one kernel; bins-split) and "runs" (split, and runs of up to 8 decoding steps a replayed graph;
# bins-runs, tests-runs). The tensor and training crates' CUDA tests of runs; the sampling kernel
# alone at 32 to 256 rows (base's and split's sampling.cu, ../2026-12-01-sampler-kernel-h200/bench.py); one profiled
# generation of each build (`bench rollout` 8 x 8 of the 3B shape) with the period of a layer and of a
# step and the step's kernels outside the layers; `bench rollout` 8 x 8 with --compare-eager (runs);
# one untimed run, then three rounds of the three in turn; 32 x 8 once each. $OUT gets tests.tgz,
# sampler.txt, periods.txt, outside.txt, eager.txt, rollout.txt and rollout-32.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split
rm -rf "$work"
mkdir -p "$out"
names=(base split runs)
unpack_builds "$work" base:bins-base split:bins-split runs:bins-runs || exit 1
mkdir -p "$work/tests-out/runs"
cuda_tests "$work/tests-out/runs" "$work" tests-runs
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/runs/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
ROWS="32 64 66 67 128 256" python3 .device/sbench/bench.py .device/sbench/libbase.so .device/sbench/libsplit.so \
  | tee "$out/sampler.txt"
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/outside.txt"
  python3 measurements/2026-12-03-attention-ready-h200/step_outside.py "$work/profile-$build/generate.json" >> "$out/outside.txt" 2>&1
done
cat "$out/outside.txt"
timeout 120 "${builds[2]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --compare-eager --repeats 1 > "$out/eager.txt" 2>&1
grep -o '"cuda_graph":[a-z]*\|"decode_step_ms":[0-9.]*\|"same_tokens_as_graph":[a-z]*\|"max_logprob_diff_vs_graph":[0-9.e-]*' "$out/eager.txt"
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_rounds "$out/rollout-32.txt" "$work/model-3b" 1 "--prompts 32 --n 8" "${builds[@]}"
