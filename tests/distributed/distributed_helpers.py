"""What the distributed tests share: optimizers to train with, a callback that records
the calls `fit` makes, and ways to start, occupy and kill worker processes."""

import os
import subprocess
import sys
import threading
import time

import tapeflow as tp

OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.1),
    "momentum": lambda: tp.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: tp.optimizers.Adam(0.01),
}


class Recorder(tp.callbacks.Callback):
    """Every callback call with what it saw; `epoch_logs` adds the keys of the epoch's logs."""

    def __init__(self, epoch_logs: bool = True):
        super().__init__()
        self.epoch_logs = epoch_logs
        self.calls = []

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(("epoch", epoch))

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append(("begin", batch))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("end", batch, sorted(logs)))

    def on_epoch_end(self, epoch, logs=None):
        keys = (sorted(logs),) if self.epoch_logs else ()
        self.calls.append(("epoch end", epoch, *keys, self.model.get_weights()[0].sum().round(3)))


def worker_pid(cluster, worker: str) -> int:
    """The process id of `worker`."""
    return cluster.client.run(os.getpid, workers=[worker])[worker]


def start_worker(address: str) -> subprocess.Popen:
    """A `dask worker` process without a nanny, as on a real cluster: nothing restarts it."""
    command = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny"]
    command += ["--memory-limit", "1GiB", "--host", "127.0.0.1", "--no-dashboard"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def occupy(cluster, worker: str, seconds: float = 60.0):
    """A task that keeps the one thread of `worker` asleep, so that the tasks sent to it after
    wait in its queue (cancel the returned future to release it)."""
    return cluster.client.submit(time.sleep, seconds, workers=[worker], allow_other_workers=False, pure=False)


class KillWhenQueued(threading.Thread):
    """Calls `kill()` once a task whose key starts with `prefix` is assigned to `worker`
    (within `timeout` seconds); `killed` says whether it did."""

    def __init__(self, cluster, worker: str, prefix: str, kill, timeout: float = 30.0):
        super().__init__(daemon=True)
        self.cluster, self.worker, self.prefix, self.kill, self.timeout = cluster, worker, prefix, kill, timeout
        self.killed = False

    def run(self):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            keys = self.cluster.client.processing(workers=[self.worker]).get(self.worker, ())
            if any(str(key).startswith(self.prefix) for key in keys):
                self.kill()
                self.killed = True
                return
            time.sleep(0.02)
