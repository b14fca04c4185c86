#!/bin/sh
# Compile-only check of CUDA runtime sources on a machine with nvcc and the cuda extra
# (cuDNN / cuBLAS / cuFFT headers from their wheels): templates/cuda/runtime/check.sh FILE.cu ...
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
nv=$($py -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__path__[0]))")
# cuFFT's headers: the nvidia/cu13 folder holding cufft.h (the wheel may sit apart from cuBLAS's)
fft=$($py -c "import nvidia.cu13, os; print(next((p for p in nvidia.cu13.__path__ if os.path.exists(os.path.join(p, 'include', 'cufft.h'))), '$nv/cu13'))")
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
for f in "$@"; do
  $nvcc -std=c++17 -arch=sm_90 -O2 -Xcompiler -Wall -I"$here" -I"$here/../../common" \
    -I"$nv/cudnn/include" -I"$nv/cu13/include" -I"$fft/include" -c "$f" -o /dev/null
done
