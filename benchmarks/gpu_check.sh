#!/usr/bin/env bash
# The GPU check of gradir's Triton backend, in one command (issue 12):
#
#   bash benchmarks/gpu_check.sh [extra bench_gpu.py options, e.g. --rounds 10 --workloads gpt]
#
# On a machine with an NVIDIA GPU (nvidia-smi present):
#   1. picks a Python whose torch sees the GPU ($PYTHON, the active venv, ./.venv, python3), installing
#      torch==2.13.0 into ./.venv only where no torch is found at all, and gradir from this checkout;
#   2. runs the Triton backend's tests compiled for the GPU, not interpreted:
#        TRITON_INTERPRET=0 python -m pytest -q tests/test_triton_backend.py tests/test_ops.py -k triton
#      (in parallel with pytest-xdist where installed; cut off after $GPU_CHECK_TEST_TIMEOUT s);
#   3. times the makemore MLP step and the GPT-2-style blocks against PyTorch eager and torch.compile:
#        python benchmarks/bench_gpu.py --device cuda   -> benchmarks/gpu.md
#      (cut off after $GPU_CHECK_BENCH_TIMEOUT s; the tables of finished workloads are kept);
#   4. lists each kernel's device time on the large GPT block, gradir's and torch.compile's:
#        python benchmarks/profile_gpu.py --workload gpt_large   -> $GPU_CHECK_LOG_DIR/profile_gpu.txt
#      (cut off after $GPU_CHECK_PROFILE_TIMEOUT s, default 150; GPU_CHECK_SKIP_PROFILE=1 skips it).
# The defaults cap the whole run at about 11 minutes (an H100 ran steps 1-3 in under 3). Without nvidia-smi it says so and runs the
# interpreter path instead: python benchmarks/bench_gpu.py --device cpu --quick (a pipeline check).
#
# A machine that reaches no package index needs gradir's pure-Python dependencies it lacks as wheels (the
# device image of 2026-12 lacked only graphviz): pip install --no-index --target DIR graphviz-*.whl and put DIR
# on PYTHONPATH before running this.
# Environment: PYTHON (the interpreter to use), GPU_CHECK_TEST_TIMEOUT (default 180 s),
# GPU_CHECK_BENCH_TIMEOUT (default 300 s), GPU_CHECK_SKIP_TESTS=1 (benchmark only), GPU_CHECK_WORKERS
# (pytest-xdist workers, default 8), GPU_CHECK_MAXFAIL (pytest stops after that many failures, default 25),
# GPU_CHECK_OUT (where the table goes). Logs go to $GPU_CHECK_LOG_DIR (default /tmp/gradir-gpu-check); where
# $OUT is set (a device machine's result folder), the table and the logs are copied there too.
# Exit status: the tests' (0 when skipped), else the benchmark's.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT:-180}
BENCH_TIMEOUT=${GPU_CHECK_BENCH_TIMEOUT:-300}
PROFILE_TIMEOUT=${GPU_CHECK_PROFILE_TIMEOUT:-150}
WORKERS=${GPU_CHECK_WORKERS:-8}
MAXFAIL=${GPU_CHECK_MAXFAIL:-25}
LOG_DIR=${GPU_CHECK_LOG_DIR:-/tmp/gradir-gpu-check}
mkdir -p "$LOG_DIR"
START=$SECONDS

say() { printf '[gpu_check %4ds] %s\n' "$((SECONDS - START))" "$*"; }

copy_out() {  # the results to $OUT, where a device machine collects them
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        for f in "$@"; do
            if [ -f "$f" ]; then cp "$f" "$OUT/"; fi
        done
    fi
}

