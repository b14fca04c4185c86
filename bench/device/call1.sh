# GPU call 1 of 2 (issue 88; bench/device/README.md): the GPU against torch.compile, one command
# of at most 8 minutes, what matters most first. Stages, each under its own timeout and all
# under one deadline (DEADLINE, 470 s), each writing as it goes so a cut keeps what came before:
#   env       setup (wheels, imports), GPU, driver, library versions, `planner target detect`
#   tests     the GPU tests of bench/device/features.txt: each executor feature once (streams,
#             CUDA graphs, device arena, bf16/fp16, loss scaling, TF32, evaluate, device feeds,
#             every CUDA kernel); builds the CUDA runtime first (~85 s on 16 cores)
#   profile   ResNet-50's convolution algorithms (cuDNN's find) in fp32 and bf16-mixed into
#             $OUT/costs, resumed from the store bench/device/costs/GPU/ (complete there:
#             seconds; a GPU with no store: what the stage's time allows, checkpointed)
#   fp32      bench_gpu.py resnet50,gpt: ours (the plan's streams, CUDA graph; the profiled
#             algorithms) against eager and torch.compile, its compile time apart (ready_s)
#   bf16      the same in bf16-mixed against autocast and torch.compile under autocast
#   autotune  torch.compile(mode="max-autotune-no-cudagraphs"), PyTorch's rows only, fp32 then
#             bf16-mixed, when AUTOTUNE_MIN seconds (150) are left; else a line says skipped
# Back in $OUT (8 files): env.txt gpu_tests.log junit.xml profile.txt bench.txt bench.jsonl
#   costs/resnet50.gpu.costs.json costs/resnet50-bf16-mixed.gpu.costs.json
# Then: cp FILES_AT/costs/*.json bench/device/costs/GPU/ (GPU: the slug profile.txt names), so
# the next window starts from them.
# Usage: bash bench/device/call1.sh [--dry-run]
#   --dry-run (no GPU, a 2-core machine): tiny models planned for the h100-80gb preset and
#   rendered, the tests collected, the store's tables read, PyTorch's side (eager, each
#   torch.compile mode) made ready on the CPU; MODELS=resnet50 narrows the models.
DEADLINE=${DEADLINE:-470}
. bench/device/window.sh "$@" || exit 1
cat "$OUT/env.txt"
if [ -n "${DRY:-}" ]; then tgt="show h100-80gb"; else tgt=detect; fi
timeout 30 "$PY" -m planner.cli target $tgt >>"$OUT/env.txt" 2>&1
"$PY" -m pip list 2>/dev/null | grep -iE "^(torch|triton|nvidia-cudnn-cu1[23]|nvidia-cublas|nvidia-cufft(-cu12)?|nvidia-cusolver(-cu12)?|nanobind|numpy|pydantic) " >>"$OUT/env.txt"
# the libraries the CUDA runtime links (cuFFT, cuSOLVER new): a missing one skips every build
"$PY" -c "from codegen.build import cuda_toolchain as t; print(t())" >>"$OUT/env.txt" 2>&1
M=${MODELS:-resnet50,gpt}
if [ -n "${DRY:-}" ]; then
  gpu=nvidia-h200; D=(--dry-run --tiny); R=()
else
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-')
  D=(--steps 10 --rounds 3); R=(--out "$OUT/bench.jsonl")
fi

echo "== tests at ${SECONDS}s"
mapfile -t F < <(grep -vE '^\s*(#|$)' bench/device/features.txt)
T=(-p no:cacheprovider -o addopts= -m gpu --junitxml="$OUT/junit.xml" "${F[@]}")
if [ -n "${DRY:-}" ]; then
  "$PY" -m pytest --collect-only -q "${T[@]}" >"$OUT/gpu_tests.log" 2>&1
else
  timeout "$(left 150)" "$PY" -m pytest -v --tb=short --timeout 120 "${T[@]}" >"$OUT/gpu_tests.log" 2>&1
fi
rc=$?; [ $rc = 0 ] || failed+=" tests"
echo "pytest rc=$rc at ${SECONDS}s"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -30
tail -3 "$OUT/gpu_tests.log"

echo "== profile at ${SECONDS}s: store bench/device/costs/$gpu" | tee "$OUT/profile.txt"
mkdir -p "$OUT/costs"
cp bench/device/costs/"$gpu"/*.gpu.costs.json "$OUT/costs/" 2>/dev/null \
  || echo "no store for $gpu: profiled from nothing" | tee -a "$OUT/profile.txt"
for prec in fp32 bf16-mixed; do
  if [ -n "${DRY:-}" ]; then P=(--dry-run --tiny --no-build); else P=(--profile-only); fi
  timeout "$(left 60)" "$PY" bench/bench_gpu_profile.py --models resnet50 --precision $prec \
    --costs-dir "$OUT/costs" "${P[@]}" 2>&1 | grep -v "^  \[" >>"$OUT/profile.txt"
  rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" profile-$prec"
  echo "profile $prec rc=$rc at ${SECONDS}s" | tee -a "$OUT/profile.txt"
done
tail -4 "$OUT/profile.txt"

echo "== bench at ${SECONDS}s" | tee "$OUT/bench.txt"
for prec in fp32 bf16-mixed; do
  timeout "$(left 120)" "$PY" bench/bench_gpu.py --models "$M" --precision $prec \
    --costs-dir "$OUT/costs" "${D[@]}" "${R[@]}" 2>&1 | tee -a "$OUT/bench.txt" \
    | grep -v "one stream, per op type\|^W[0-9]"
  rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" $prec"
  echo "$prec rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
done

echo "== autotune at ${SECONDS}s" | tee -a "$OUT/bench.txt"
for prec in fp32 bf16-mixed; do
  if [ -z "${DRY:-}" ] && [ $((DEADLINE - SECONDS)) -lt "${AUTOTUNE_MIN:-150}" ]; then
    echo "autotune $prec skipped: $((DEADLINE - SECONDS)) s left" | tee -a "$OUT/bench.txt"
    continue
  fi
  timeout "$(left 150)" "$PY" bench/bench_gpu.py --models "$M" --precision $prec --no-ours \
    --compile-modes max-autotune-no-cudagraphs "${D[@]}" "${R[@]}" 2>&1 \
    | tee -a "$OUT/bench.txt" | grep -v "^W[0-9]"
  rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" autotune-$prec"
  echo "autotune $prec rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
done
echo "call 1 done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "$failed" ]
