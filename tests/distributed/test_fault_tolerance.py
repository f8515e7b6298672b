"""Fault tolerance of `DataParallel` and `AsyncParameterServer` on a real LocalCluster (worker processes
on 127.0.0.1): periodic atomic checkpoints, workers killed with SIGKILL mid-training,
and workers that join.

The references are computed in the same test: single-process training on the same
batches, and a run resumed from the checkpoint that recovery restarted from (loaded
from its file into a fresh model, which then trains the remaining steps on the same
batches). Every wait is bounded, and every test has a timeout.
"""

import errno
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.checkpoints import CheckpointFiles

pytestmark = [pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]")]

N, BATCH, STEPS = 96, 12, 8  # 8 steps of 12 rows per epoch, consecutive rows (shuffle=False)
TOL = {"rtol": 2e-5, "atol": 2e-6}


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=3, memory_limit="1GiB") as cluster:
        yield cluster


@pytest.fixture
def full(cluster):
    """The module's cluster with its 3 workers, each answering (a killed one is replaced by
    its nanny, and the scheduler may list it for a while after it died)."""
    deadline = time.monotonic() + 150  # a nanny restarting a killed worker on a busy machine
    while True:
        left = max(1.0, deadline - time.monotonic())
        cluster.client.wait_for_workers(3, timeout=left)
        try:
            answered = cluster.client.run(os.getpid, wait=True)
        except Exception:  # noqa: BLE001 - a listed worker that no longer answers
            answered = {}
        if len(answered) >= 3 and set(answered) == set(cluster.workers):
            return cluster
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster did not get 3 answering workers back in 150 s: {sorted(answered)}")
        time.sleep(0.5)


def make_model():
    tp.random.seed(7)
    model = tp.Sequential([tp.layers.Dense(16, activation="relu", name="a"), tp.layers.Dense(5, name="b")])
    model(np.zeros((1, 12), np.float32))
    model.compile(optimizer=tp.optimizers.Adam(0.01), loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((N, 12)).astype(np.float32), rng.integers(0, 5, N)


def batch(x, y, step):
    rows = slice((step % STEPS) * BATCH, (step % STEPS + 1) * BATCH)
    return x[rows], y[rows]


def single_process_states(x, y, steps):
    """{step: (weights, optimizer state)} of single-process training after each step."""
    model, states = make_model(), {}
    for step in range(steps):
        model.train_on_batch(*batch(x, y, step))
        states[step + 1] = (model.get_weights(), model.optimizer.get_state())
    return states


def resumed_from(path, x, y, steps):
    """A fresh model loaded from checkpoint `path`, trained up to `steps` steps in one process."""
    model = make_model()
    info = tp.io.load_checkpoint(path, model, model.optimizer)
    assert model.optimizer.iterations == info.extra["step"]
    for step in range(info.extra["step"], steps):
        model.train_on_batch(*batch(x, y, step))
    return model


def assert_state(model, weights, optimizer_state):
    for a, b in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_allclose(a, b, **TOL)
    state = model.optimizer.get_state()
    assert sorted(state) == sorted(optimizer_state)
    for key, value in optimizer_state.items():
        np.testing.assert_allclose(state[key], value, err_msg=key, **TOL)


def fit(model, strategy, epochs=2, callbacks=(), source="arrays"):
    """`model.fit` on the data in order, from arrays or from a Dataset of the same batches."""
    x, y = data()
    kw = dict(epochs=epochs, verbose=0, distribute=strategy, callbacks=list(callbacks))
    if source == "dataset":
        return model.fit(tp.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), **kw)
    return model.fit(x, y, batch_size=BATCH, shuffle=False, **kw)


