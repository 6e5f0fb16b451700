#!/usr/bin/env bash
# Call 2 on the lent card: this tree built, its op cases (every attention case under HKV_ATTN_Q4H_FORM 0, 1 and 8),
# compute-sanitizer's memcheck and racecheck over the q4h slim-shape cases (HKV_CALL2_SAN=0: not these), then the
# three forms (docs/TUNING.md) timed: the attention alone at 32K, 128K and 256K, two rounds in turn; DRAM bytes, time,
# warps and issue under ncu at 256K; and whole decode tokens, the forms as --variants of one process.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-g/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run3 ops
cp /tmp/hkv-back/run3-summary.txt "$back/call2-summary.txt"
if [[ ${HKV_CALL2_SAN:-1} == 1 ]]; then
  HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS="memcheck:ops racecheck:ops" \
    OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run4 sanitize
  cat /tmp/hkv-back/run4-summary.txt >> "$back/call2-summary.txt"
fi
bin=build-gpu/hkv
forms=${HKV_CALL2_FORMS:-0 1 8}
{
  for round in 1 2; do
    for k in $forms; do
      HKV_ATTN_Q4H_FORM=$k $bin bench --attention-only --depths 32K,128K,256K --kv-cache q4h --reps 10 > /tmp/att.log 2>&1
      echo "== HKV_ATTN_Q4H_FORM=$k round $round (exit $?)"
      grep -E "^\| q4h|copy bandwidth" /tmp/att.log
      cat /tmp/att.log >> /tmp/att-all.log
    done
  done
} 2>&1 | tee "$back/attention-forms2.txt"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null | head -1)
if [[ -n $ncu ]]; then
  for k in $forms; do
    HKV_ATTN_Q4H_FORM=$k timeout 120 "$ncu" --kernel-name regex:'attn_(slim|bulk)' --launch-skip 32 --launch-count 2 --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      $bin bench --attention-only --depths 256K --kv-cache q4h --reps 3 > "/tmp/ncu2-$k.csv" 2>&1
    echo "== ncu HKV_ATTN_Q4H_FORM=$k (exit $?)"
    grep -E '^"[0-9]' "/tmp/ncu2-$k.csv" | awk -F'","' '{print $5, $13, $15}' | tr -d '"' | sed 's/(AttnArgs, int, int, int, float)//'
  done 2>&1 | tee "$back/ncu-forms2.txt"
fi
variants=$(for k in $forms; do printf 'HKV_ATTN_Q4H_FORM=%s;' "$k"; done)
$bin bench --depths 32K,128K,256K --kv-cache q4h --variants "${variants%;}" --rounds 2 --tokens 16 > /tmp/tok2.log 2>&1
echo "token variants: exit $?" | tee "$back/token-forms2.txt"
grep -E "^\| " /tmp/tok2.log | tail -12 >> "$back/token-forms2.txt"
tar czf "$back/call2-logs.tgz" -C /tmp hkv-back att-all.log tok2.log $(cd /tmp && ls ncu2-*.csv 2> /dev/null) 2> /dev/null
cat "$back/call2-summary.txt" "$back/token-forms2.txt"
