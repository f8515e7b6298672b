"""Bad ids and labels on the stand-in gpu:0 raise the CPU's errors, word for word, without a
host read per op: each checked op records a flag on the device and goes on with safe ids;
the flags are read together (one read) at the end of a frozen step, of an eager train
step, or of an epoch of `fit`, or by `check_pending`."""

import numpy as np
import pytest
from strict_arrays import HOST_READS, stand_in_gpu

import tapeflow as tp
from tapeflow import _compat
from tapeflow.backends import common
from tapeflow.backends.common import check_pending

TABLE = np.arange(12.0, dtype=np.float32).reshape(4, 3)
BAD_IDS = np.array([1, 7, 0])
BAD_LABELS = np.array([2, -1, 0, 1])
LOGITS = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
COUNTED = not _compat.has_gpu  # HOST_READS counts the stand-in's reads (a real GPU's are not counted)


def _reads() -> int | None:
    """The reads counted since HOST_READS was cleared; None on a real GPU (any count passes)."""
    return sum(HOST_READS.values()) if COUNTED else None


@pytest.fixture
def gpu(monkeypatch):
    return stand_in_gpu(monkeypatch)


def _gather(table, ids):
    return tp.gather(table, ids)


def _embedding(table, ids):
    return tp.nn.embedding_lookup(table, ids)


def _scatter_add(table, ids):
    return tp.scatter_add(table, ids, tp.ones((3, 3)))


def _labels(logits, labels):
    return tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


CASES = {
    "gather": (_gather, TABLE, BAD_IDS),
    "embedding_lookup": (_embedding, TABLE, BAD_IDS),
    "scatter_add": (_scatter_add, TABLE, BAD_IDS),
    "sparse_softmax_cross_entropy_with_logits": (_labels, LOGITS, BAD_LABELS),
}


def _error(run):
    with pytest.raises(Exception) as info:  # noqa: PT011 - the CPU's error, whatever it is
        run()
    return info.value


def _eager(fn, a, b):
    fn(tp.tensor(a), tp.tensor(b))
    check_pending()  # the read that ends a step (a no-op on the CPU, which raised already)


def _frozen(fn, a, b):
    return tp.function(fn)(tp.tensor(a), tp.tensor(b))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("run", [_eager, _frozen], ids=["eager", "frozen"])
def test_bad_ids_and_labels_raise_the_cpu_error(gpu, case, run):
    fn, a, b = CASES[case]
    with tp.device("cpu"):
        want = _error(lambda: run(fn, a, b))
    with tp.device(gpu):
        got = _error(lambda: run(fn, a, b))
    assert type(got) is type(want) and str(got) == str(want)
    assert ("label -1" if "entropy" in case else "index 7") in str(got)


@pytest.mark.parametrize("case", sorted(CASES))
def test_checked_ops_read_nothing_until_the_step_ends(gpu, case):
    fn, a, b = CASES[case]
    with tp.device(gpu):
        a, b = tp.tensor(a), tp.tensor(b)
        HOST_READS.clear()
        for _ in range(3):
            fn(a, b)  # out-of-range ids are clipped into range on the device meanwhile
        assert _reads() in (0, None)
        with pytest.raises((IndexError, ValueError)):
            check_pending()
    assert _reads() in (1, None) and not common.has_pending()


def _step(table, ids, logits, labels):
    rows = tp.gather(table, ids)
    grown = tp.scatter_add(table, ids, rows)
    loss = tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return tp.sum(grown) + loss


@pytest.mark.parametrize("bad", [None, "ids", "labels"])
def test_a_frozen_step_reads_all_its_checks_at_once(gpu, bad):
    ids = BAD_IDS if bad == "ids" else np.array([1, 3, 0])
    labels = BAD_LABELS if bad == "labels" else np.array([2, 1, 0, 1])
    with tp.device("cpu"):
        step = tp.function(_step)
        want = _error(lambda: step(TABLE, ids, LOGITS, labels)) if bad else step(TABLE, ids, LOGITS, labels).numpy()
    with tp.device(gpu):
        step = tp.function(_step)
        inputs = [tp.tensor(a) for a in (TABLE, ids, LOGITS, labels)]
        for call in range(2):  # the first call traces (and reads the constants it captures)
            HOST_READS.clear()
            if bad:
                got = _error(lambda: step(*inputs))
                assert type(got) is type(want) and str(got) == str(want)
            else:
                result = step(*inputs)
            assert call == 0 or _reads() in (1, None)  # three checked ops, one read
    if not bad:
        np.testing.assert_allclose(result.numpy(), want, rtol=1e-6)


def test_variable_scatter_update_raises_the_cpu_error_and_leaves_the_variable(gpu):
    rows = np.ones((3, 3), np.float32)
    errors, values = {}, {}
    for device in ("cpu", gpu):
        with tp.device(device):
            v = tp.Variable(TABLE, name="table")
            slices = tp.IndexedSlices(tp.tensor(rows), tp.tensor(BAD_IDS), TABLE.shape)
            HOST_READS.clear()
            errors[device] = _error(lambda v=v, slices=slices: (v.scatter_update(slices), check_pending()))
            assert _reads() in (1 if device == gpu else 0, None)
            values[device] = v.numpy()
    assert type(errors[gpu]) is type(errors["cpu"]) and str(errors[gpu]) == str(errors["cpu"])
    assert "Variable.scatter_update: index 7" in str(errors[gpu])
    np.testing.assert_array_equal(values[gpu], TABLE)  # the write happens whole or not at all
    np.testing.assert_array_equal(values["cpu"], TABLE)


