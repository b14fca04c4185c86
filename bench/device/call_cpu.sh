# GPU-window call 2 of 2 (issue 88; bench/device/README.md): the seeds' headline on the device
# host's CPUs (16 cores), from what call 1 leaves (at most 5 minutes). Stages, each under its own
# timeout and one deadline (DEADLINE, 300 s), each model's row written as it finishes:
#   env       setup (wheels, oneDNN's from .whl-cpu), CPUs, load; the host's cost store seeded
#             from bench/device/costs/host/ (a store kept by an earlier window)
#   MODEL     bench_cpu_strategies.py --costs measured on lstm, dcgan, resnet-50, inception_v3,
#             one process each: uniform, every uniform grid (the best named), paper, optimized,
#             against eager and torch.compile on the CPU; predicted against measured per plan
#   fits      the contention and team-scale fits of these cores (kappa, sigma, team scale) per
#             model, beside optimized's predicted and measured step and the best grid: fits.md
# Back in $OUT (5 files): env.txt cpu.txt cpu.jsonl fits.md store.tgz
# Then: put fits.md's table and cpu.txt beside the bench's results (bench/results/), and
# store.tgz's costs/*.json in bench/device/costs/host/ so the next window starts from them.
# Usage: bash bench/device/call_cpu.sh [--dry-run]
#   --dry-run (a 2-core machine): the four models at tiny sizes (--tiny), one round of one
#   step, no time limits, this machine's own store (nothing packed); MODELS=lstm narrows them.
DEADLINE=${DEADLINE:-300}
. bench/device/window.sh "$@" || exit 1
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket)" >>"$OUT/env.txt"
cat "$OUT/env.txt"
if [ -n "${DRY:-}" ]; then
  B=(--tiny --steps 1 --rounds 1)
else
  B=(--steps 3 --rounds 2)
  mkdir -p "$PLANNER_CACHE/costs"
  cp bench/device/costs/host/*.json "$PLANNER_CACHE/costs/" 2>/dev/null \
    && echo "host store seeded: $(ls bench/device/costs/host/*.json | wc -l) file(s)"
fi
: >"$OUT/cpu.jsonl"
models=${MODELS:-lstm,dcgan,resnet-50,inception_v3}
for m in ${models//,/ }; do
  echo "== $m at ${SECONDS}s" | tee -a "$OUT/cpu.txt"
  timeout "$(left 90)" "$PY" bench/bench_cpu_strategies.py --models "$m" --costs measured \
    "${B[@]}" --out "$OUT/cpu.jsonl" 2>&1 | grep -v "^W[0-9]" | tee -a "$OUT/cpu.txt" \
    | grep -v "^measuring costs\|^in-step profile"
  rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" $m"
  echo "$m rc=$rc at ${SECONDS}s" | tee -a "$OUT/cpu.txt"
done
echo "== fits at ${SECONDS}s"
timeout 30 "$PY" bench/bench_cpu_strategies.py --fits-from "$OUT/cpu.jsonl" --fits "$OUT/fits.md" \
  || failed+=" fits"
if [ -z "${DRY:-}" ]; then
  (cd "$PLANNER_CACHE" && tar czf "$OUT/store.tgz" costs) && ls -l "$OUT/store.tgz"
fi
echo "call 2 done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "$failed" ]
