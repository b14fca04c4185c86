# The CUDA executor on the GPU: its tests, then the bench against PyTorch.
# Usage: bash bench/device/gpu_tests.sh [pytest selection] [bench models]
. bench/device/setup.sh
sel=${1:-tests/cuda}
models=${2:-inception_v3,resnet50,lstm,wide_deep}
python -m pytest -q -p no:cacheprovider -o addopts="-ra" "$sel" 2>&1 | tee "$OUT/gpu_tests.log" | tail -60
if [ "$models" != "none" ]; then
  python bench/bench_gpu.py --models "$models" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.txt"
fi
