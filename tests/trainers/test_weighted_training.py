"""Sample and class weights in fit / evaluate / train_on_batch, from arrays, datasets of
(x, y, sample_weight) and validation_data, eager and jit; the weighted losses are checked
against torch.nn.functional.cross_entropy(weight=..., reduction=...) arithmetic and against
a hand-written PyTorch training loop."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tapeflow as tp

RNG = np.random.default_rng(17)
N, FEATURES, CLASSES = 20, 5, 3
X = RNG.standard_normal((N, FEATURES)).astype(np.float32).astype(np.float64)  # exact through the float32 input cast
Y = RNG.integers(0, CLASSES, N)
W = RNG.random(N) * 2
CLASS_WEIGHT = {0: 0.5, 1: 2.0, 2: 1.5}


def _model(jit=False, metrics=None, weighted_metrics=None, optimizer=0.1, loss=None):
    tp.random.seed(4)
    model = tp.Sequential([tp.Input((FEATURES,), dtype="float64"), tp.layers.Dense(CLASSES, dtype="float64")])
    model.compile(
        tp.optimizers.SGD(optimizer),
        loss or tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics,
        jit=jit,
        weighted_metrics=weighted_metrics,
    )
    return model


def _torch_losses(model, x=X, y=Y):
    kernel, bias = model.get_weights()
    logits = torch.from_numpy(x @ kernel + bias)
    return logits, torch.from_numpy(y)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("batch_size", [N, 7])
def test_weighted_evaluate_matches_torch_cross_entropy(jit, batch_size):
    model = _model(jit)
    logits, labels = _torch_losses(model)
    per_sample = F.cross_entropy(logits, labels, reduction="none")
    # "sum_over_batch_size": sum(w * loss) / N, and batches averaged by size give the same
    expected = float((per_sample * torch.from_numpy(W)).sum() / N)
    got = model.evaluate(X, Y, sample_weight=W, batch_size=batch_size, verbose=0, return_dict=True)["loss"]
    assert got == pytest.approx(expected, rel=1e-10)
    # class weights: torch's weight= with reduction="sum", over N
    class_weights = torch.tensor([CLASS_WEIGHT[c] for c in range(CLASSES)], dtype=torch.float64)
    expected = float(F.cross_entropy(logits, labels, weight=class_weights, reduction="sum") / N)
    got = model.evaluate(X, Y, class_weight=CLASS_WEIGHT, batch_size=batch_size, verbose=0, return_dict=True)["loss"]
    assert got == pytest.approx(expected, rel=1e-10)
    unweighted = model.evaluate(X, Y, batch_size=batch_size, verbose=0, return_dict=True)["loss"]
    assert unweighted == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-10)


def test_mean_with_sample_weight_matches_torch_mean_reduction():
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    model = _model(loss=loss)
    logits, labels = _torch_losses(model)
    class_weights = torch.tensor([CLASS_WEIGHT[c] for c in range(CLASSES)], dtype=torch.float64)
    expected = float(F.cross_entropy(logits, labels, weight=class_weights, reduction="mean"))
    got = model.evaluate(X, Y, class_weight=CLASS_WEIGHT, batch_size=N, verbose=0, return_dict=True)["loss"]
    assert got == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("jit", [False, True])
def test_weighted_fit_matches_a_pytorch_loop(jit):
    model = _model(jit)
    linear = torch.nn.Linear(FEATURES, CLASSES).double()
    with torch.no_grad():
        kernel, bias = model.get_weights()
        linear.weight.copy_(torch.from_numpy(kernel.T))
        linear.bias.copy_(torch.from_numpy(bias))
    history = model.fit(X, Y, sample_weight=W, batch_size=8, epochs=2, shuffle=False, verbose=0)
    opt = torch.optim.SGD(linear.parameters(), lr=0.1)
    epoch_losses = []
    for _ in range(2):
        total = 0.0
        for start in range(0, N, 8):
            rows = slice(start, start + 8)
            opt.zero_grad()
            per_sample = F.cross_entropy(linear(torch.from_numpy(X[rows])), torch.from_numpy(Y[rows]), reduction="none")
            loss = (per_sample * torch.from_numpy(W[rows])).sum() / len(per_sample)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(per_sample)
        epoch_losses.append(total / N)
    np.testing.assert_allclose(model.get_weights()[0], linear.weight.detach().numpy().T, rtol=1e-10)
    np.testing.assert_allclose(history.history["loss"], epoch_losses, rtol=1e-10)


@pytest.mark.parametrize("jit", [False, True])
def test_class_weight_equals_the_sample_weights_it_stands_for(jit):
    by_class, by_sample = _model(jit), _model(jit)
    by_class.fit(X, Y, class_weight=CLASS_WEIGHT, batch_size=6, epochs=2, seed=1, verbose=0)
    by_sample.fit(X, Y, sample_weight=np.array([CLASS_WEIGHT[c] for c in Y]), batch_size=6, epochs=2, seed=1, verbose=0)
    for a, b in zip(by_class.get_weights(), by_sample.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_class_weight_reads_one_hot_labels_by_argmax():
    loss = tp.losses.CategoricalCrossentropy(from_logits=True)
    model = _model(loss=loss)
    one_hot = np.eye(CLASSES)[Y]
    got = model.evaluate(X, one_hot, class_weight=CLASS_WEIGHT, verbose=0, return_dict=True)["loss"]
    expected = model.evaluate(
        X, one_hot, sample_weight=np.array([CLASS_WEIGHT[c] for c in Y]), verbose=0, return_dict=True
    )["loss"]
    assert got == pytest.approx(expected, rel=1e-12)
    # unlisted classes weigh 1
    missing = model.evaluate(X, one_hot, class_weight={1: 3.0}, verbose=0, return_dict=True)["loss"]
    expected = model.evaluate(X, one_hot, sample_weight=np.where(Y == 1, 3.0, 1.0), verbose=0, return_dict=True)["loss"]
    assert missing == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("jit", [False, True])
def test_datasets_of_x_y_weight_train_like_arrays(jit):
    arrays, dataset = _model(jit), _model(jit)
    arrays.fit(X, Y, sample_weight=W, batch_size=5, epochs=2, shuffle=False, verbose=0)
    ds = tp.data.Dataset.from_tensor_slices((X, Y, W)).batch(5)
    dataset.fit(ds, epochs=2, verbose=0)
    for a, b in zip(arrays.get_weights(), dataset.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert dataset.evaluate(ds, verbose=0, return_dict=True)["loss"] == pytest.approx(
        arrays.evaluate(X, Y, sample_weight=W, verbose=0, return_dict=True)["loss"], rel=1e-12
    )
    by_class = _model(jit)
    by_class.fit(tp.data.Dataset.from_tensor_slices((X, Y)).batch(5), class_weight=CLASS_WEIGHT, epochs=1, verbose=0)
    reference = _model(jit)
    reference.fit(X, Y, class_weight=CLASS_WEIGHT, batch_size=5, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(by_class.get_weights()[0], reference.get_weights()[0], rtol=1e-12)


def test_validation_data_with_sample_weights_and_validation_split():
    model = _model()
    history = model.fit(X, Y, epochs=1, validation_data=(X, Y, W), verbose=0)
    assert history.history["val_loss"][0] == pytest.approx(
        model.evaluate(X, Y, sample_weight=W, verbose=0, return_dict=True)["loss"], rel=1e-12
    )
    # validation_split holds out the last rows of x, y and sample_weight; class weights stay on training rows
    history = model.fit(X, Y, sample_weight=W, epochs=1, validation_split=0.25, verbose=0)
    held = slice(15, None)
    assert history.history["val_loss"][0] == pytest.approx(
        model.evaluate(X[held], Y[held], sample_weight=W[held], verbose=0, return_dict=True)["loss"], rel=1e-12
    )


def test_weighted_metrics_see_the_weights_and_plain_metrics_do_not():
    model = _model(
        metrics=["accuracy"],
        weighted_metrics=["accuracy", "sparse_categorical_accuracy"],
        loss="sparse_categorical_crossentropy",
    )
    probabilities = model.predict(X)
    correct = (probabilities.argmax(1) == Y).astype(float)
    logs = model.evaluate(X, Y, sample_weight=W, batch_size=7, verbose=0, return_dict=True)
    assert list(logs) == ["loss", "accuracy", "weighted_accuracy", "sparse_categorical_accuracy"]
    assert logs["accuracy"] == pytest.approx(correct.mean())
    assert (
        logs["weighted_accuracy"]
        == logs["sparse_categorical_accuracy"]
        == pytest.approx(np.average(correct, weights=W))
    )
    class_logs = model.evaluate(X, Y, class_weight=CLASS_WEIGHT, verbose=0, return_dict=True)
    weights = np.array([CLASS_WEIGHT[c] for c in Y])
    assert class_logs["weighted_accuracy"] == pytest.approx(np.average(correct, weights=weights))


def test_train_on_batch_takes_weights():
    weighted, plain = _model(), _model()
    loss = weighted.train_on_batch(X, Y, sample_weight=np.zeros(N))
    assert loss == 0.0 and weighted.get_weights()[0] == pytest.approx(plain.get_weights()[0])
    before = plain.test_on_batch(X, Y, sample_weight=W)
    assert before == pytest.approx(plain.evaluate(X, Y, sample_weight=W, verbose=0, return_dict=True)["loss"])
    assert weighted.train_on_batch(X, Y, class_weight={0: 0.0, 1: 0.0, 2: 0.0}) == 0.0
    with_metrics = _model(metrics=["accuracy"])
    loss, accuracy = with_metrics.evaluate(X, Y, sample_weight=W, return_dict=False, verbose=0)
    assert [loss, accuracy] == with_metrics.test_on_batch(X, Y, sample_weight=W)
    assert {"loss": loss, "accuracy": accuracy} == with_metrics.test_on_batch(X, Y, sample_weight=W, return_dict=True)


def test_weight_errors_name_the_argument():
    model = _model()
    with pytest.raises(ValueError, match="fit: give class_weight or sample_weight, not both"):
        model.fit(X, Y, sample_weight=W, class_weight=CLASS_WEIGHT, verbose=0)
    with pytest.raises(ValueError, match="fit: x has 20 samples but sample_weight has 19"):
        model.fit(X, Y, sample_weight=W[:19], verbose=0)
    with pytest.raises(ValueError, match="fit: sample_weight must hold numbers"):
        model.fit(X, Y, sample_weight=np.array(["a"] * N), verbose=0)
    with pytest.raises(ValueError, match="fit: class_weight must be a dict"):
        model.fit(X, Y, class_weight=[1.0, 2.0, 3.0], verbose=0)
    with pytest.raises(ValueError, match="class_weight keys must be integer class ids"):
        model.fit(X, Y, class_weight={"cat": 1.0}, verbose=0)
    ds = tp.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    with pytest.raises(ValueError, match="fit: pass sample weights inside the dataset"):
        model.fit(ds, sample_weight=W, verbose=0)
    with pytest.raises(ValueError, match="not both"):
        model.fit(tp.data.Dataset.from_tensor_slices((X, Y, W)).batch(4), class_weight=CLASS_WEIGHT, verbose=0)
    with pytest.raises(ValueError, match="sample_weight cannot be combined with distribute="):
        model.fit(X, Y, sample_weight=W, verbose=0, distribute=object())
    with pytest.raises(ValueError, match="sample_weight shape"):
        model.evaluate(X, Y, sample_weight=np.ones((N, 4)), verbose=0)
