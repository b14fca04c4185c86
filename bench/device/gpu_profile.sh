# Issue 22, Deliver 2 on a lent GPU machine: `planner profile --target gpu` on resnet-50
# (batch 64) and inception_v3 (batch 16), each trained step planned with the analytical model
# and with that table, both built and run: predicted against measured step
# (bench/bench_gpu_profile.py). The tables are written under $OUT (they come back with the
# logs); a call that ran out of time resumes from tables put back in the working tree:
#   COSTS_IN=bench/device/costs bash bench/device/gpu_profile.sh resnet50
# Usage: bash bench/device/gpu_profile.sh [models] (one model per call fits 10 minutes best)
. bench/device/setup.sh || exit 1
models=${1:-resnet50,inception_v3}
if [ -n "${COSTS_IN:-}" ] && [ -d "$COSTS_IN" ]; then cp "$COSTS_IN"/*.gpu.costs.json "$OUT"/; fi
if [ -z "${SKIP_TESTS:-}" ]; then
  python -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/cuda/test_gpu_profile.py 2>&1 \
    | tee "$OUT/gpu_profile_tests.log" | tail -20
fi
python bench/bench_gpu_profile.py --models "$models" --costs-dir "$OUT" ${BENCH_ARGS:-} 2>&1 \
  | tee "$OUT/gpu_profile.txt"
