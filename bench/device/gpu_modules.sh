# Issue 22, Deliver 6 on a lent GPU machine: bench_gpu.py on the models a PyTorch user has
# (bench/torch_modules.py: torchvision's resnet50 and inception_v3, BERT and GPT blocks as
# nn.Modules), our executor on their ONNX exports against PyTorch eager, the whole step as a
# CUDA graph and torch.compile(mode="max-autotune"). The dry run first (export, import, plan;
# nothing measured), then the runs. torchvision must be in the image or among the wheels.
# Usage: bash bench/device/gpu_modules.sh [modules]   (torch.compile max-autotune compiles
# for minutes on the vision models: one module per call; BENCH_ARGS=--no-compile skips it)
. bench/device/setup.sh || exit 1
modules=${1:-tv_resnet50,tv_inception_v3,bert_block,gpt_block}
python bench/bench_gpu.py --modules "$modules" --dry-run --target gpu 2>&1 \
  | tee "$OUT/gpu_modules_dry_run.txt"
python bench/bench_gpu.py --modules "$modules" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/gpu_modules.txt"
