# GPU call (issue 83; bench/device/README.md): the PyTorch door on the GPU, first run there.
# One command, most important first, every stage under its own timeout and one DEADLINE (540 s):
#   env       setup (wheels, imports), GPU, driver, `planner target detect`
#   trainer   tests/cuda/test_cuda_trainer.py: planner.torch.trainer(target="gpu") on a ResNet
#             and a transformer against PyTorch's float32/float64 runs (builds the CUDA runtime
#             first, ~85 s on 16 cores)
#   first     bench/bench_first_step.py --device cuda: the CNN script and the dynamic-padding
#             fine-tune, eager / Inductor / the trainer on the GPU, from process start (first
#             step, total, steady step, packages built), then the CNN script twice more in
#             fresh processes (the planner cache is the trainer test's: the CUDA runtime built)
#   features  the GPU tests of bench/device/features.txt with the time left (regressions since
#             the last window)
# Back in $OUT: env.txt trainer.log first_step.txt features.log
# Usage: bash bench/device/call_doors.sh [--dry-run]  (--dry-run: collects the tests, runs the
#   first-step bench's quick CNN script on this machine's CPU for eager and the trainer)
DEADLINE=${DEADLINE:-540}
. bench/device/window.sh "$@" || exit 1
cat "$OUT/env.txt"
if [ -n "${DRY:-}" ]; then tgt="show h100-80gb"; dev=cpu; Q=(--quick --text-steps 4); else tgt=detect; dev=cuda; Q=(--text-steps 200); fi
timeout 30 "$PY" -m planner.cli target $tgt >>"$OUT/env.txt" 2>&1
T=(-p no:cacheprovider -o addopts= -m gpu)

echo "== trainer at ${SECONDS}s" | tee "$OUT/trainer.log"
if [ -n "${DRY:-}" ]; then
  "$PY" -m pytest --collect-only -q "${T[@]}" tests/cuda/test_cuda_trainer.py >>"$OUT/trainer.log" 2>&1
else
  timeout "$(left 240)" "$PY" -m pytest -v --tb=short --timeout 200 "${T[@]}" \
    tests/cuda/test_cuda_trainer.py >>"$OUT/trainer.log" 2>&1
fi
rc=$?; [ $rc = 0 ] || failed+=" trainer"
echo "trainer rc=$rc at ${SECONDS}s" | tee -a "$OUT/trainer.log"
grep -E "^(FAILED|ERROR)|^E " "$OUT/trainer.log" | head -20

echo "== first step at ${SECONDS}s" | tee "$OUT/first_step.txt"
timeout "$(left 270)" "$PY" bench/bench_first_step.py --device $dev --engines eager,inductor,trainer \
  --workloads cnn,text --restarts 3 ${PLANNER_CACHE:+--cache "$PLANNER_CACHE"} "${Q[@]}" \
  >>"$OUT/first_step.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" first-step"
echo "first step rc=$rc at ${SECONDS}s" | tee -a "$OUT/first_step.txt"
grep -E "^\||^cnn|^text|error" "$OUT/first_step.txt" | head -40

echo "== features at ${SECONDS}s" | tee "$OUT/features.log"
mapfile -t F < <(grep -vE '^\s*(#|$)' bench/device/features.txt)
if [ -n "${DRY:-}" ]; then
  "$PY" -m pytest --collect-only -q "${T[@]}" "${F[@]}" >>"$OUT/features.log" 2>&1
elif [ $((DEADLINE - SECONDS)) -lt 40 ]; then
  echo "features skipped: $((DEADLINE - SECONDS)) s left" | tee -a "$OUT/features.log"
else
  timeout "$(left 200)" "$PY" -m pytest -v --tb=short --timeout 120 "${T[@]}" "${F[@]}" \
    >>"$OUT/features.log" 2>&1
fi
rc=$?; [ $rc = 0 ] || failed+=" features"
echo "features rc=$rc at ${SECONDS}s" | tee -a "$OUT/features.log"
grep -E "^(FAILED|ERROR)" "$OUT/features.log" | head -20
tail -2 "$OUT/features.log"
echo "call done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "$failed" ]
