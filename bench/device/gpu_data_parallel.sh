# Data-parallel training on the CUDA executor (issue 24): the GPU plan's all-reduces, and with
# --shard-optimizer (ZeRO-1) its reduce-scatters and sharded updates, through
# torch.distributed on the executor's comm stream, ranks against PyTorch on the global batch
# (the reference the gloo CPU tests match): test_two_ranks_match_one_process_on_the_global_batch
# and test_sharded_optimizer_ranks_match_one_process_on_the_global_batch. NCCL with 2 ranks on 2 GPUs; on a machine of one
# GPU, NCCL refuses two ranks on one device, and the 2 ranks share it over gloo's CUDA path.
# Usage: bash bench/device/gpu_data_parallel.sh
. bench/device/setup.sh || exit 1
nvidia-smi -L 2>&1 | tee "$OUT/gpu_data_parallel.log"
python -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/cuda/test_cuda_data_parallel.py \
  2>&1 | tee -a "$OUT/gpu_data_parallel.log" | tail -40
