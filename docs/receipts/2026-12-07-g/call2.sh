#!/usr/bin/env bash
# Call 2 on the lent card: the tree with form 17 the default and q4h's value weights in 14 bits, which the gate has not
# yet measured on a card. Runs the ops stage (which builds; the diff table, byte for byte with the oracle), then the
# engine's gate on the recall fixture at every depth (fp8 and q4h against bf16, with the recall rows), then the gate
# on the trained fixture at the suite's default depths (1K, 8K, 32K). First, bf16's attention alone in each shape it
# can take at 1K to 32K (Auto gives bf16 six query heads a block, eight blocks a layer at 1K), and a bf16 token at 1K
# to 8K with Auto's kv-staged against kv-staged-h1 and -h2 where they fit a wave (HKV_ATTN_BF16_SPREAD=1).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-g/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call2-summary.txt"
mkdir -p "$back"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call2 ops
timeout 60 build-gpu/hkv bench --attention-only --kv-cache bf16 --reps 10 \
  --attn-shape auto,kv-staged-h1,kv-staged-h2,kv-staged,unstaged-x8 --depths 1024,4096,8192,32768 \
  > "$back/call2-bench-bf16-shapes.txt" 2>&1
echo "bench --attention-only, bf16, every shape: rc=$?" | tee -a "$s"
grep -E "^\| bf16" "$back/call2-bench-bf16-shapes.txt" | tee -a "$s"
for v in 0 1 0 1; do
  echo "== HKV_ATTN_BF16_SPREAD=$v" >> "$back/call2-bench-bf16.txt"
  HKV_ATTN_BF16_SPREAD=$v timeout 60 build-gpu/hkv bench --depths 1K,4K,8K --kv-cache bf16 --tokens 16 \
    >> "$back/call2-bench-bf16.txt" 2>&1
  echo "bench bf16, HKV_ATTN_BF16_SPREAD=$v: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| bf16" "$back/call2-bench-bf16.txt" | tee -a "$s"
t=$SECONDS
timeout 300 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats fp8,q4h \
  --depths 1K,8K,32K,64K,128K,256K --json "$back/call2-gate-recall.json" > "$back/call2-gate-recall.txt" 2>&1
echo "gate, recall fixture, every depth: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
t=$SECONDS
timeout 120 build-gpu/hkv gate --fixture fixtures/trained-gate.json --backend cuda --no-floor \
  --depths 1024,8192,32768 --json "$back/call2-gate-trained.json" > "$back/call2-gate-trained.txt" 2>&1
echo "gate, trained fixture, 1K/8K/32K: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
cat "$back/call2-summary.txt"
grep -E "^(fp8|q4h|recall|PASS|FAIL)|^\|" "$back/call2-gate-recall.txt" | head -40
grep -E "^(fp8|q4h|PASS|FAIL)" "$back/call2-gate-trained.txt" | head -20
