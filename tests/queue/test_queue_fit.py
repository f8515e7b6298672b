"""`fit` and `predict` reading their batches from a queue: the same training as on the
arrays the queue was fed, with a producer thread filling the queue while fit runs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapeflow as tp

WAIT = 10.0  # seconds a producer may wait for room


def _data(rows: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)


def _twins():
    tp.random.seed(1)
    models = [tp.Sequential([tp.Input((3,)), tp.layers.Dense(1)]) for _ in range(2)]
    models[1].set_weights(models[0].get_weights())
    for m in models:
        m.compile(optimizer=tp.optimizers.SGD(0.1), loss="mse")
    return models


def test_fit_on_a_queue_fed_while_it_trains_matches_fit_on_the_arrays():
    x, y = _data(80)
    fed, plain = _twins()
    q = tp.queue.FIFOQueue(16, ["float32", "float32"], shapes=[(3,), (1,)])

    def produce():
        for k in range(0, 80, 4):
            q.enqueue_many([x[k : k + 4], y[k : k + 4]], timeout=WAIT)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    history = fed.fit(q, batch_size=8, steps_per_epoch=5, epochs=2, verbose=0)
    producer.join(WAIT)
    expected = plain.fit(x, y, batch_size=8, steps_per_epoch=5, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(fed.get_weights(), plain.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history.history["loss"], expected.history["loss"], rtol=1e-5)
    assert q.size() == 0


def test_a_closed_queue_ends_the_data_and_predict_reads_x_alone():
    x, y = _data(20)
    fed, plain = _twins()
    q = tp.queue.FIFOQueue(32, ["float32", "float32"], shapes=[(3,), (1,)])
    q.enqueue_many([x, y])
    q.close()
    fed.fit(q, batch_size=8, epochs=1, verbose=0)  # 8 + 8 + 4 rows, then the queue's end
    plain.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(fed.get_weights(), plain.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    inputs = tp.queue.FIFOQueue(32, "float32", shapes=[(3,)])
    inputs.enqueue_many(x)
    inputs.close()
    np.testing.assert_allclose(fed.predict(inputs, batch_size=6, verbose=0), plain.predict(x, verbose=0), rtol=1e-5)


def test_a_queue_with_y_is_refused():
    fed, _ = _twins()
    q = tp.queue.FIFOQueue(4, ["float32", "float32"], shapes=[(3,), (1,)])
    with pytest.raises(ValueError, match="with a queue as x, y and sample_weight must be None"):
        fed.fit(q, np.zeros((4, 1)), verbose=0)
