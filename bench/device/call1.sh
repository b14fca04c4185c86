# GPU call 1 of 2 (bench/device/README.md): the window that fits 15 minutes of device time, one
# command of at most 8 minutes, what matters most first. Stages, each under its own timeout and
# all under one deadline (DEADLINE, 470 s), each writing as it goes so a cut keeps what came
# before:
#   env       setup (wheels, imports), GPU, driver, library versions, `planner target detect`
#   tests     the GPU tests of bench/device/features.txt: each executor feature once (streams,
#             CUDA graphs, device arena, bf16/fp16, loss scaling, TF32, evaluate, device feeds,
#             every CUDA kernel); builds the CUDA runtime first (~85 s on 16 cores)
#   checks    bench/device/window_checks.py on the budget (offload/prefetch), lstm streams,
#             bf16 and recompute cases: streams vs one stream, memory against the arena
#   bench     bench_gpu.py on resnet50 and gpt: fp32 against eager and torch.compile, then
#             bf16-mixed against autocast (a JSON line a row in bench.jsonl); then the
#             runtime packed for call 2
# Back in $OUT (8 files): env.txt gpu_tests.log junit.xml window_checks.txt window_checks.json
#   bench.txt bench.jsonl rt.tgz
# Usage: bash bench/device/call1.sh [--dry-run]   (--dry-run: no GPU; plans, builds, collects)
if [ "${1:-}" = --dry-run ]; then export DRY=1; OUT=${OUT:-$(mktemp -d)}; fi
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-470}
failed=""  # a dry run fails when a stage does: prepare.sh stops there
# A dry run on 2 cores plans and builds what 16 cores would in a fraction: no time limits there.
left() { [ -n "${DRY:-}" ] && { echo 1800; return; }; local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$((l > 5 ? l : 5))" || echo "$1"; }
{ timeout 90 bash -c '. bench/device/setup.sh' && . bench/device/setup.sh; } >"$OUT/env.txt" 2>&1
ok=$?
cat "$OUT/env.txt"
[ $ok = 0 ] || exit 1
if [ -n "${DRY:-}" ]; then tgt="show h100-80gb"; else tgt=detect; fi
timeout 30 "$PY" -m planner.cli target $tgt >>"$OUT/env.txt" 2>&1
"$PY" -m pip list 2>/dev/null | grep -iE "^(torch|nvidia-cudnn-cu13|nvidia-cublas|nanobind|numpy|pydantic|pydantic_core|typing_extensions) " >>"$OUT/env.txt"

echo "== tests at ${SECONDS}s"
mapfile -t F < <(grep -vE '^\s*(#|$)' bench/device/features.txt)
T=(-p no:cacheprovider -o addopts= -m gpu --junitxml="$OUT/junit.xml" "${F[@]}")
if [ -n "${DRY:-}" ]; then
  "$PY" -m pytest --collect-only -q "${T[@]}" >"$OUT/gpu_tests.log" 2>&1
else
  timeout "$(left 200)" "$PY" -m pytest -v --tb=short --timeout 120 "${T[@]}" >"$OUT/gpu_tests.log" 2>&1
fi
rc=$?; [ $rc = 0 ] || failed+=" tests"
echo "pytest rc=$rc at ${SECONDS}s"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -30
tail -3 "$OUT/gpu_tests.log"

echo "== checks at ${SECONDS}s"
W=${DRY:+--dry-run}
timeout "$(left 110)" "$PY" bench/device/window_checks.py $W --out "$OUT/window_checks.json" \
  --cases r18_budget,lstm,r18_bf16,r18_recompute >"$OUT/window_checks.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" checks"
echo "window_checks rc=$rc at ${SECONDS}s"
grep -v '^  File\|^    ' "$OUT/window_checks.txt" | tail -40

echo "== bench at ${SECONDS}s" | tee "$OUT/bench.txt"
if [ -n "${DRY:-}" ]; then B="--dry-run"; R=(); else B="--steps 10 --rounds 3"; R=(--out "$OUT/bench.jsonl"); fi
timeout "$(left 90)" "$PY" bench/bench_gpu.py --models resnet50,gpt $B "${R[@]}" 2>&1 | tee -a "$OUT/bench.txt" \
  | grep -v "one stream, per op type"
rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" fp32"
echo "fp32 rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
timeout "$(left 60)" "$PY" bench/bench_gpu.py --models resnet50,gpt --precision bf16-mixed --no-compile \
  $B "${R[@]}" 2>&1 | tee -a "$OUT/bench.txt" | grep -v "one stream, per op type"
rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" bf16"
echo "bf16 rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
C=${PLANNER_CACHE:-$HOME/.cache/planner}
[ -z "${DRY:-}" ] && (cd "$(dirname "$C")" && tar czf "$OUT/rt.tgz" "$(basename "$C")"/cuda-sm*-runtime-*/module.json \
  "$(basename "$C")"/cuda-sm*-runtime-*/build/*.so) && ls -l "$OUT/rt.tgz"
echo "call 1 done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "${DRY:-}" ] || [ -z "$failed" ]
