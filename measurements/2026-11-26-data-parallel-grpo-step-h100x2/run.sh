#!/usr/bin/env bash
# Data-parallel GRPO of the 3B shape (random weights, configs/3b-1gpu.toml) on one H100 and on two
# (`--nproc-per-node 2`, NCCL), the same batch per GPU: 8 prompts x 8 samples, 128 new tokens.
set -u
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root"
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$root/.device/groundrl
W=/tmp/dp; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=index,name --format=csv,noheader; nproc
"$bin" synth --out $W/data --n 60 --seed 0 --difficulty medium --prompt instruct > /dev/null
o=(data.train=$W/data/samples.jsonl 'data.val=""' trainer.save_freq=0 trainer.test_freq=0 trainer.max_steps=6
   distributed.checksum_every=3)
s=$(date +%s); timeout 250 "$bin" train configs/3b-1gpu.toml "${o[@]}" trainer.run_dir=$W/one > $W/one.log 2>&1
echo "one GPU: exit $? in $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 300 "$bin" train configs/3b-1gpu.toml "${o[@]}" trainer.run_dir=$W/two rollout.prompts_per_step=16 \
  trainer.mini_batch_size=128 --nproc-per-node 2 > $W/two.log 2>&1
echo "two GPUs: exit $? in $(( $(date +%s) - s )) s"
tail -4 $W/one.log; tail -8 $W/two.log
python3 - $W <<'PY'
import json, sys, statistics as st
w = sys.argv[1]
res = {}
for name, gpus in (("one", 1), ("two", 2)):
    try:
        rows = [json.loads(l) for l in open(f"{w}/{name}/metrics.jsonl")]
    except OSError as e:
        print(name, "no metrics:", e); continue
    for r in rows:
        t = r["train"]
        print(json.dumps({"run": name, "step": r["step"], "completions": r["rollout"]["completions"],
              "step_s": round(t["time/step"], 3), "rollout_s": round(t["time/rollout"], 3),
              "update_s": round(t["time/update"], 3), "peak_gib": round(t.get("peak_memory_bytes", 0) / 2**30, 2)}))
    later = rows[1:]
    res[name] = (gpus, st.median([r["rollout"]["completions"] / r["train"]["time/step"] for r in later]))
if len(res) == 2:
    (g1, t1), (g2, t2) = res["one"], res["two"]
    print(f"completions/s, median of steps 2-6: one GPU {t1:.2f}, two GPUs {t2:.2f}; scaling efficiency {t2 / (2 * t1):.1%}")
PY
cd $W && tar czf $OUT/dp2.tgz *.log one/metrics.jsonl two/metrics.jsonl one/config.toml two/config.toml 2>/dev/null