# -- which Python -----------------------------------------------------------------------------------
candidates=()
if [ -n "${PYTHON:-}" ]; then candidates+=("$PYTHON"); fi
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then candidates+=("$VIRTUAL_ENV/bin/python"); fi
if [ -x "$REPO/.venv/bin/python" ]; then candidates+=("$REPO/.venv/bin/python"); fi
if command -v python3 >/dev/null 2>&1; then candidates+=("$(command -v python3)"); fi
if [ ${#candidates[@]} -eq 0 ]; then
    say "no Python found (set PYTHON)"
    exit 2
fi

has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1; then
    has_gpu=1
    say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo '(no answer)')"
else
    say "no nvidia-smi on this machine: no NVIDIA GPU to run on; running the CPU-interpreter path instead"
fi

PY=""
if [ "$has_gpu" = 1 ]; then  # the first Python whose torch sees the GPU
    for c in "${candidates[@]}"; do
        if "$c" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
            PY=$c
            break
        fi
    done
fi
if [ -z "$PY" ]; then  # else the first with torch at all
    for c in "${candidates[@]}"; do
        if "$c" -c 'import torch' >/dev/null 2>&1; then
            PY=$c
            break
        fi
    done
fi
torch_installed_here=0
if [ -z "$PY" ]; then  # no torch anywhere: a venv of our own with the pinned torch
    if [ ! -x "$REPO/.venv/bin/python" ]; then
        say "no Python with torch found; creating $REPO/.venv"
        "${candidates[-1]}" -m venv "$REPO/.venv"
    fi
    PY="$REPO/.venv/bin/python"
    say "installing torch==2.13.0 into $PY"
    "$PY" -m pip install -q torch==2.13.0
    torch_installed_here=1
fi
say "python: $PY ($("$PY" -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")'))"
if [ "$has_gpu" = 1 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    say "nvidia-smi sees a GPU but this torch does not (a CPU-only build?): install a CUDA build of torch, or set PYTHON"
    exit 2
fi

# -- gradir from this checkout, with triton ---------------------------------------------------------
gradir_here() {
    "$PY" - "$REPO" <<'EOF' >/dev/null 2>&1
import pathlib, sys
import gradir, gradir.backends.triton, triton, pytest, hypothesis  # noqa: F401
sys.exit(0 if pathlib.Path(gradir.__file__).resolve().parent == pathlib.Path(sys.argv[1]) / "gradir" else 1)
EOF
}
if gradir_here; then
    say "gradir (this checkout), triton, pytest and hypothesis already importable"
else
    # '.[test,triton]' pins torch==2.13.0: only where this script installed torch itself (never replace the
    # machine's own CUDA build); else gradir and triton, and the test tools where missing
    extras='.[triton]'
    if [ "$torch_installed_here" = 1 ]; then extras='.[test,triton]'; fi
    if [ "$torch_installed_here" = 0 ] && "$PY" -c 'import numpy, scipy, networkx, ml_dtypes, llvmlite, rich, triton' >/dev/null 2>&1; then
        # what gradir's kernels need is there (a device machine's image): no index needed, none asked
        say "pip install --no-deps --no-build-isolation -e . (its run-time dependencies are installed)"
        "$PY" -m pip install -q --no-deps --no-build-isolation -e . || true
    else
        say "pip install -e '$extras'"
    fi
    if gradir_here; then
        :
    elif ! "$PY" -m pip install -q --retries 1 --timeout 15 -e "$extras"; then
        # offline (a device machine reaches no index): gradir alone, on what is installed
        say "pip install failed (offline?); installing gradir without dependencies"
        "$PY" -m pip install -q --no-deps --no-build-isolation -e . || true
    fi
    "$PY" -c 'import pytest, hypothesis' >/dev/null 2>&1 || "$PY" -m pip install -q --retries 1 --timeout 15 pytest hypothesis || true
    if ! gradir_here; then
        say "gradir from $REPO, triton, pytest or hypothesis still not importable with $PY:"
        "$PY" -c 'import gradir, gradir.backends.triton, triton, pytest, hypothesis; print(gradir.__file__)' || true
        exit 2
    fi
fi
say "versions: $("$PY" -c 'import torch, triton; print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}")')"

