"""`Cluster`: Dask worker processes on this machine, or a running Dask scheduler joined by address.

The cluster is a context manager that always stops what it started: on a normal exit,
an exception or Ctrl-C, the client is closed and (for a local cluster) every worker
process is ended. `cluster.client` is Dask's own `distributed.Client`.

Scripts that start a local cluster need the `if __name__ == "__main__":` guard, since
worker processes are spawned and re-import the main module.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     len(cluster.workers)
2
"""

from __future__ import annotations

import contextlib
import logging
import weakref

from tapeflow import _compat
from tapeflow.distributed.tracing import ClusterTrace

# Dask starts worker processes with glibc told to return freed memory to the system past
# 64 KiB (MALLOC_TRIM_THRESHOLD_), which also fixes glibc's threshold for serving large
# blocks from fresh pages. A training step frees and reallocates megabytes of arrays
# every step, so each would then fault its pages in anew: on the Deep-MNIST CNN a step
# took 35 ms instead of 23. Local workers keep glibc's adaptive defaults, as any other
# process has them (an explicit MALLOC_TRIM_THRESHOLD_ in the environment still wins).
GLIBC_TRIMMING = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


class Cluster:
    """Worker processes for distributed training (see the module docstring).

    `n_workers`, `threads_per_worker` and `memory_limit` (per worker, bytes or a string
    such as "2GiB") shape a local cluster on 127.0.0.1; `address` ("tcp://host:8786")
    joins a running `dask scheduler` instead, and `timeout` (seconds) bounds the start
    or the connection.
    """

    def __init__(
        self,
        n_workers: int = 2,
        threads_per_worker: int = 1,
        memory_limit: str | int = "2GiB",
        address: str | None = None,
        timeout: float = 30.0,
    ):
        _positive_int("n_workers", n_workers)
        _positive_int("threads_per_worker", threads_per_worker)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"Cluster: timeout must be a number of seconds > 0, got {timeout!r}")
        if address is not None and not isinstance(address, str):
            raise TypeError(f"Cluster: address must be a string such as 'tcp://host:8786', got {address!r}")
        dask = _compat.require_distributed()
        self.address = address
        self.timeout = float(timeout)
        self._local = None
        self._client = None
        self._finalizer = None
        try:
            if address is None:
                with _compat.require_dask_config().set(GLIBC_TRIMMING):
                    self._local = dask.LocalCluster(
                        n_workers=n_workers,
                        threads_per_worker=threads_per_worker,
                        memory_limit=memory_limit,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=":0",  # any free port: no clash with another cluster's 8787
                        silence_logs=logging.ERROR,
                    )
                self._client = dask.Client(self._local, direct_to_workers=True, timeout=self.timeout)
                self._client.wait_for_workers(n_workers, timeout=self.timeout)
            else:
                self._client = self._connect(dask, address)
        except BaseException:
            self.close()
            raise
        self._finalizer = weakref.finalize(self, _shutdown, self._client, self._local)

    def _connect(self, dask, address: str):
        try:
            return dask.Client(address, direct_to_workers=True, timeout=self.timeout)
        except (OSError, TimeoutError) as err:
            raise ConnectionError(
                f"Cluster: no Dask scheduler answered at {address!r} within {self.timeout:g}s ({err}); "
                "start one with `dask scheduler` and workers with `dask worker <address>`"
            ) from None

    @property
    def client(self):
        """Dask's `distributed.Client` connected to this cluster."""
        if self._client is None:
            raise RuntimeError("Cluster: this cluster is closed")
        return self._client

    @property
    def workers(self) -> list[str]:
        """The addresses of the workers now connected, sorted, as the scheduler answers now.

        (Not `Client.scheduler_info()`: the client's periodic refresh replaces the identity
        it returns with one that lists no workers, so a read racing it sees none.)"""
        client = self.client
        return sorted(client.sync(client.scheduler.identity, n_workers=-1)["workers"])

    def tracer(self, timeout: float = 30.0) -> ClusterTrace:
        """What `tp.profiler.trace(..., cluster=this)` records the workers with."""
        return ClusterTrace(self, timeout)

    def close(self) -> None:
        """Close the client and end the local worker processes (safe to call twice)."""
        if self._finalizer is not None:
            self._finalizer()
        else:
            _shutdown(self._client, self._local)
        self._client = None
        self._local = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._client is None:
            return "<Cluster closed>"
        where = self.address or "local"
        return f"<Cluster {where}: {len(self.workers)} workers>"


def _shutdown(client, local) -> None:
    """Close the client, then the local cluster and its processes, whatever fails first."""
    if client is not None:
        with contextlib.suppress(Exception):
            client.close(timeout=10)
    if local is not None:
        local.close(timeout=10)


def _positive_int(label: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Cluster: {label} must be an integer >= 1, got {value!r}")
