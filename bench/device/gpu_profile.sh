# Issue 22, Deliver 2 on a lent GPU machine: `planner profile --target gpu` on resnet-50
# (batch 64) and inception_v3 (batch 16), each trained step planned with the analytical model
# and with that table, both built and run: predicted against measured step
# (bench/bench_gpu_profile.py). The tables stay under $OUT (resumed by a second call if the
# first ran out of time), with the GPU profiling tests' log.
# Usage: bash bench/device/gpu_profile.sh [models]
. bench/device/setup.sh
models=${1:-resnet50,inception_v3}
python -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/cuda/test_gpu_profile.py 2>&1 \
  | tee "$OUT/gpu_profile_tests.log" | tail -20
python bench/bench_gpu_profile.py --models "$models" --costs-dir "$OUT" ${BENCH_ARGS:-} 2>&1 \
  | tee "$OUT/gpu_profile.txt"