# -- no GPU: the interpreter path ---------------------------------------------------------------------
if [ "$has_gpu" = 0 ]; then
    log="$LOG_DIR/bench_gpu_interpreter.log"
    out="${GPU_CHECK_OUT:-$LOG_DIR/gpu_interpreter.md}"
    say "python benchmarks/bench_gpu.py --device cpu --quick (Triton's interpreter; timings meaningless)"
    rc=0
    TRITON_INTERPRET=1 PYTHONUNBUFFERED=1 "$PY" benchmarks/bench_gpu.py --device cpu --quick --out "$out" "$@" \
        2>&1 | tee "$log" || rc=$?
    copy_out "$out" "$log"
    say "interpreter table: $out (log: $log); no GPU figures from this machine"
    exit "$rc"
fi

# -- 1. the Triton tests, compiled for the GPU ------------------------------------------------------------
test_rc=0
if [ "${GPU_CHECK_SKIP_TESTS:-0}" = 1 ]; then
    say "tests skipped (GPU_CHECK_SKIP_TESTS=1)"
else
    parallel=()
    if "$PY" -c 'import xdist' >/dev/null 2>&1; then parallel=(-n "$WORKERS"); fi
    log="$LOG_DIR/pytest_triton_gpu.log"
    say "TRITON_INTERPRET=0 pytest tests/test_triton_backend.py tests/test_ops.py -k triton ${parallel[*]+${parallel[*]}} (at most ${TEST_TIMEOUT} s)"
    # SIGINT at the time limit: pytest stops and still prints its summary of the failures so far
    TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 timeout -s INT -k 20 "$TEST_TIMEOUT" \
        "$PY" -m pytest -q -p no:cacheprovider --maxfail="$MAXFAIL" ${parallel[@]+"${parallel[@]}"} tests/test_triton_backend.py tests/test_ops.py -k triton \
        2>&1 | tee "$log" || test_rc=$?
    case $test_rc in
        0) say "Triton tests on the GPU: passed" ;;
        124|137) say "Triton tests on the GPU: CUT OFF after ${TEST_TIMEOUT} s (the summary above covers the tests run; raise GPU_CHECK_TEST_TIMEOUT); see $log" ;;
        *) say "Triton tests on the GPU: FAILED (exit $test_rc); see $log" ;;
    esac
    copy_out "$log"
fi

# -- 2. the benchmark ---------------------------------------------------------------------------------------
out="${GPU_CHECK_OUT:-$REPO/benchmarks/gpu.md}"
log="$LOG_DIR/bench_gpu.log"
say "python benchmarks/bench_gpu.py --device cuda --out $out $* (at most ${BENCH_TIMEOUT} s)"
bench_rc=0
TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 timeout -k 10 "$BENCH_TIMEOUT" \
    "$PY" benchmarks/bench_gpu.py --device cuda --out "$out" "$@" 2>&1 | tee "$log" || bench_rc=$?
case $bench_rc in
    0) say "benchmark done: the table is in $out" ;;
    124|137) say "benchmark CUT OFF after ${BENCH_TIMEOUT} s; the finished workloads' tables are in $out" ;;
    *) say "benchmark FAILED (exit $bench_rc); see $log; any finished tables are in $out" ;;
esac
copy_out "$out" "$log"

# -- 3. where the large block's time goes ----------------------------------------------------------------
if [ "${GPU_CHECK_SKIP_PROFILE:-0}" != 1 ]; then
    prof="$LOG_DIR/profile_gpu.txt"
    say "python benchmarks/profile_gpu.py --workload gpt_large (at most ${PROFILE_TIMEOUT} s)"
    TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 timeout -k 10 "$PROFILE_TIMEOUT" \
        "$PY" benchmarks/profile_gpu.py --workload gpt_large --calls 3 --out "$prof" >"$LOG_DIR/profile_gpu.log" 2>&1 \
        && say "kernel profile: $prof" || say "profile FAILED or cut off; see $LOG_DIR/profile_gpu.log"
    copy_out "$prof" "$LOG_DIR/profile_gpu.log"
fi
say "total ${SECONDS}s; tests exit $test_rc, benchmark exit $bench_rc"
if [ "$test_rc" != 0 ]; then exit "$test_rc"; fi
exit "$bench_rc"
