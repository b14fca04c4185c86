#!/bin/sh
# Compile-only check of CUDA runtime sources on a machine with nvcc and the cuda extra
# (cuDNN / cuBLAS / cuFFT / cuSOLVER headers from their wheels): templates/cuda/runtime/check.sh FILE.cu ...
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
nv=$($py -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__path__[0]))")
# cuFFT's and cuSOLVER's headers: the nvidia/cu13 folders holding them (their wheels may sit
# apart from cuBLAS's)
inc() { $py -c "import nvidia.cu13, os; print(next((p for p in nvidia.cu13.__path__ if os.path.exists(os.path.join(p, 'include', '$1'))), '$nv/cu13'))"; }
fft=$(inc cufft.h)
solver=$(inc cusolverDn.h)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
for f in "$@"; do
  $nvcc -std=c++17 -arch=sm_90 -O2 -Xcompiler -Wall -I"$here" -I"$here/../../common" \
    -I"$nv/cudnn/include" -I"$nv/cu13/include" -I"$fft/include" \
    -I"$solver/include" -c "$f" -o /dev/null
done
