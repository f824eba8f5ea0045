#!/usr/bin/env bash
# 10 steps of configs/3b-1gpu.toml at micro-batches given as arguments; median of steps 2-10.
set -uo pipefail
source scripts/gpu/env.sh
bin=.device/groundrl; w=/tmp/w; mkdir -p $w
[ -d $w/model ] || $bin model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out $w/model > /dev/null || exit 1
[ -f $w/data/samples.jsonl ] || $bin synth --out $w/data --n 600 --seed 0 --difficulty medium --prompt instruct > /dev/null
for spec in "$@"; do
  name=$(echo "$spec" | tr ' =.' '_-_')
  read -r -a o <<< "$spec"
  rm -rf $w/$name
  $bin plan configs/3b-1gpu.toml model.preset=none model.path=$w/model "${o[@]}" --gpu-memory 139GiB 2>&1 | grep -iE "^peak|checkpoint" | head -3
  timeout 200 $bin train configs/3b-1gpu.toml data.train=$w/data/samples.jsonl 'data.val=""' trainer.test_freq=0 \
    trainer.save_freq=0 rounds.final_ledger=false model.preset=none model.path=$w/model trainer.max_steps=${STEPS:-10} \
    "${o[@]}" trainer.run_dir=$w/$name --gpu-memory 139GiB > $w/$name.log 2>&1
  echo "$spec: exit $?"; grep -iE "error|panicked|checkpointing" $w/$name.log | head -3
  python3 - $w/$name/metrics.jsonl "$spec" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l)["train"] for l in open(sys.argv[1])][1:]
m = lambda k: st.median(r[k] for r in rows)
print(f"| {sys.argv[2]} | {m('time/step'):.3f} | {m('time/rollout'):.3f} | {m('time/update'):.3f} | {m('mfu_model_flops'):.1%} | {max(r['peak_memory_bytes'] for r in rows)/2**30:.2f} |")
print("  steps: " + " ".join(f"{r['time/step']:.2f}" for r in rows))
PY
done
