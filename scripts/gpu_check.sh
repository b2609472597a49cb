#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU: install, test suite on CUDA, 2-minute sampler
# benchmark, and the demo scene at full resolution (800x800) with its time-to-PSNR table.
#
#   scripts/gpu_check.sh OUT              # on the GPU machine
#   scripts/gpu_check.sh --dry-run OUT    # anywhere: same steps on the CPU, tiny settings
#
# Writes into OUT: environment.txt (GPU, driver, torch build), tests.log and tests.xml (pytest on
# CUDA: the device-parametrized tests run on CPU and CUDA, the CLI runs pick the GPU),
# ddp.log (2-GPU DDP smoke run, when there are two GPUs), bench/ (benchmarks.samplers:
# results.json, results.md with rays/s, samples/s and test PSNR per sampler on the demo scene),
# speed/ (benchmarks.speed: the demo config on the demo scene rendered at 800x800, steps/s, peak
# memory, test PSNR and seconds to 30/32/34 dB validation PSNR) and summary.md. Exits non-zero when a step failed; later steps still run.
#
# Installing: `make install` pins torch==2.13.0 and installs it first. Set TORCH_PIP_ARGS to the
# pip options that select a CUDA build of that version (e.g. TORCH_PIP_ARGS="--index-url URL" with
# URL your CUDA wheel index); if the installed torch cannot see a GPU, the script reinstalls torch
# with those options. On a machine without network access, point VENV at an environment that
# already has the project and a CUDA torch (VENV=/path/to/venv), or create .venv with
# VENV_ARGS=--system-site-packages to reuse a preinstalled CUDA torch 2.13.0.
#
# Knobs (environment): GPU_CHECK_BUDGET (training seconds per sampler, default 30),
# GPU_CHECK_FULL_RES (pixels of the full-resolution run, default 800) and GPU_CHECK_FULL_RES_S
# (its training seconds, default 300),
# GPU_CHECK_SAMPLERS (default "Uniform OccupancyGrid Hierarchical Proposal"),
# GPU_CHECK_TESTS (pytest arguments, default: the whole suite).
set -uo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
    DRY_RUN=1
    shift
