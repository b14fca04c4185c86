# The CUDA executor on the GPU: its tests (mixed precision's included: tests/cuda/
# test_cuda_mixed.py), then the bench against PyTorch in float32 and in bf16-mixed (PyTorch
# under torch.autocast bfloat16).
# Usage: bash bench/device/gpu_tests.sh [pytest selection] [bench models] [bf16-mixed models]
#   (a models argument of "none" skips that bench)
. bench/device/setup.sh || exit 1
sel=${1:-tests/cuda}
models=${2:-inception_v3,resnet50,lstm,wide_deep}
mixed=${3:-resnet50,inception_v3,lstm,bert}
python -m pytest -q -p no:cacheprovider -o addopts="-ra" "$sel" 2>&1 | tee "$OUT/gpu_tests.log" | tail -60
if [ "$models" != "none" ]; then
  python bench/bench_gpu.py --models "$models" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.txt"
fi
if [ "$mixed" != "none" ]; then
  python bench/bench_gpu.py --models "$mixed" --precision bf16-mixed ${BENCH_ARGS:-} 2>&1 \
    | tee "$OUT/bench_gpu_bf16.txt"
fi
