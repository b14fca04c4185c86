# Two commands on a fresh machine:
#   make demo   set up .venv, then run the main job on the bundled default model and this host:
#               plan LeNet for this machine, build its executor, train it on sklearn's digits
#   make test   set up .venv, then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PLANNER := $(VENV)/bin/planner

.PHONY: demo test lint bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,cuda]'
	touch $@

demo: $(VENV)/.installed
	$(PLANNER) target detect
	$(PLANNER) graph 'zoo:lenet?image=8&batch=32' --train sgd
	$(PLANNER) plan 'zoo:lenet?image=8&batch=32' --train sgd --target host \
		-o generated/lenet-digits.host.plan.json --force
	$(PLANNER) verify generated/lenet-digits.host.plan.json
	$(PY) examples/train_digits.py --check

test: $(VENV)/.installed
	$(PY) -m pytest -q
	ONEDNN_MAX_CPU_ISA=AVX2 $(PY) -m pytest -q tests/codegen -m "not slow"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check planner codegen tests examples bench

bench: $(VENV)/.installed
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
