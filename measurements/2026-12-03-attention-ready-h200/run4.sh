#!/usr/bin/env bash
# "timed" (19003fd's build, .device/bins-timed.tar.xz: 0a434e0's kernels; `bench rollout` reports the
# decoding step as the engine times its decoding loop, median over the runs, beside the old difference
# of two medians): `bench rollout` 8 x 8 of the 3B shape, one untimed run, then four runs; 32 x 8 once.
# $OUT gets rollout.txt and rollout-32.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-timed
rm -rf "$work"
mkdir -p "$out"
unpack_builds "$work" timed:bins-timed || exit 1
bin="$work/timed/groundrl"
"$bin" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
timeout 90 "$bin" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 4 "" "$bin"
rollout_rounds "$out/rollout-32.txt" "$work/model-3b" 1 "--prompts 32 --n 8" "$bin"
python3 - "$out/rollout.txt" "$out/rollout-32.txt" <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            print(f"batch {r['batch']}: loop-timed step {r['decode_step_ms']:.3f} ms, by difference "
                  f"{r['decode_step_ms_by_difference']:.3f} ms, prefill {r['prefill_seconds']:.3f} s")
PY
