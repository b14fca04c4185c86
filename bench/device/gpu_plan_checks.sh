# The GPU checks of issue 22's executor and architecture work, for a lent GPU machine:
# what `planner target detect` reads (compute capability included), the executor's fixes and
# the planned-layout / two-stream / CUDA-graph value tests, then the whole CUDA suite and the
# bench. Logs under $OUT.
# Usage: bash bench/device/gpu_plan_checks.sh [bench models | none]
. bench/device/setup.sh || exit 1
models=${1:-inception_v3,resnet50,lstm,wide_deep}
python -m planner.cli target detect 2>&1 | tee "$OUT/target_detect.txt"
python -m pytest -q -p no:cacheprovider -o addopts="-ra" \
  tests/codegen/test_cuda_arch.py tests/codegen/test_cuda_sources.py \
  tests/cuda/test_cuda_executor.py 2>&1 | tee "$OUT/gpu_plan_checks.log" | tail -40
python -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/cuda 2>&1 \
  | tee "$OUT/gpu_tests.log" | tail -40
if [ "$models" != "none" ]; then
  # Co-running streams: the predicted one- vs several-stream steps for this GPU, then the
  # measured ones (bench_gpu.py's "ours streams" and "1-stream plan" rows).
  python bench/bench_gpu_streams.py --targets gpu 2>&1 | tee "$OUT/bench_gpu_streams.txt"
  python bench/bench_gpu.py --models "$models" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.txt"
fi
