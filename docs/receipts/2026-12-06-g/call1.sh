#!/usr/bin/env bash
# Call 1 on the lent card: this tree built, its op cases (every attention case under each HKV_ATTN_SLIM_K form), then
# q4h's slim kernel at the 27B's layout in its eight HKV_ATTN_SLIM_K forms (docs/TUNING.md): the attention alone at
# 32K and 256K, two rounds in turn; DRAM bytes and time under ncu at 256K; and whole decode tokens, the forms as
# --variants of one process. Then (HKV_CALL1_ENGINE=1) gpu_engine and `hkv diff --op model`.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-g/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run1 ops
cp /tmp/hkv-back/run1-summary.txt "$back/call1-summary.txt"
bin=build-gpu/hkv
forms=${HKV_CALL1_FORMS:-0 1 2 3 4 5 6 7}
{
  for round in 1 2; do
    for k in $forms; do
      HKV_ATTN_SLIM_K=$k $bin bench --attention-only --depths 32K,256K --kv-cache q4h --reps 10 > /tmp/att.log 2>&1
      echo "== HKV_ATTN_SLIM_K=$k round $round (exit $?)"
      grep -E "^\| q4h|copy bandwidth" /tmp/att.log
      cat /tmp/att.log >> /tmp/att-all.log
    done
  done
} 2>&1 | tee "$back/attention-forms.txt"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null | head -1)
if [[ -n $ncu ]]; then
  for k in $forms; do
    HKV_ATTN_SLIM_K=$k timeout 120 "$ncu" --kernel-name regex:attn_slim --launch-skip 32 --launch-count 2 --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum \
      $bin bench --attention-only --depths 256K --kv-cache q4h --reps 3 > "/tmp/ncu-$k.csv" 2>&1
    echo "== ncu HKV_ATTN_SLIM_K=$k (exit $?)"
    grep -E "dram__bytes_read|gpu__time_duration|lts__t_sectors|l1tex__t_sectors" "/tmp/ncu-$k.csv" |
      awk -F'","' '{print $13, $15}' | tr -d '"'
  done 2>&1 | tee "$back/ncu-forms.txt"
fi
variants=$(for k in $forms; do printf 'HKV_ATTN_SLIM_K=%s;' "$k"; done)
$bin bench --depths 32K,128K,256K --kv-cache q4h --variants "${variants%;}" --rounds 2 --tokens 16 > /tmp/tok.log 2>&1
echo "token variants: exit $?" | tee "$back/token-forms.txt"
grep -vE "^\s*$" /tmp/tok.log | tail -40 >> "$back/token-forms.txt"
if [[ ${HKV_CALL1_ENGINE:-0} == 1 ]]; then
  OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run2 engine
  cat /tmp/hkv-back/run2-summary.txt >> "$back/call1-summary.txt"
  t=$SECONDS
  timeout "${HKV_DIFF_LIMIT:-140}" $bin diff --op model > /tmp/diff-model.log 2>&1
  echo "hkv diff --op model: rc=$?, $(tail -1 /tmp/diff-model.log), $((SECONDS - t)) s" | tee -a "$back/call1-summary.txt"
fi
tar czf "$back/call1-logs.tgz" -C /tmp hkv-back att-all.log tok.log diff-model.log $(cd /tmp && ls ncu-*.csv 2> /dev/null) 2> /dev/null
cat "$back/call1-summary.txt"
