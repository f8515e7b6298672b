"""`tp.distributed.Cluster`: worker processes that never outlive the context, a clear error
for an address where no scheduler answers, and tapeflow importing without Dask."""

import os
import subprocess
import sys
import textwrap

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