fi
if [[ $# -ne 1 ]]; then
    echo "usage: $0 [--dry-run] OUT_DIR" >&2
    exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
cd "$REPO"
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
FAILED=()

step() { echo "== $* ($(date -u +%H:%M:%S))"; }

if [[ $DRY_RUN == 1 ]]; then
    BUDGET="${GPU_CHECK_BUDGET:-1}"
    SAMPLERS="${GPU_CHECK_SAMPLERS:-Uniform}"
    TESTS="${GPU_CHECK_TESTS:-tests/core/test_devices.py tests/system/test_precision.py}"
    BENCH_EXTRA=(--curve-every-s 0 --budget on --no-peer)
    FULL_RES="${GPU_CHECK_FULL_RES:-24}"
    FULL_RES_S="${GPU_CHECK_FULL_RES_S:-2}"
else
    BUDGET="${GPU_CHECK_BUDGET:-30}"
    SAMPLERS="${GPU_CHECK_SAMPLERS:-Uniform OccupancyGrid Hierarchical Proposal}"
    TESTS="${GPU_CHECK_TESTS:-}"
    BENCH_EXTRA=(--no-peer)
    FULL_RES="${GPU_CHECK_FULL_RES:-800}"
    FULL_RES_S="${GPU_CHECK_FULL_RES_S:-300}"
fi

# 1. Install (a no-op when the environment is up to date).
step "install"
if [[ -x "$PY" && "$VENV" != ".venv" ]]; then
    echo "using the existing environment $VENV"
elif ! make install VENV="$VENV" TORCH_PIP_ARGS="${TORCH_PIP_ARGS:-}" > "$OUT/install.log" 2>&1; then
    echo "make install failed; see $OUT/install.log" >&2
    exit 2
fi
if [[ $DRY_RUN == 0 ]] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    if [[ -n "${TORCH_PIP_ARGS:-}" ]]; then
        step "reinstall torch with TORCH_PIP_ARGS"
        # shellcheck disable=SC2086
        "$VENV/bin/pip" install --quiet --force-reinstall torch==2.13.0 $TORCH_PIP_ARGS >> "$OUT/install.log" 2>&1
    fi
    if ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
        "$PY" -c "import torch; print('torch', torch.__version__, 'cuda build', torch.version.cuda)" | tee "$OUT/environment.txt"
        echo "torch cannot use a GPU here: set TORCH_PIP_ARGS to install a CUDA build (see the header)" >&2
        exit 2
    fi
fi

# 2. What this machine is.
step "environment"
{
    "$PY" - <<'PY'
import platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda build", torch.version.cuda)
print("cuda available", torch.cuda.is_available(), "| devices", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name} {p.total_memory / 2**30:.0f} GiB, bf16 {torch.cuda.is_bf16_supported()}")
PY
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
NUM_GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")

# 3. The test suite (on CUDA: CLI runs take the GPU, device-parametrized tests run on both).
step "tests ${TESTS:-(all)}"
# shellcheck disable=SC2086
if "$PY" -m pytest -q -ra -p no:cacheprovider --junitxml "$OUT/tests.xml" $TESTS > "$OUT/tests.log" 2>&1; then
    TEST_STATUS="passed"
else
    TEST_STATUS="FAILED"
    FAILED+=("tests")
fi
tail -n 1 "$OUT/tests.log"

# 4. Two GPUs or more: a short data-parallel run (NCCL) of the demo config.
if [[ $DRY_RUN == 0 && "$NUM_GPUS" -ge 2 ]]; then
    step "DDP smoke run on 2 GPUs"
    if "$PY" -m nerf_lightning fit --config configs/demo.yaml --config configs/ddp.yaml --trainer.devices 2 \
        --trainer.max_time 00:00:00:30 --trainer.enable_progress_bar false \
        --trainer.default_root_dir "$OUT/ddp" > "$OUT/ddp.log" 2>&1; then
        DDP_STATUS="passed"
    else
        DDP_STATUS="FAILED"
        FAILED+=("ddp")
    fi
else
    DDP_STATUS="skipped (fewer than 2 GPUs or dry run)"
fi

# 5. Samplers at equal training time on the demo scene: rays/s, samples/s, test PSNR.
step "benchmark: $SAMPLERS, ${BUDGET}s each"
# shellcheck disable=SC2086
if "$PY" -m benchmarks.samplers --out "$OUT/bench" --wall-s "$BUDGET" --scenes demo --samplers $SAMPLERS \
    "${BENCH_EXTRA[@]}" > "$OUT/bench.log" 2>&1; then
    BENCH_STATUS="passed"
else
    BENCH_STATUS="FAILED"
    FAILED+=("benchmark")
fi

# 6. The demo config on the demo scene at full resolution: steps/s, peak memory, time to PSNR.
step "full resolution: ${FULL_RES}x${FULL_RES}, ${FULL_RES_S}s of training"
if "$PY" -m benchmarks.speed --out "$OUT/speed" --resolutions "$FULL_RES" --wall-s "$FULL_RES_S" \
    > "$OUT/speed.log" 2>&1; then
    SPEED_STATUS="passed"
else
    SPEED_STATUS="FAILED"
    FAILED+=("full-resolution run")
fi

{
    echo "# GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ)$([[ $DRY_RUN == 1 ]] && echo ' (dry run, CPU)')"
    echo
    echo '```'
    cat "$OUT/environment.txt"
    echo '```'
    echo
    echo "- tests: $TEST_STATUS: $(tail -n 1 "$OUT/tests.log")"
    echo "- DDP: $DDP_STATUS"
    echo "- benchmark: $BENCH_STATUS (${BUDGET}s per sampler)"
    echo
    echo "- full resolution: $SPEED_STATUS (${FULL_RES}x${FULL_RES}, ${FULL_RES_S}s)"
    echo
    [[ -f "$OUT/bench/results.md" ]] && cat "$OUT/bench/results.md"
    echo
    [[ -f "$OUT/speed/results.md" ]] && cat "$OUT/speed/results.md"
} > "$OUT/summary.md"
cat "$OUT/summary.md"
if [[ ${#FAILED[@]} -gt 0 ]]; then
    echo "failed: ${FAILED[*]}" >&2
    exit 1
fi
