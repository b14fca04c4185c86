# bench_cpu_strategies.py on the machine's CPUs (issue 13's many-core run).
# Usage: bash bench/device/cpu_bench.sh [models]
. bench/device/setup.sh || exit 1
python bench/bench_cpu_strategies.py --models "${1:-lstm,dcgan,resnet-50,inception_v3}" ${BENCH_ARGS:-} \
  2>&1 | tee "$OUT/bench_cpu_strategies.txt"
# Issue 24: data-parallel steps of 1, 2 and 4 processes against PyTorch DDP (4 needs 4 cores).
python bench/bench_data_parallel.py --procs 1,2,4 --steps 6 --rounds 3 \
  2>&1 | tee "$OUT/bench_data_parallel.txt"
