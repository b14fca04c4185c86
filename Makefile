# Two commands on a fresh machine:
#   make demo   set up .venv with what the demo needs (the planner and scikit-learn), then run
#               the main job on the bundled default model and this host: plan LeNet for this
#               machine, build its executor, train it on sklearn's digits
#   make test   add the test suite's packages (PyTorch, the CUDA wheels), then run it
# Each install has its own stamp, so `make demo` never pulls in what only the tests need;
# `make demo DEMO_EXTRAS=demo,cuda` adds the CUDA wheels on request.
VENV ?= .venv
PY := $(VENV)/bin/python
PLANNER := $(VENV)/bin/planner
DEMO_EXTRAS ?= demo

.PHONY: demo test test-all lint bench opinfo opinfo-staged opinfo-complex64

$(VENV)/.created:
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	touch $@

$(VENV)/.installed-demo: pyproject.toml $(VENV)/.created
	$(PY) -m pip install --quiet -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.created
	$(PY) -m pip install --quiet -e '.[dev,cuda]'
	touch $@

demo: $(VENV)/.installed-demo
	$(PLANNER) target detect
	$(PLANNER) graph 'zoo:lenet?image=8&batch=32' --train sgd
	$(PLANNER) plan 'zoo:lenet?image=8&batch=32' --train sgd --target host \
		-o generated/lenet-digits.host.plan.json --force
	$(PLANNER) verify generated/lenet-digits.host.plan.json
	$(PY) examples/train_digits.py --check

# What oneDNN's instruction set changes: the kernels, op by op, and the ONNX conformance
# cases through the executor (the rest of tests/codegen runs the same kernels again). On a CPU
# whose best instruction set is AVX2 already (no AVX-512, AVX-VNNI or AMX) oneDNN dispatches
# the same kernels with or without the cap, so the pass would repeat the first one. The kept
# weight layouts too: they are what the forward primitive asks for, which follows the ISA.
KERNEL_TESTS := tests/codegen/test_op_kernels.py tests/codegen/test_mixed_kernels.py \
	tests/codegen/test_scaled_softmax_kernel.py tests/codegen/test_onnx_conformance.py \
	tests/codegen/test_onnx_node_conformance.py tests/codegen/test_weight_packs.py \
	tests/codegen/test_kernel_dtypes.py tests/codegen/test_filter_grads.py \
	tests/codegen/test_conv_columns.py tests/codegen/test_conv_leaky_fold.py \
	tests/codegen/test_weight_layouts.py

# Two workers, a test file each at a time (module fixtures build once): most tests plan in
# one Python thread, so two cores finish the suite in ~60% of one worker's time.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: $(VENV)/.installed-test
	$(PYTEST)
	@if grep -qwE 'avx512f|avx_vnni|amx_tile' /proc/cpuinfo; then \
		echo "ONEDNN_MAX_CPU_ISA=AVX2 $(PYTEST) $(KERNEL_TESTS)"; \
		ONEDNN_MAX_CPU_ISA=AVX2 $(PYTEST) $(KERNEL_TESTS) -m "not slow"; \
	else echo "AVX2 pass skipped: this CPU's best instruction set is AVX2, the pass above ran it"; fi

# What CI runs, then the slow tier (tests marked `slow`: more models, more ranks, the
# sanitizer build, the generated kernels' freshness) and the CUDA runtime builds (`nvcc`).
# `make test` runs a representative of each (the cases marked `ci_sample`; tests/test_ci_tiers.py
# fails on a module of opt-in cases without one): the backend's compile matrix (a case, 8 s) and
# stock loop (the encoder, 21 s), the trainer's torch.optim matrix (a case, 2 s), a killed rank
# on 2 gloo ranks (6 s), an OpInfo sample on the executor (15 s), six OpInfos through every
# stage (17 s), an MLP under ASan and UBSan (6 s, and the instrumented runtime's build once per
# cache: 35 s), the TVM kernels' freshness on a spec of each kind (2 s); about 84 s more in
# all, measured on the 2-core VM at load 7-8 (2026-11-28/29; docs/development.md).
test-all: test
	$(PYTEST) -m "slow or nvcc"

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check planner codegen tests examples bench

bench: $(VENV)/.installed-test
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The whole OpInfo sweep (tests/importers/test_opinfo.py runs a fixed subset of it): every
# float32 OpInfo of torch's op_db through the torch front end on two processes, on its sample
# inputs and then on its held-out reference inputs; rewrites tests/importers/
# opinfo_expectations.json, opinfo_reference_expectations.json and docs/supported-ops.md and
# prints the tables
# (bench/RESULTS.md). `git diff` then shows which OpInfos changed.
opinfo: $(VENV)/.installed-test
	$(PY) bench/opinfo_sweep.py --jobs 2 --inputs both --write

# The same OpInfos on through every stage (issue 86): one sample each planned for this host,
# built into the CPU executor (a package per fixed group of 8 OpInfos, kept in the host's
# package cache by digest: a rerun compiles nothing) and run against torch; rewrites
# tests/importers/opinfo_staged_expectations.json and docs/opinfo-stages.md (the staged counts
# and the expected-failure list). tests/codegen/test_opinfo_stages.py runs a handful with the
# suite; `-m opinfo_full` runs the rest, a group per case.
opinfo-staged: $(VENV)/.installed-test
	$(PY) bench/opinfo_sweep.py --jobs 2 --stages matches --write

# The complex64 OpInfos (issue 86): every OpInfo of op_db that supports complex64, its samples
# drawn in complex64 (complex tensors held and given out as their planes, complex128 torch the
# reference), on its sample and its held-out reference inputs, then on through every stage;
# rewrites tests/importers/opinfo_complex64_expectations.json,
# opinfo_complex64_reference_expectations.json, opinfo_complex64_staged_expectations.json and
# docs/opinfo-stages.md (its complex64 section).
opinfo-complex64: $(VENV)/.installed-test
	$(PY) bench/opinfo_sweep.py --jobs 2 --dtype complex64 --inputs both --write
	$(PY) bench/opinfo_sweep.py --jobs 2 --dtype complex64 --stages matches --write
