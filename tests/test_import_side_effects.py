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
}


@pytest.mark.parametrize("use", sorted(_USES))
def test_tapeflow_leaves_process_state_alone(use):
    code = _SNAPSHOT.replace("ACTION", _USES[use])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert changed == {"import": {}, "use": {}}
