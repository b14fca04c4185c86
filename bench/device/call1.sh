# GPU call 1 of 2 (bench/device/README.md): correctness, memory, and the built runtime to carry
# into call 2. Stages, each under its own timeout so that a late failure keeps what came before:
#   env       setup (wheels, imports), GPU, driver, library versions, `planner target detect`
#   checks    bench/device/window_checks.py: budget plans (offload/prefetch, recompute) against
#             unbudgeted ones, streams against one stream, CUDA graph on streams and on one,
#             bf16/fp16 against fp32, device memory at load and after a step against the arena
#             (builds the CUDA runtime first: ~85 s on 16 cores)
#   rt.tgz    the built runtime, packed for call 2 (put it at .rt/rt.tgz and carry .rt)
#   tests     every CUDA test that needs a GPU but the data-parallel ones (call 2), -v so that
#             each finished test's line survives a timeout
# Back in $OUT (6 files): env.txt window_checks.txt window_checks.json rt.tgz gpu_tests.log junit.xml
# Usage: bash bench/device/call1.sh [--dry-run]   (--dry-run: no GPU; plans, builds, collects)
if [ "${1:-}" = --dry-run ]; then export DRY=1; OUT=${OUT:-$(mktemp -d)}; fi
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{ . bench/device/setup.sh; } >"$OUT/env.txt" 2>&1
ok=$?
cat "$OUT/env.txt"
[ $ok = 0 ] || exit 1
W=${DRY:+--dry-run}
if [ -n "${DRY:-}" ]; then tgt="show h100-80gb"; else tgt=detect; fi
timeout 30 "$PY" -m planner.cli target $tgt >>"$OUT/env.txt" 2>&1
"$PY" -m pip list 2>/dev/null | grep -iE "^(torch|nvidia-cudnn-cu13|nvidia-cublas|nanobind|numpy|pydantic|pydantic_core|typing_extensions) " >>"$OUT/env.txt"
echo "== checks at ${SECONDS}s"
timeout 300 "$PY" bench/device/window_checks.py $W --out "$OUT/window_checks.json" \
  >"$OUT/window_checks.txt" 2>&1
echo "window_checks rc=$? at ${SECONDS}s"
grep -v '^  File\|^    ' "$OUT/window_checks.txt" | tail -60
C=${PLANNER_CACHE:-$HOME/.cache/planner}
(cd "$(dirname "$C")" && tar czf "$OUT/rt.tgz" "$(basename "$C")"/cuda-sm*-runtime-*/module.txt \
  "$(basename "$C")"/cuda-sm*-runtime-*/build/*.so) && ls -l "$OUT/rt.tgz"
echo "== tests at ${SECONDS}s"
T="-p no:cacheprovider -o addopts= -m gpu --junitxml=$OUT/junit.xml tests/cuda --ignore=tests/cuda/test_cuda_data_parallel.py"
if [ -n "${DRY:-}" ]; then
  "$PY" -m pytest --collect-only -q $T >"$OUT/gpu_tests.log" 2>&1
else
  timeout $((570 - SECONDS)) "$PY" -m pytest -v --tb=short --timeout 150 $T >"$OUT/gpu_tests.log" 2>&1
fi
echo "pytest rc=$? at ${SECONDS}s"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -40
tail -3 "$OUT/gpu_tests.log"
