#!/usr/bin/env bash
# run1.sh without its CUDA tests (run1's tensor-crate tests failed: two tests capturing graphs at once
# in one process, one capture broken by the other thread's synchronizing copy), after the rollout
# tests of runs alone in one thread. $OUT gets engine-tests.txt and what run1.sh writes but tests.tgz.
set -o pipefail
source scripts/gpu/env.sh
mkdir -p /tmp/tt && tar xJf .device/tests-runs.tar.xz -C /tmp/tt
(cd crates/groundrl-tensor && timeout 120 /tmp/tt/groundrl-tensor-tests rollout:: --test-threads 1 2>&1 | tail -5) \
  | tee "$OUT/engine-tests.txt"
sed '/^mkdir -p "$work\/tests-out/d; /^cuda_tests/d; /tests.tgz/d; /^grep -q "^rc=0"/d' \
  measurements/2026-12-03-sampler-split-h200/run1.sh > /tmp/r.sh
bash /tmp/r.sh
