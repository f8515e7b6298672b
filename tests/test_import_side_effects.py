"""Importing (and using) tapeflow changes nothing process-wide that belongs to other code:
environment variables, NumPy's error and print settings, BLAS thread pools, the
floating-point environment, signal handlers, warning filters, logging, interpreter limits,
global random states. (Libraries tapeflow loads itself, such as the OpenMP runtime, are new
rather than changed, and the modules it imports are imported first.) Each check runs in a
fresh process that snapshots all of it before and after."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

_SNAPSHOT = textwrap.dedent(
    """
    import ctypes, faulthandler, gc, json, locale, logging, os, random, signal, socket, sys
    import threading, warnings
    import numpy as np
    import scipy.linalg
    import scipy.special  # its import adds a warnings filter of its own

    try:
        import threadpoolctl
    except ImportError:
        threadpoolctl = None
    libm = ctypes.CDLL("libm.so.6")

    def umask():
        mask = os.umask(0o22)
        os.umask(mask)
        return mask

    def handlers():
        out = {}
        for s in sorted(signal.valid_signals()):
            try:
                out[str(int(s))] = repr(signal.getsignal(s))
            except (ValueError, OSError):
                pass
        return out

    def snapshot():
        root = logging.getLogger()
        return {
            "environ": dict(os.environ),
            "numpy errstate": np.geterr(),
            "numpy printoptions": {k: repr(v) for k, v in np.get_printoptions().items()},
            "numpy global random state": repr(np.random.get_state()[1][:4]),
            "python random state": repr(random.getstate()[1][:4]),
            "blas threads": {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()}
            if threadpoolctl else {},
            "rounding mode": libm.fegetround(),
            "float32 subnormal results": float(np.float32(1e-30) * np.float32(1e-10)) != 0.0,
            "float64 subnormal inputs": float(np.float64(5e-324) * np.float64(2.0)) != 0.0,
            "signal handlers": handlers(),
            "warnings filters": [repr(f) for f in warnings.filters],
            "root logger": [root.level, [repr(h) for h in root.handlers]],
            "logging disabled": logging.root.manager.disable,
            "recursion limit": sys.getrecursionlimit(),
            "switch interval": sys.getswitchinterval(),
            "hooks": [repr(sys.excepthook), repr(sys.displayhook), repr(threading.excepthook)],
            "std streams": [id(sys.stdout), id(sys.stderr), id(sys.stdin)],
            "faulthandler": faulthandler.is_enabled(),
            "gc": [gc.isenabled(), gc.get_threshold()],
            "cwd": os.getcwd(),
            "umask": umask(),
            "socket timeout": socket.getdefaulttimeout(),
            "locale": locale.setlocale(locale.LC_ALL, None),
            "sys.path": list(sys.path),
        }

    random.seed(5)
    np.random.seed(5)
    before = snapshot()
    import tapeflow as tp
    after_import = snapshot()
    ACTION
    after_use = snapshot()
    for now in (after_import, after_use):  # libraries loaded since (OpenMP) are new, not changed
        now["blas threads"] = {k: v for k, v in now["blas threads"].items() if k in before["blas threads"]}
    changed = {
        stage: {k: [before[k], now[k]] for k in before if before[k] != now[k]}
        for stage, now in (("import", after_import), ("use", after_use))
    }
    print(json.dumps(changed, default=repr))
    """
)

_USES = {
    "import only": "pass",
    "eager, tape and kernels": (
        "x = tp.Variable(tp.random.normal((4, 8, 8, 3)))\n"
        "with tp.GradientTape() as tape:\n"
        "    y = tp.sum(tp.nn.relu(tp.nn.conv2d(x, tp.ones((3, 3, 3, 2)), 1, 'SAME')))\n"
        "tape.gradient(y, [x])\n"
        "tp.matmul(tp.ones((300, 300)), tp.ones((300, 300))).numpy()"
    ),
    "graph": ("g = tp.freeze(lambda a: tp.tanh(tp.exp(a) * 2.0 + 1.0), tp.TensorSpec((None, 3)))\ng(tp.ones((2, 3)))"),
    "training": (
        "m = tp.Sequential([tp.Input((16,)), tp.layers.Dense(64, activation='relu'), tp.layers.Dense(2)])\n"
        "m.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
        "m.fit(np.ones((64, 16), 'float32'), np.zeros(64, 'int32'), batch_size=16, epochs=2, verbose=0)"
    ),
}


@pytest.mark.parametrize("use", sorted(_USES))
def test_tapeflow_leaves_process_state_alone(use):
    code = _SNAPSHOT.replace("ACTION", _USES[use])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert changed == {"import": {}, "use": {}}


_TRAINING_BESIDE_A_USER_LIMIT = textwrap.dedent(
    """
    import json, threading, time
    import numpy as np
    import scipy.linalg  # SciPy's OpenBLAS loaded too, so that the line below sets both libraries
    import threadpoolctl

    threadpoolctl.threadpool_limits(limits=2, user_api="blas")  # something a pin to 1 would change

    def counts():
        return {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    import tapeflow as tp

    start = counts()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 64)).astype("float32")
    y = (x.sum(1) > 0).astype("int32")
    model = tp.Sequential([tp.Input((64,)), tp.layers.Dense(384, activation="relu"), tp.layers.Dense(384),
                           tp.layers.Dense(2)])
    model.compile(optimizer="adam", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    stop, trained = threading.Event(), threading.Event()

    def train():
        while not stop.is_set():
            model.fit(x, y, batch_size=256, epochs=1, verbose=0)
            trained.set()

    def watch(seconds):
        seen = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            seen.append(counts())
            time.sleep(0.005)
        return seen

    trainer = threading.Thread(target=train)
    trainer.start()
    trained.wait(120)
    unlimited = watch(1.0)  # what other threads see while training runs
    limited = []
    for _ in range(10):  # the user limits BLAS to one thread, again and again, while training runs
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            limited += watch(0.1)
    limit = threadpoolctl.threadpool_limits(limits=1, user_api="blas")
    limited += watch(0.3)
    stop.set()
    trainer.join()
    after_training = counts()
    limit.restore_original_limits()
    print(json.dumps({
        "start": start,
        "seen while training": [c for c in unlimited if c != start][:3],
        "seen under the user's limit": [c for c in limited if set(c.values()) != {1}][:3],
        "after training, under the user's limit": after_training,
        "after the user's limit": counts(),
    }))
    """
)


def test_training_leaves_a_user_blas_limit_in_another_thread_alone():
    """A fit in one thread neither shows other threads a BLAS thread count of its own nor undoes
    a threadpool_limits(1) that another thread sets meanwhile; when the user's limit ends, the
    count is the one from before it (tapeflow sets no BLAS thread count at all)."""
    pytest.importorskip("threadpoolctl")
    out = subprocess.run(
        [sys.executable, "-c", _TRAINING_BESIDE_A_USER_LIMIT], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    start = report["start"]
    assert start and set(start.values()) == {2}, report
    assert report["seen while training"] == [], report
    assert report["seen under the user's limit"] == [], report
    assert report["after training, under the user's limit"] == dict.fromkeys(start, 1), report
    assert report["after the user's limit"] == start, report


def test_tapeflow_kernels_bring_no_blas_library_a_user_limit_would_reach():
    """tapeflow's private BLAS copy is invisible to threadpoolctl: the BLAS libraries a user's
    limits set are the same before and after tapeflow runs its kernels."""
    pytest.importorskip("threadpoolctl")
    code = textwrap.dedent(
        """
        import threadpoolctl, scipy.linalg
        def blas():
            return sorted(i["filepath"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas")
        before = blas()
        import tapeflow as tp
        tp.matmul(tp.ones((300, 300)), tp.ones((300, 300))).numpy()
        print(before == blas(), tp._kernels._gemm.BLAS_PRIVATE)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[0] == "True", out.stdout
