# nerf-lightning developer commands. `make demo` and `make test` are all a new user needs.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PLUGINS := $(wildcard plugins/*/pyproject.toml)
DEMO_DIR ?= runs
BENCH_OUT ?= bench_out

.PHONY: install demo test test-fast lint format bench bench-peer gpu-check constraints clean

install: $(STAMP)

# The pinned torch goes in first: a bare `torch` requirement would pull a CUDA build. On a GPU
# machine, TORCH_PIP_ARGS selects the CUDA build of the same version (e.g. "--index-url URL" of a
# CUDA wheel index); VENV_ARGS=--system-site-packages reuses a preinstalled one (docs/distributed.md).
# An editable install compiles no bytecode, and where PYTHONDONTWRITEBYTECODE is set no process writes
# any (outside make test and test-fast, which clear it): each command would compile the sources again,
# so they are compiled once here (a file edited later is compiled again by whichever process imports it
# first, if it may write).
TORCH_PIP_ARGS ?=
VENV_ARGS ?=
$(STAMP): pyproject.toml constraints.txt $(PLUGINS)
	$(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,video,sfm,viewer,sweep]' $(foreach p,$(PLUGINS),-e $(dir $(p)))
	$(BIN)/python -m compileall -q -j 0 nerf_lightning plugins benchmarks tests > /dev/null
	touch $(STAMP)

demo: install
	$(BIN)/python -m nerf_lightning.demo --config configs/demo.yaml --root-dir $(DEMO_DIR)

# Two pytest-xdist workers: while one waits on a subprocess (a pipeline stage, a fresh interpreter) or
# trains on tensors too small to use both cores, the other runs. Each test file stays whole on one
# worker (its module fixtures are built once); the files that start several processes or threads at
# once run one after the other on one worker (tests/conftest.py).
# PYTHONDONTWRITEBYTECODE is cleared for the tests alone: pytest keeps each test file with its asserts
# rewritten as bytecode in __pycache__, and where it may not write that, every worker rewrites every
# test file again at collection.
TEST_ENV := PYTHONDONTWRITEBYTECODE=
test: install
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile

# The quick loop: every test not marked slow (no Trainer, LightningCLI or subprocess: tests/helpers/slow_guard.py
# fails a test that starts one unmarked; nothing that computes for seconds).
test-fast: install
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not slow"

# Samplers side by side at equal training time (demo scene, and fern when ../shared/datasets/fern exists),
# then the best demo configuration once more in bf16-mixed against its 32-bit run; the image cache; the data
# pipeline as the dataset grows (150 and 300 views of 800x800: first-load memory and time, warm start, cache
# size, the loader's rays/s, steps/s, and both again with the cache larger than a memory cgroup's limit); today's
# configs against the new real-capture recipe on fox and fern, 5 training minutes each (benchmarks/recipes.yaml);
# each recipe on every scene of its kind (the scene suite's, fox, fern), 5 training minutes each, with test PSNR
# and the train-test PSNR gap (benchmarks/generalise.yaml); last, the demo config on the demo scene at 100,
# 200 and 400 pixels: steps/s, peak memory, seconds to 30/32/34 dB; then configs/sweeps/samplers-demo.yaml with two
# one-thread workers on one throwaway PostgreSQL study (wall time, overhead per trial, the best trial).
# Each part also adds its final table, dated (day, commit, machine), to benchmarks/RESULTS.md
# (benchmarks/results.py; docs/benchmarks.md).
# The benchmarks' extra (matplotlib for the PSNR-over-time plot), on top of the default install.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[bench]'
	touch $(BENCH_STAMP)

bench: install $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.samplers --out $(BENCH_OUT)
	$(BIN)/python -m benchmarks.samplers --out $(BENCH_OUT) --scenes demo --samplers OccupancyGrid --budget on \
		--precision bf16-mixed --no-peer
	$(BIN)/python -m benchmarks.image_cache
	$(BIN)/python -m benchmarks.data_scale --out $(BENCH_OUT)/data_scale
	$(BIN)/python -m benchmarks.recipes --out $(BENCH_OUT)/recipes
	$(BIN)/python -m benchmarks.generalise --out $(BENCH_OUT)/generalise
	$(BIN)/python -m benchmarks.speed --out $(BENCH_OUT)/speed
	$(BIN)/python -m benchmarks.sweep --out $(BENCH_OUT)/sweep

# Peer baseline, end to end: kornia 0.8.2's NeRF for 60 training seconds on the demo scene, scored
# with our test metric. Builds $(BENCH_OUT)/peer-venv (torch 2.13.0 + kornia 0.8.2) on first use.
bench-peer: install
	$(BIN)/python -m benchmarks.peer_kornia --scene demo --wall-s 60 --out $(BENCH_OUT)/peer \
		--venv $(BENCH_OUT)/peer-venv

# On a GPU machine: tests on CUDA and a 2-minute sampler benchmark into GPU_CHECK_OUT.
GPU_CHECK_OUT ?= gpu_check_out
gpu-check:
	bash scripts/gpu_check.sh $(GPU_CHECK_OUT)

lint: install
	$(BIN)/ruff check nerf_lightning tests plugins benchmarks

format: install
	$(BIN)/ruff check --fix nerf_lightning tests plugins

# Refresh the exact versions after changing dependencies (review the diff before committing).
constraints: install
	{ echo "# Exact versions for 'make install' (pip -c): two installs give the same environment."; \
	  echo "# Regenerate with 'make constraints' after changing dependencies."; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.new && mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) runs data/demo bench_out gpu_check_out .pytest_cache .ruff_cache
