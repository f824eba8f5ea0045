#!/usr/bin/env bash
# Whether the shared-prompt test can fail: its test binary built with prompt_attention.cu's zeroing of
# the value rows past a split's last column commented out (.device/tensor-tests-mutation.tar.xz; made
# with `cargo test --release --features cuda -p groundrl-tensor --lib --no-run` after that one-line
# change, which no commit holds). $OUT gets tests.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-prompt-attention-mutation
rm -rf "$work"
mkdir -p "$out" "$work"
tar xJf .device/tensor-tests-mutation.tar.xz -C "$work" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/groundrl-tensor-tests" decode_attention_reads_shared_prompts --test-threads 1) > "$out/tests.txt" 2>&1
echo "rc=$?" >> "$out/tests.txt"
grep -E "^test |test result|^rc=|panicked|column" "$out/tests.txt"