# ------------------------------------------------------------------ checkpoints
@pytest.mark.timeout(150)  # with the fixture's wait for a replaced worker
def test_checkpoints_hold_the_state_of_their_step(full, tmp_path):
    x, y = data()
    reference = single_process_states(x, y, 2 * STEPS)
    model = make_model()
    strategy = tp.distributed.DataParallel(
        full, replicas=2, checkpoint_dir=tmp_path, checkpoint_every_steps=3, keep_checkpoints=100
    )
    fit(model, strategy)
    steps = [3, 6, 8, 9, 12, 15, 16]  # every third step, and the end of each epoch
    assert strategy.checkpoints == [str(tmp_path / f"ckpt-{s}.h5") for s in steps]
    assert sorted(os.listdir(tmp_path)) == sorted(f"ckpt-{s}.h5" for s in steps)  # no temp files
    assert tp.distributed.latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-16.h5")
    for step, path in zip(steps, strategy.checkpoints, strict=True):
        restored = make_model()
        info = tp.io.load_checkpoint(path, restored, restored.optimizer)
        assert info.extra == {"step": step, "epoch": (step - 1) // STEPS, "batch": step - (step - 1) // STEPS * STEPS}
        assert restored.optimizer.iterations == step
        assert_state(restored, *reference[step])
    assert_state(model, *reference[2 * STEPS])


@pytest.mark.timeout(150)  # with the fixture's wait for a replaced worker
def test_checkpoints_by_time_hold_the_state_of_their_step(full, tmp_path):
    x, y = data()
    reference = single_process_states(x, y, STEPS)
    strategy = tp.distributed.DataParallel(
        full,
        replicas=2,
        checkpoint_dir=tmp_path,
        checkpoint_every_seconds=0.15,
        keep_checkpoints=100,
        straggler_delay={0: 0.1},
    )
    fit(make_model(), strategy, epochs=1)
    steps = [tp.io.load_checkpoint(p, make_model(), None).extra["step"] for p in strategy.checkpoints]
    assert steps[-1] == STEPS and len(steps) >= 2  # a step about every 0.1 s: checkpoints mid-epoch
    for step, path in zip(steps, strategy.checkpoints, strict=True):
        restored = make_model()
        tp.io.load_checkpoint(path, restored, restored.optimizer)
        assert_state(restored, *reference[step])


def test_only_the_newest_checkpoints_are_kept_and_strays_are_removed(tmp_path):
    model = make_model()
    (tmp_path / "ckpt-1.h5").write_bytes(b"from an earlier run")
    (tmp_path / ".ckpt-7.h5.0a1b2c.tmp").write_bytes(b"a write that was killed")
    files = CheckpointFiles(tmp_path, keep=2)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1.h5"]
    for step in (2, 4, 6):
        files.write(model, step, epoch=0, batch=step)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1.h5", "ckpt-4.h5", "ckpt-6.h5"]


class FailingWrites:
    """Makes the n-th checkpoint write fail half-way, as a full disk would."""

    def __init__(self, monkeypatch, n):
        import tapeflow.saving.checkpoint as checkpoint

        self.calls, self.n, self.write = 0, n, checkpoint.write_arrays
        monkeypatch.setattr(checkpoint, "write_arrays", self)

    def __call__(self, group, arrays):
        self.write(group, arrays)
        if group.name == "/optimizer/slots":
            self.calls += 1
            if self.calls == self.n:
                raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.timeout(150)  # with the fixture's wait for a replaced worker
def test_an_interrupted_checkpoint_write_leaves_the_previous_file(full, tmp_path, monkeypatch):
    x, y = data()
    reference = single_process_states(x, y, 6)
    FailingWrites(monkeypatch, n=2)
    strategy = tp.distributed.DataParallel(
        full, replicas=2, checkpoint_dir=tmp_path, checkpoint_every_steps=3, keep_checkpoints=1
    )
    with pytest.raises(OSError, match="No space left on device"):
        fit(make_model(), strategy)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-3.h5"]  # no ckpt-6.h5, no temp file, and ckpt-3 kept
    restored = make_model()
    tp.io.load_checkpoint(tmp_path / "ckpt-3.h5", restored, restored.optimizer)
    assert_state(restored, *reference[3])


# ------------------------------------------------------------------ workers killed
def steps_done(model, batch):
    return model._fit_epoch * STEPS + batch + 1


class KillWorker(tp.callbacks.Callback):
    """SIGKILLs the worker process `choose(strategy)` picks, once the client has seen `step` done."""

    def __init__(self, cluster, strategy, step, choose):
        super().__init__()
        self.cluster, self.strategy, self.step, self.choose = cluster, strategy, step, choose
        self.victim = None

    def on_train_batch_end(self, batch, logs=None):
        if self.victim is None and steps_done(self.model, batch) >= self.step:
            self.victim = self.choose(self.strategy)
            pid = self.cluster.client.run(os.getpid, workers=[self.victim])[self.victim]
            os.kill(pid, signal.SIGKILL)


def replica_worker(strategy):
    return strategy.placements[-1].replica_workers[1]  # replica 1 and a parameter shard; the step log is on replica 0's


def parameter_server_worker(strategy):
    placement = strategy.placements[-1]
    (worker,) = set(placement.shard_workers) - set(placement.replica_workers)
    return worker


@pytest.mark.timeout(180)  # with the fixture's wait for a replaced worker
@pytest.mark.parametrize(
    "choose, source",
    [(replica_worker, "arrays"), (replica_worker, "dataset"), (parameter_server_worker, "arrays")],
    ids=["replica", "replica-dataset", "parameter-server"],
)
def test_training_goes_on_from_the_last_checkpoint_when_a_worker_is_killed(full, tmp_path, choose, source):
    x, y = data()
    model = make_model()
    strategy = tp.distributed.DataParallel(
        full,
        replicas=2,
        timeout=30,
        checkpoint_dir=tmp_path,
        checkpoint_every_steps=2,
        keep_checkpoints=100,
        straggler_delay={0: 0.05},  # so that the kill lands mid-epoch
    )
    killer = KillWorker(full, strategy, step=3, choose=choose)
    fit(model, strategy, callbacks=[killer], source=source)

    assert killer.victim is not None and killer.victim in strategy.placements[0].shard_workers
    assert len(strategy.recoveries) == 1
    recovery = strategy.recoveries[0]
    assert recovery.lost_workers == (killer.victim,)
    assert recovery.restored_step in (2, 4)  # the checkpoint before the kill (or the one right after it)
    assert all(killer.victim not in p.replica_workers + p.shard_workers for p in strategy.placements[1:])
    assert model.optimizer.iterations == 2 * STEPS
    assert [s.step for s in strategy.steps] == list(range(2 * STEPS))
    assert all(len(s.applied) == 2 for s in strategy.steps)

    path = tmp_path / f"ckpt-{recovery.restored_step}.h5"
    assert str(path) in strategy.checkpoints
    resumed = resumed_from(path, x, y, 2 * STEPS)
    assert_state(model, resumed.get_weights(), resumed.optimizer.get_state())
    assert_state(model, *single_process_states(x, y, 2 * STEPS)[2 * STEPS])  # and equals an uninterrupted run


@pytest.mark.timeout(180)  # with the fixture's wait for a replaced worker
@pytest.mark.parametrize("victim", [0, 2], ids=["replica-log-and-shard", "shard"])
def test_async_training_runs_the_epoch_again_from_its_checkpoint_when_a_worker_is_killed(full, tmp_path, victim):
    x, y = data()
    model = make_model()
    strategy = tp.distributed.AsyncParameterServer(
        full, replicas=1, timeout=30, checkpoint_dir=tmp_path, keep_checkpoints=10, straggler_delay={0: 0.05}
    )
    workers = full.workers  # the replica and the update log go to the first; a shard to each
    killer = KillWorker(full, strategy, step=STEPS + 3, choose=lambda _: workers[victim])
    history = fit(model, strategy, epochs=3, callbacks=[killer])

    assert killer.victim == workers[victim]
    (recovery,) = strategy.recoveries
    assert recovery.lost_workers == (workers[victim],) and recovery.restored_step == STEPS
    assert strategy.checkpoints == [str(tmp_path / f"ckpt-{s}.h5") for s in (STEPS, 2 * STEPS, 3 * STEPS)]
    assert [s.step for s in strategy.steps] == list(range(3 * STEPS))  # the lost attempt's updates are forgotten
    assert len(history.history["loss"]) == 3
    # One replica: every update is fresh, so the re-run epoch equals the uninterrupted run.
    reference = single_process_states(x, y, 3 * STEPS)
    assert_state(model, *reference[3 * STEPS])
    restored = make_model()
    tp.io.load_checkpoint(tmp_path / f"ckpt-{STEPS}.h5", restored, restored.optimizer)
    assert_state(restored, *reference[STEPS])


class PauseWorker(KillWorker):
    """SIGSTOPs a worker process: it stays in the cluster but answers nothing."""

    def on_train_batch_end(self, batch, logs=None):
        if self.victim is None and steps_done(self.model, batch) >= self.step:
            self.victim = self.choose(self.strategy)
            self.pid = self.cluster.client.run(os.getpid, workers=[self.victim])[self.victim]
            os.kill(self.pid, signal.SIGSTOP)


@pytest.mark.timeout(150)  # with the fixture's wait for a replaced worker
def test_a_worker_that_stops_answering_ends_fit_with_a_timeout_naming_it(full):
    model = make_model()
    strategy = tp.distributed.DataParallel(full, replicas=2, timeout=5, straggler_delay={0: 0.05})
    pause = PauseWorker(full, strategy, step=2, choose=parameter_server_worker)
    try:
        with pytest.raises(TimeoutError) as error:
            fit(model, strategy, callbacks=[pause])
    finally:
        if pause.victim is not None:
            os.kill(pause.pid, signal.SIGCONT)
    # while steps run, or (if the replicas were done with the epoch) while reading the state back:
    assert str(error.value) in (
        f"fit: step {error.value.args[0].split()[2]} did not complete within 5s "
        f"(no answer within 2s from the parameter shard on {pause.victim})",
        f"fit: the parameter shard on {pause.victim} (read the state) did not answer within 5s",
    )
    assert strategy.recoveries == []


# ------------------------------------------------------------------ workers that join
class AddWorker(tp.callbacks.Callback):
    """Scales the local cluster up by one worker once the client has seen `step` done."""

    def __init__(self, cluster, step):
        super().__init__()
        self.cluster, self.step, self.joined = cluster, step, None

    def on_train_batch_end(self, batch, logs=None):
        if self.joined is None and steps_done(self.model, batch) >= self.step:
            before = set(self.cluster.workers)
            self.cluster.client.cluster.scale(len(before) + 1)
            self.cluster.client.wait_for_workers(len(before) + 1, timeout=30)
            (self.joined,) = set(self.cluster.workers) - before


@pytest.mark.timeout(180)  # with the fixture's wait for a replaced worker
def test_a_worker_that_joins_is_used_from_a_step_soon_after():
    x, y = data()
    model = make_model()
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as small:
        strategy = tp.distributed.DataParallel(small, replicas=3, min_replicas=2, straggler_delay={0: 0.25})
        joining = AddWorker(small, step=1)
        fit(model, strategy, callbacks=[joining])

    # No checkpoint interval is set: training grows at the first step not yet started once the
    # client sees the new worker, mid-epoch unless the replicas finished the epoch meanwhile.
    (grown,) = [p.first_step for p in strategy.placements[1:]]
    assert 1 < grown <= STEPS
    assert [p.replicas for p in strategy.placements] == [2, 3]
    assert joining.joined in strategy.placements[1].replica_workers
    assert joining.joined in strategy.placements[1].shard_workers
    assert [len(s.applied) for s in strategy.steps] == [2] * grown + [3] * (2 * STEPS - grown)
    assert strategy.recoveries == []
    assert_state(model, *single_process_states(x, y, 2 * STEPS)[2 * STEPS])  # re-sharded: equal up to rounding


def start_worker(address: str) -> subprocess.Popen:
    """A `dask worker` process without a nanny, as on a real cluster: nothing restarts it."""
    command = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny"]
    command += ["--memory-limit", "1GiB", "--host", "127.0.0.1", "--no-dashboard"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Elastic(tp.callbacks.Callback):
    """Kills the hand-started worker once `kill_at` steps are done, and starts another one
    (waiting until it joined) once `join_at` steps are done."""

    def __init__(self, cluster, processes, kill_at, join_at):
        super().__init__()
        self.cluster, self.processes, self.kill_at, self.join_at = cluster, processes, kill_at, join_at

    def on_train_batch_end(self, batch, logs=None):
        done = steps_done(self.model, batch)
        if self.kill_at and done >= self.kill_at:
            self.processes[0].kill()
            self.kill_at = None
        if self.join_at and done >= self.join_at:
            self.processes.append(start_worker(self.cluster.client.scheduler.address))
            self.cluster.client.wait_for_workers(2, timeout=60)
            self.join_at = None


@pytest.mark.timeout(120)
def test_elastic_training_shrinks_when_a_worker_dies_and_grows_when_one_joins(tmp_path):
    x, y = data()
    model = make_model()
    with tp.distributed.Cluster(n_workers=1, memory_limit="1GiB") as cluster:
        processes = [start_worker(cluster.client.scheduler.address)]
        try:
            cluster.client.wait_for_workers(2, timeout=60)
            strategy = tp.distributed.DataParallel(
                cluster,
                replicas=2,
                min_replicas=1,
                timeout=30,
                checkpoint_dir=tmp_path,
                checkpoint_every_steps=2,
                keep_checkpoints=100,
                straggler_delay={0: 0.05},
            )
            fit(model, strategy, callbacks=[Elastic(cluster, processes, kill_at=3, join_at=10)])
        finally:
            for process in processes:
                process.kill()
                process.wait(timeout=10)

    (recovery,) = strategy.recoveries
    restored = recovery.restored_step
    assert restored in (2, 4)
    # the new worker joined with 10 steps done: used from the checkpoint of step 10
    assert [(p.first_step, p.replicas) for p in strategy.placements] == [(0, 2), (restored, 1), (10, 2)]
    assert [s.step for s in strategy.steps] == list(range(2 * STEPS))
    assert [len(s.applied) for s in strategy.steps] == [2] * restored + [1] * (10 - restored) + [2] * 6
    resumed = resumed_from(tmp_path / f"ckpt-{restored}.h5", x, y, 2 * STEPS)
    assert_state(model, resumed.get_weights(), resumed.optimizer.get_state())  # re-sharded: equal up to rounding


@pytest.mark.timeout(180)  # with the fixture's wait for a replaced worker
def test_too_few_workers_after_a_death_end_fit_with_a_clear_error():
    model = make_model()
    weights = model.get_weights()
    with tp.distributed.Cluster(n_workers=1, memory_limit="1GiB") as cluster:
        processes = [start_worker(cluster.client.scheduler.address)]
        try:
            cluster.client.wait_for_workers(2, timeout=60)
            strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=5, straggler_delay={0: 0.05})
            with pytest.raises(RuntimeError, match="training needs 2 workers but 1 are alive .* within 5s"):
                fit(model, strategy, callbacks=[Elastic(cluster, processes, kill_at=3, join_at=None)])
        finally:
            for process in processes:
                process.kill()
                process.wait(timeout=10)
    for before, after in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)  # no checkpoint yet: the model as it was
