"""Runs scripts in forked children of one process that has imported its library once.

Started as `python script_server.py keras|tapeflow`, it reads one request a line from
stdin, `<script>\t<working folder>\t<timeout seconds>`, runs the script as `__main__` in a
child forked for it, with the child's stdout and stderr written to `output.txt` in the
working folder, and answers with the child's exit status on one line (-9 when it ran past
its timeout and was killed). Importing Keras and torch once, instead of once a script, keeps
the suite's run within its time budget.
"""

import importlib
import os
import runpy
import signal
import sys
import time
import traceback


def run_in_child(script: str, folder: str) -> None:
    """The forked child's whole life: run the script, then leave without running the
    parent's exit handlers."""
    status = 0
    with open(os.path.join(folder, "output.txt"), "w") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        os.chdir(folder)
        sys.argv = [script]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def wait_for(pid: int, timeout: float) -> int:
    """The child's exit status, or -9 once it has run past `timeout` seconds and been killed."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -9
        time.sleep(0.02)


def serve(library: str) -> None:
    importlib.import_module(library)
    print("ready", flush=True)
    for line in sys.stdin:
        script, folder, timeout = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            run_in_child(script, folder)
        print(wait_for(pid, float(timeout)), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1])
