# The third H200 window (bench/device/README.md): what the second left open, in one command
# under one deadline (DEADLINE, 520 s); each stage under its own timeout, writing as it goes:
#   env       setup (wheels, imports), GPU, driver
#   checks    window_checks.py: the fp32 and bf16-mixed budget plans, whose layout now reserves
#             each convolution's least workspace (never run on a GPU before), and recompute
#   bench     bench_gpu.py gpt in fp32 and bf16-mixed (the step returning the loss alone: GPT
#             did not run in the last window), resnet50 bf16-mixed
#   profile   bench_gpu_profile.py resnet50 bf16-mixed with the time left: the measured
#             algorithms for the low-type convolutions (the forward's FWD_IMPLICIT_GEMM was
#             17.3 of 49.4 ms); the table is checkpointed
# Back in $OUT: env.txt window_checks.txt window_checks.json bench.txt gpu_profile.txt
#   resnet50-bf16-mixed.gpu.costs.json
# Usage: [CASES=a,b] [RUNS="model:precision ..."] [PROFILE=0] bash bench/device/call_next.sh [--dry-run]
#   (the second call of the window: CASES=r18_bf16,r18_bf16_budget,r18_fp16
#    RUNS="resnet50:bf16-mixed" PROFILE=0, the low-type workspace model checked)
DEADLINE=${DEADLINE:-520}
. bench/device/window.sh "$@" || exit 1

echo "== checks at ${SECONDS}s"
W=${DRY:+--dry-run}
timeout "$(left 200)" "$PY" bench/device/window_checks.py $W --out "$OUT/window_checks.json" \
  --cases "${CASES:-r18_budget,r18_bf16_budget,r18_recompute}" >"$OUT/window_checks.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" checks"
echo "window_checks rc=$rc at ${SECONDS}s"; grep -v '^  File\|^    ' "$OUT/window_checks.txt" | tail -24

echo "== bench at ${SECONDS}s" | tee "$OUT/bench.txt"
if [ -n "${DRY:-}" ]; then B="--dry-run"; else B="--steps 5 --rounds 3"; fi
for run in ${RUNS:-gpt:fp32 gpt:bf16-mixed}; do
  set -- ${run/:/ }
  timeout "$(left 60)" "$PY" bench/bench_gpu.py --models "$1" --precision "$2" --no-compile $B \
    2>&1 | tee -a "$OUT/bench.txt" | grep -v "one stream, per op type"
  rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" $1-$2"
  echo "$1 $2 rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
done

[ "${PROFILE:-1}" = 0 ] && { echo "call done at ${SECONDS}s${failed:+; failed:$failed}"; [ -z "$failed" ]; exit; }
echo "== profile at ${SECONDS}s"
if [ -n "${DRY:-}" ]; then P="--dry-run"; else P="--steps 5 --rounds 3"; fi
timeout "$(left 600)" "$PY" bench/bench_gpu_profile.py --models resnet50 --precision bf16-mixed \
  --costs-dir "$OUT" $P >"$OUT/gpu_profile.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" profile"
echo "profile rc=$rc at ${SECONDS}s"; grep -v "^  \[" "$OUT/gpu_profile.txt" | tail -20
echo "call done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "${DRY:-}" ] || [ -z "$failed" ]
