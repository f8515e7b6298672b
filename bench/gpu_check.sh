#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU and the project tree alone (no network), whose
# python3 has CuPy, PyTorch with CUDA, NumPy, SciPy, h5py, Cython, pytest and pytest-timeout:
#
#     OUT=/tmp/gpu-check bash bench/gpu_check.sh
#
# builds the CPU kernels, runs every device test file on gpu:0 with a per-test timeout, runs
# bench/gpu.py (tapeflow against PyTorch CUDA, each in its own process), and writes one log per
# step and summary.log into $OUT (ten files: a caller that can take back fewer packs them into
# one). The whole check keeps within BUDGET seconds (default 450).
# Before the benchmark and the tests, bench/gpu_warmup.py compiles the kernels they use once.
# Wheels in a .whl/ folder at the root are installed (without network) before anything runs.
set -u
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-/tmp/cupy_cache}" KERAS_BACKEND=torch
OUT="${OUT:-/tmp/gpu-check}"
BUDGET="${BUDGET:-450}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
deadline=$((SECONDS + BUDGET))

left() {  # seconds left, at most $1, at least 1
    local n=$((deadline - SECONDS))
    [ "$n" -gt "$1" ] && n=$1
    [ "$n" -lt 1 ] && n=1
    echo "$n"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    "$PY" -c "import sys, numpy, cupy; print(sys.version); print('numpy', numpy.__version__, 'cupy', cupy.__version__); cupy.show_config()"
    "$PY" -m pip list 2>/dev/null | grep -iE 'cupy|cuda|nvidia|torch|numpy|scipy|cython|pytest|h5py|ml.dtypes'
} > "$OUT/env.log" 2>&1

if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/gpu-check-site .whl/*.whl >> "$OUT/env.log" 2>&1
    export PYTHONPATH="/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}"
fi
# The package imports as `tapeflow` from lib/ without installing it.
mkdir -p /tmp/gpu-check-src && ln -sfn "$PWD/lib" /tmp/gpu-check-src/tapeflow
export PYTHONPATH="/tmp/gpu-check-src${PYTHONPATH:+:$PYTHONPATH}"

timeout "$(left 240)" "$PY" setup.py -q build_ext --inplace --force --parallel "$(nproc)" > "$OUT/build.log" 2>&1
echo "build exit $?" >> "$OUT/build.log"

timeout -k 5 "$(left 60)" "$PY" - > "$OUT/probe.log" 2>&1 <<'PY'
import tapeflow as tp
from tapeflow import devices

print("devices:", [str(d) for d in tp.list_devices()])
reason = getattr(devices, "gpu_unavailable_reason", lambda: None)()
print("gpu unavailable reason:", reason)
x = tp.ones((2, 3), device="gpu:0")
print("x * 2.0 on", (x * 2.0).device, (x * 2.0).numpy().tolist())
print("sum:", float(tp.sum(x)))
PY

# NVRTC compiles every kernel the tests and the benchmark use once, here, into CUPY_CACHE_DIR:
# a test's time limit then counts its own work, not the first compilation of a kernel
timeout -k 5 "$(left 120)" "$PY" bench/gpu_warmup.py > "$OUT/warmup.log" 2>&1
echo "warm-up exit $?" >> "$OUT/warmup.log"

# the timings first (the targets' figures), then the device tests with what is left
for workload in mlp cnn lstm word2vec; do
    for library in tapeflow pytorch; do
        line=$(timeout -k 5 "$(left 45)" "$PY" bench/gpu.py --steps 20 --child "$library" "$workload" 2>&1 | tail -n 2 | tr '\n' ' ')
        echo "$library $workload: $line"
    done
done > "$OUT/bench.log"
timeout -k 5 "$(left 60)" "$PY" bench/gpu_profile.py --steps 5 > "$OUT/profile.log" 2>&1

PYTEST=("$PY" -m pytest -p no:cacheprovider -q -rfE --timeout=60)
run_tests() {  # log name, seconds at most, test paths...
    local name=$1 seconds=$2
    shift 2
    timeout -s INT -k 10 "$(left "$seconds")" "${PYTEST[@]}" --tb=short "$@" > "$OUT/t_$name.log" 2>&1
    echo "exit $?" >> "$OUT/t_$name.log"
}
run_tests backend 120 tests/backends/test_cupy_backend.py tests/test_gpu_availability.py tests/kernels/test_cuda_sources.py \
    tests/kernels/test_cuda_word2vec.py tests/backends/test_cupy_recurrent.py tests/kernels/test_cuda_optimizers.py \
    tests/kernels/test_cuda_range_check.py tests/kernels/test_cuda_window.py
run_tests ops 150 tests/ops/test_ops_on_devices.py -k "gpu"
run_tests layers 120 tests/layers/test_layers_on_devices.py tests/losses/test_losses_on_devices.py \
    tests/graph/test_node_devices.py -k "gpu"
run_tests training 90 tests/word2vec/test_batched.py tests/backends/test_tutorial_on_devices.py \
    tests/backends/test_no_host_syncs.py -k "gpu or sync"


{
    cat "$OUT/probe.log" "$OUT/warmup.log" "$OUT/bench.log" "$OUT/profile.log"
    for log in "$OUT"/build.log "$OUT"/t_*.log; do
        echo "== $(basename "$log")"
        tail -n 3 "$log"
    done
    echo "elapsed ${SECONDS}s"
} > "$OUT/summary.log"
cat "$OUT/summary.log"
