"""LambdaCallback, TerminateOnNaN, RemoteMonitor and OrbaxCheckpoint through short `fit` runs."""

import http.server
import json
import threading
import urllib.parse

import numpy as np
import pytest

import tapeflow as tp


def _model():
    model = tp.Sequential([tp.layers.Input((3,)), tp.layers.Dense(1)])
    model.compile(tp.optimizers.SGD(0.01), "mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype("float32")
    return x, x.sum(-1, keepdims=True)


def test_lambda_callback_hooks_run_in_fit():
    calls = []
    cb = tp.callbacks.LambdaCallback(
        on_train_begin=lambda logs: calls.append("train_begin"),
        on_epoch_begin=lambda epoch, logs: calls.append(f"epoch_begin{epoch}"),
        on_train_batch_end=lambda batch, logs: calls.append(f"batch{batch}:{'loss' in logs}"),
        on_epoch_end=lambda epoch, logs: calls.append(f"epoch_end{epoch}:{sorted(logs)}"),
        on_train_end=lambda logs: calls.append("train_end"),
        on_test_begin=lambda logs: calls.append("test_begin"),
    )
    x, y = _data()
    _model().fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[cb], validation_data=(x, y))
    assert calls[0] == "train_begin" and calls[-1] == "train_end"
    assert calls.count("batch0:True") == 2 and calls.count("batch1:True") == 2
    assert "epoch_begin1" in calls and "epoch_end1:['loss', 'val_loss']" in calls
    assert calls.count("test_begin") == 2


def test_lambda_callback_rejects_non_hooks():
    with pytest.raises(TypeError, match="LambdaCallback"):
        tp.callbacks.LambdaCallback(on_epoch_end=3)


class _NaNAt(tp.callbacks.Callback):
    """Turns the logged loss into NaN at one batch."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            logs["loss"] = float("nan")


def test_terminate_on_nan_stops_training():
    x, y = _data()
    model = _model()
    history = model.fit(x, y, batch_size=4, epochs=5, verbose=0, callbacks=[_NaNAt(1), tp.callbacks.TerminateOnNaN()])
    assert model.stop_training
    assert len(history.history["loss"]) == 1
    assert int(model.optimizer.iterations) == 2  # it stops after the batch whose loss was NaN, as Keras does


def test_terminate_on_nan_raises_when_asked():
    x, y = _data()
    with pytest.raises(RuntimeError, match="NaN or Inf"):
        _model().fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[_NaNAt(2), tp.callbacks.TerminateOnNaN(True)])


def test_terminate_on_nan_leaves_finite_training_alone():
    x, y = _data()
    history = _model().fit(x, y, epochs=3, verbose=0, callbacks=[tp.callbacks.TerminateOnNaN()])
    assert len(history.history["loss"]) == 3


@pytest.fixture
def server():
    received = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            received.append((self.path, dict(self.headers), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("as_json", [False, True])
def test_remote_monitor_posts_each_epoch(server, as_json):
    root, received = server
    monitor = tp.callbacks.RemoteMonitor(root=root, path="/log/", send_as_json=as_json, headers={"X-Run": "7"})
    x, y = _data()
    _model().fit(x, y, epochs=2, verbose=0, callbacks=[monitor])
    assert len(received) == 2
    for epoch, (path, headers, body) in enumerate(received):
        assert path == "/log/" and headers["X-Run"] == "7"
        if as_json:
            payload = json.loads(body)
        else:
            payload = json.loads(urllib.parse.parse_qs(body)["data"][0])
        assert payload["epoch"] == epoch and np.isfinite(payload["loss"])


def test_remote_monitor_warns_when_unreachable():
    monitor = tp.callbacks.RemoteMonitor(root="http://127.0.0.1:9", timeout=1.0)
    with pytest.warns(UserWarning, match="could not reach"):
        monitor.on_epoch_end(0, {"loss": np.float32(0.5)})


def test_remote_monitor_rejects_other_schemes():
    with pytest.raises(ValueError, match="http"):
        tp.callbacks.RemoteMonitor(root="file:///etc")


def test_orbax_checkpoint_is_not_available():
    with pytest.raises(NotImplementedError, match="JAX"):
        tp.callbacks.OrbaxCheckpoint("/tmp/ckpt")
