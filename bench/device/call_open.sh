# A follow-up GPU call (bench/device/README.md): what the last window left open, most decisive
# first, in one command under one deadline (DEADLINE, 500 s); each stage under its own timeout
# and writing as it goes:
#   env       setup (wheels, imports), GPU, driver
#   kernels   tests/cuda/test_cuda_kernels.py: every CUDA kernel against its reference (the
#             changed Resize/ResizeGrad among them); builds the CUDA runtime first (~85 s)
#   drift     bench/device/op_drift.py: the bf16-mixed ResNet step one op at a time (a kernel
#             outside its bound, or a correct kernel's rounding flip amplified)
#   checks    window_checks.py on the budget and recompute cases, with the unbudgeted plan run
#             on the budget plan's convolution algorithms too (`vs unbudgeted, same algos`)
#   bench     bench_gpu.py resnet50,gpt fp32 and bf16-mixed, the step returning the loss alone
#   profile   bench_gpu_profile.py resnet50 with the time left (the table is checkpointed)
# Back in $OUT (8 files): env.txt kernels.log drift.txt drift.json window_checks.txt bench.txt
#   gpu_profile.txt resnet50.gpu.costs.json
# Usage: bash bench/device/call_open.sh [--dry-run]
DEADLINE=${DEADLINE:-500}
. bench/device/window.sh "$@" || exit 1

echo "== kernels at ${SECONDS}s"
K=(-p no:cacheprovider -o addopts= -m gpu tests/cuda/test_cuda_kernels.py)
if [ -n "${DRY:-}" ]; then "$PY" -m pytest --collect-only -q "${K[@]}" >"$OUT/kernels.log" 2>&1
else timeout "$(left 200)" "$PY" -m pytest -q -rf --tb=line --timeout 180 "${K[@]}" >"$OUT/kernels.log" 2>&1; fi
rc=$?; [ $rc = 0 ] || failed+=" kernels"
echo "kernels rc=$rc at ${SECONDS}s"; grep -E "^(FAILED|ERROR)" "$OUT/kernels.log" | head -20; tail -2 "$OUT/kernels.log"

echo "== drift at ${SECONDS}s"
if [ -z "${DRY:-}" ]; then
  timeout "$(left 90)" "$PY" bench/device/op_drift.py --backend cuda --out "$OUT/drift.json" >"$OUT/drift.txt" 2>&1
  rc=$?; [ $rc = 0 ] || failed+=" drift"
  echo "drift rc=$rc at ${SECONDS}s"; tail -40 "$OUT/drift.txt"
fi

echo "== checks at ${SECONDS}s"
W=${DRY:+--dry-run}
timeout "$(left 120)" "$PY" bench/device/window_checks.py $W --out "$OUT/window_checks.json" \
  --cases r18_budget,r18_recompute >"$OUT/window_checks.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" checks"
echo "window_checks rc=$rc at ${SECONDS}s"; grep -v '^  File\|^    ' "$OUT/window_checks.txt" | tail -20

echo "== bench at ${SECONDS}s" | tee "$OUT/bench.txt"
if [ -n "${DRY:-}" ]; then B="--dry-run"; else B="--steps 5 --rounds 3"; fi
for prec in fp32 bf16-mixed; do
  timeout "$(left 60)" "$PY" bench/bench_gpu.py --models resnet50,gpt --precision $prec --no-compile $B \
    2>&1 | tee -a "$OUT/bench.txt" | grep -v "one stream, per op type"
  rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" $prec"
  echo "$prec rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
done

echo "== profile at ${SECONDS}s"
if [ -n "${DRY:-}" ]; then P="--dry-run"; else P="--steps 5 --rounds 3"; fi
timeout "$(left 600)" "$PY" bench/bench_gpu_profile.py --models resnet50 --costs-dir "$OUT" \
  $P >"$OUT/gpu_profile.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" profile"
echo "profile rc=$rc at ${SECONDS}s"; grep -v "^  \[" "$OUT/gpu_profile.txt" | tail -20
echo "call done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "${DRY:-}" ] || [ -z "$failed" ]
