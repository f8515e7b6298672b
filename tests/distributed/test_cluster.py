"""`tp.distributed.Cluster`: worker processes that never outlive the context, joining a
scheduler started by hand, a clear error for an address where no scheduler answers, and
tapeflow importing without Dask."""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat

needs_dask = pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]")


def alive(pid: int) -> bool:
    import psutil  # a dependency of distributed

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@needs_dask
@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", [None, RuntimeError, KeyboardInterrupt])
def test_worker_processes_end_with_the_context(ending):
    pids = []
    try:
        with tp.distributed.Cluster(n_workers=1, memory_limit="512MiB") as cluster:
            pids = list(cluster.client.run(os.getpid).values())
            assert len(pids) == 1 and alive(pids[0])
            if ending is not None:
                raise ending("stop here")
    except (RuntimeError, KeyboardInterrupt) as err:
        assert ending is not None and isinstance(err, ending)
    assert pids and not any(alive(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        cluster.client  # noqa: B018 - the property raises


def start(*args) -> subprocess.Popen:
    command = [sys.executable, "-m", *args, "--host", "127.0.0.1", "--no-dashboard"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@needs_dask
@pytest.mark.timeout(90)
def test_training_runs_unchanged_on_a_scheduler_and_workers_started_by_hand(tmp_path):
    scheduler_file = tmp_path / "scheduler.json"
    processes = [start("distributed.cli.dask_scheduler", "--port", "0", "--scheduler-file", str(scheduler_file))]
    try:
        deadline = time.monotonic() + 30
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        for _ in range(2):
            worker = ("distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny")
            processes.append(start(*worker))
        models = []
        for _ in range(2):
            tp.random.seed(3)
            model = tp.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(3)])
            model(np.zeros((1, 6), np.float32))
            model.compile(optimizer="adam", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
            models.append(model)
        rng = np.random.default_rng(0)
        x, y = rng.standard_normal((30, 6)).astype(np.float32), rng.integers(0, 3, 30)
        models[0].fit(x, y, batch_size=10, epochs=2, seed=1, verbose=0)
        with tp.distributed.Cluster(address=address, timeout=20) as cluster:
            cluster.client.wait_for_workers(2, timeout=30)
            strategy = tp.distributed.DataParallel(cluster, replicas=2)
            models[1].fit(x, y, batch_size=10, epochs=2, seed=1, verbose=0, distribute=strategy)
        for a, b in zip(models[1].get_weights(), models[0].get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@needs_dask
@pytest.mark.timeout(30)
def test_an_unreachable_address_is_a_connection_error():
    with pytest.raises(ConnectionError, match=r"no Dask scheduler answered at 'tcp://127.0.0.1:9' within 2s"):
        tp.distributed.Cluster(address="tcp://127.0.0.1:9", timeout=2)


def test_bad_cluster_arguments_are_value_errors():
    with pytest.raises(ValueError, match="n_workers must be an integer >= 1"):
        tp.distributed.Cluster(n_workers=0)
    with pytest.raises(ValueError, match="timeout"):
        tp.distributed.Cluster(timeout=-1)


@pytest.mark.timeout(60)
def test_tapeflow_imports_without_a_working_dask(tmp_path):
    for name in ("dask", "distributed"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('not installed here')\n")
    script = textwrap.dedent(
        """
        import tapeflow as tp
        try:
            tp.distributed.Cluster()
        except ImportError as err:
            print(err)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert "pip install 'tapeflow[dist]'" in done.stdout


@pytest.mark.timeout(60)
def test_workers_are_asked_of_the_scheduler_not_the_clients_cache(monkeypatch):
    """The client's periodic refresh leaves a cached identity that lists no workers; a
    training loop that read it just after such a refresh would take every worker for lost."""
    with tp.distributed.Cluster(n_workers=2) as cluster:
        client = cluster.client
        client.wait_for_workers(2, timeout=30)
        refresh = client._update_scheduler_info

        async def refreshed_by_the_periodic_callback(n_workers=0):
            await refresh(n_workers=0)  # whatever was asked, the refresh wins the race

        monkeypatch.setattr(client, "_update_scheduler_info", refreshed_by_the_periodic_callback)
        assert client.scheduler_info()["workers"] == {}
        assert len(cluster.workers) == 2