def test_variable_scatter_update_in_a_frozen_step(gpu):
    errors, values = {}, {}
    for device in ("cpu", gpu):
        with tp.device(device):
            v = tp.Variable(TABLE, name="table")

            @tp.function
            def write(ids, rows, v=v):
                v.scatter_update(tp.IndexedSlices(rows, ids, TABLE.shape))
                return tp.sum(rows)

            good = write(tp.tensor(np.array([3, 0])), tp.ones((2, 3)))
            errors[device] = _error(lambda write=write: write(tp.tensor(np.array([3, 9])), tp.ones((2, 3))))
            values[device] = v.numpy()
            assert float(good) == 6.0
    assert type(errors[gpu]) is type(errors["cpu"]) and str(errors[gpu]) == str(errors["cpu"])
    assert "index 9" in str(errors[gpu])
    np.testing.assert_array_equal(values[gpu], values["cpu"])


def _embedding_model(device: str, jit: bool):
    tp.random.seed(0)
    with tp.device(device):
        model = tp.Sequential(
            [tp.Input((5,), dtype="int64"), tp.layers.Embedding(20, 4, name="words"), tp.layers.Flatten()]
            + [tp.layers.Dense(3, name="scores")],
            name="model",
        )
        model.compile(
            optimizer=tp.optimizers.Adam(1e-2),
            loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit=jit,
        )
    return model


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("call", ["fit", "train_on_batch"])
def test_bad_ids_in_training_raise_the_cpu_error(gpu, jit, call):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 20, (32, 5)), rng.integers(0, 3, 32)
    x[20, 3] = 25
    errors = {}
    for device in ("cpu", gpu):
        model = _embedding_model(device, jit)
        with tp.device(device):
            if call == "fit":
                errors[device] = _error(lambda m=model: m.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0))
            else:
                errors[device] = _error(lambda m=model: m.train_on_batch(x[16:], y[16:]))
    assert type(errors[gpu]) is type(errors["cpu"]) and str(errors[gpu]) == str(errors["cpu"])
    assert "id 25 is out of range" in str(errors[gpu]) or "gather: index 25 is out of range" in str(errors[gpu])


def test_bad_labels_in_training_raise_the_cpu_error(gpu):
    x, y = np.zeros((8, 5), np.int64), np.array([0, 1, 2, 3, 0, 1, 2, 0])
    errors = {}
    for device in ("cpu", gpu):
        model = _embedding_model(device, jit=True)
        with tp.device(device):
            errors[device] = _error(lambda m=model: m.fit(x, y, batch_size=4, epochs=1, verbose=0))
            device_y = tp.tensor(y, device=device)
            errors[device, "tensor"] = _error(lambda m=model, t=device_y: m.train_on_batch(x, t))
    for key in ("", "tensor"):
        got, want = errors[(gpu, key) if key else gpu], errors[("cpu", key) if key else "cpu"]
        assert type(got) is type(want) and str(got) == str(want) and "label 3 is out of range [0, 3)" in str(got)


def test_pending_checks_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(common, "MAX_PENDING", 3)
    with tp.device(gpu):
        table, ids = tp.tensor(TABLE), tp.tensor(np.array([0, 1]))
        HOST_READS.clear()
        for _ in range(3):
            tp.gather(table, ids)
    assert _reads() in (1, None) and not common.has_pending()


def test_the_cpu_checks_at_once():
    with pytest.raises(common.IndexOutOfRange, match="gather: index 7 is out of range for axis 0 of size 4"):
        tp.gather(tp.tensor(TABLE), BAD_IDS)
    assert not common.has_pending()


def test_sparse_adam_rows_are_checked_as_on_the_cpu(gpu):
    errors = {}
    for device in ("cpu", gpu):
        with tp.device(device):
            zeros, grad = tp.zeros(TABLE.shape), tp.ones((3, 3))
            HOST_READS.clear()
            errors[device] = _error(
                lambda z=zeros, g=grad: (
                    tp.ops.optim.sparse_adam_update(tp.tensor(TABLE), z, z, tp.tensor([1, 3, 1]), g, lr=0.1, step=1),
                    check_pending(),
                )
            )
            assert _reads() in (1 if device == gpu else 0, None)
    assert type(errors[gpu]) is type(errors["cpu"]) and str(errors[gpu]) == str(errors["cpu"])
    assert "sparse_adam_update: row 1 repeats" in str(errors[gpu])


def test_sparse_adam_in_place_on_the_device_writes_whole_or_nothing(gpu):
    """The executor's in-place form on device tables: a repeated or outside row leaves every
    table as it was (the error comes when the checks are read)."""
    from tapeflow.backends import backend

    kernels = backend("gpu")  # the stand-in's backend here, CuPy's on a GPU
    for ids in ([1, 3, 1], [0, 9]):
        tables = [kernels.from_host(TABLE.copy()) for _ in range(3)]
        grad = kernels.from_host(np.ones((len(ids), 3), np.float32))
        kernels.sparse_adam_update_in_place(*tables, kernels.from_host(np.array(ids)), grad, 0.1, 1.0, 0.9, 0.999, 1e-7)
        with pytest.raises((ValueError, IndexError), match="repeats|out of range"):
            check_pending()
        for table in tables:
            np.testing.assert_array_equal(kernels.to_host(table), TABLE)
