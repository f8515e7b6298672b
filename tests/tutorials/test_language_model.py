"""tutorials/language_model/train.py: the script runs end to end, the sampled-softmax
variant learns, and the model trains as PyTorch's equivalent does from the same weights,
both carrying the LSTM states from batch to batch along the streams."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tapeflow as tp

SCRIPT = Path(__file__).resolve().parents[2] / "tutorials" / "language_model" / "train.py"


def _script():
    spec = importlib.util.spec_from_file_location("language_model_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lm = _script()


@pytest.fixture(scope="module")
def data():
    """A short slice of the excerpt, as the script cuts it: (vocabulary, train, validation, test)."""
    pytest.importorskip("gensim")
    vocabulary, *splits = lm.load_splits(2000, max_words=40_000)
    return vocabulary, *(lm.windows(ids, 20, 20) for ids in splits)


def _args(*extra):
    return lm.parse_args(["--seed", "0", *extra])


def test_the_script_runs_end_to_end(tmp_path, capsys):
    pytest.importorskip("gensim")
    budget = ["--epochs", "1", "--max-steps", "2", "--max-words", "12000", "--vocabulary", "500"]
    assert lm.main([*budget, "--num-sampled", "50", "--sample-words", "4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for line in ("full softmax epoch 1:", "sampled softmax epoch 1:", "sampled text: the ", "wall time:"):
        assert line in out
    assert (tmp_path / "language_model_perplexity.png").stat().st_size > 0


def test_windows_follow_the_ptb_reader():
    x, y = lm.windows(np.arange(14), batch_size=2, num_steps=3)
    # rows of 7 words: batch i holds words [3i, 3i+3) of each row, targets one word ahead
    assert x.tolist() == [[0, 1, 2], [7, 8, 9], [3, 4, 5], [10, 11, 12]]
    assert (y == x + 1).all()
    with pytest.raises(ValueError, match="too few"):
        lm.windows(np.arange(10), batch_size=5, num_steps=3)


def test_the_vocabulary_ranks_unk_by_its_count():
    words = "a a a a a a b b b c c d e f".split()
    assert lm.build_vocabulary(words, 3) == ["a", lm.UNK, "b"]  # c, d, e, f: 5 words under <unk>
    assert lm.encode(["b", "zzz"], ["a", lm.UNK, "b"]).tolist() == [2, 1]


def test_sampled_softmax_training_lowers_the_full_softmax_perplexity(data):
    vocabulary, (x, y), (x_valid, y_valid), _ = data
    x_valid, y_valid = x_valid[:100], y_valid[:100]
    args = _args()
    tp.random.seed(0)
    model = lm.make_model(len(vocabulary), 64, args)
    before = lm.evaluate_perplexity(model, x_valid, y_valid, 20, 20)
    model.fit(x[:400], y[:400], batch_size=20, epochs=1, shuffle=False, verbose=0, callbacks=[lm.ResetStates()])
    after = lm.evaluate_perplexity(model, x_valid, y_valid, 20, 20)
    print(f"sampled softmax, 20 steps: validation perplexity {before:.1f} -> {after:.1f}")
    assert before > 0.9 * len(vocabulary)  # the untrained model is near uniform
    assert after < 0.5 * before


def _torch_model(model, torch):
    """PyTorch's Embedding + 2-layer LSTM + Linear holding the tapeflow model's weights."""

    class Net(torch.nn.Module):
        def __init__(self, vocabulary: int, units: int, layers: int):
            super().__init__()
            self.embedding = torch.nn.Embedding(vocabulary, units)
            self.lstm = torch.nn.LSTM(units, units, num_layers=layers, batch_first=True)
            self.softmax = torch.nn.Linear(units, vocabulary)

        def forward(self, ids, state=None):
            outputs, state = self.lstm(self.embedding(ids), state)
            return self.softmax(outputs), state

    net = Net(model.vocabulary_size, model.embedding.output_dim, len(model.lstms)).double()
    as_torch = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    with torch.no_grad():
        net.embedding.weight.copy_(as_torch(model.embedding.embeddings.numpy()))
        for i, layer in enumerate(model.lstms):
            kernel, recurrent, bias = (w.numpy() for w in layer.weights)
            # Keras and PyTorch order the gates alike (input, forget, cell, output)
            getattr(net.lstm, f"weight_ih_l{i}").copy_(as_torch(kernel.T))
            getattr(net.lstm, f"weight_hh_l{i}").copy_(as_torch(recurrent.T))
            getattr(net.lstm, f"bias_ih_l{i}").copy_(as_torch(bias))
            # one bias per gate, as Keras has: PyTorch's second one stays zero
            getattr(net.lstm, f"bias_hh_l{i}").zero_()
            getattr(net.lstm, f"bias_hh_l{i}").requires_grad_(False)
        net.softmax.weight.copy_(as_torch(model.softmax.kernel.numpy()))
        net.softmax.bias.copy_(as_torch(model.softmax.bias.numpy()))
    return net


def _torch_perplexity(net, x, y, batch: int, torch) -> float:
    """The perplexity over the batches of (x, y), the states carried from batch to batch from zero."""
    losses, state = [], None
    with torch.no_grad():
        for i in range(len(x) // batch):
            logits, state = net(torch.from_numpy(x[i * batch : (i + 1) * batch]), state)
            targets = torch.from_numpy(y[i * batch : (i + 1) * batch]).reshape(-1)
            losses.append(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets).item())
    return float(np.exp(np.mean(losses)))


def test_predictions_carry_the_states_along_the_streams_as_pytorch_does(data):
    torch = pytest.importorskip("torch")
    vocabulary, _, (x_valid, _), _ = data
    tp.random.seed(0)
    model = lm.make_model(len(vocabulary), None, _args())
    model(x_valid[:20], training=False)  # build for streams of 20
    net = _torch_model(model, torch)
    model.reset_states()
    ours = model.predict(x_valid[:60], batch_size=20, verbose=0)
    with torch.no_grad():
        carried, state = [], None
        for i in range(3):
            logits, state = net(torch.from_numpy(x_valid[20 * i : 20 * (i + 1)]), state)
            carried.append(logits.numpy())
        from_zero = net(torch.from_numpy(x_valid[20:40]))[0].numpy()
    np.testing.assert_allclose(ours, np.concatenate(carried), atol=2e-6)
    assert np.abs(from_zero - carried[1]).max() > 100 * 2e-6  # the states matter at this precision


@pytest.mark.slow
def test_the_model_trains_as_pytorch_does_from_the_same_weights(data):
    torch = pytest.importorskip("torch")
    vocabulary, (x, y), (x_valid, y_valid), _ = data
    x_valid, y_valid = x_valid[:100], y_valid[:100]
    args = _args()
    steps, batch = 20, 20
    tp.random.seed(0)
    model = lm.make_model(len(vocabulary), None, args)
    model(x[:batch], training=False)  # build, then copy the initial weights
    net = _torch_model(model, torch)

    assert all(lstm.stateful for lstm in model.lstms)
    fit = {"batch_size": batch, "epochs": 1, "shuffle": False, "verbose": 0, "callbacks": [lm.ResetStates()]}
    model.fit(x[: steps * batch], y[: steps * batch], **fit)
    ours = lm.evaluate_perplexity(model, x_valid, y_valid, batch, 20)

    parameters = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(parameters, lr=args.learning_rate)
    state = None  # each batch continues the streams of the previous one; gradients stop at its start
    for i in range(steps):
        xb, yb = (torch.from_numpy(a[i * batch : (i + 1) * batch]) for a in (x, y))
        logits, state = net(xb, state)
        state = tuple(s.detach() for s in state)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1)) * 20
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, args.max_grad_norm)
        optimizer.step()
    theirs = _torch_perplexity(net, x_valid, y_valid, batch, torch)
    print(f"validation perplexity after {steps} steps: tapeflow {ours:.2f}, PyTorch {theirs:.2f}")
    assert ours < 0.5 * len(vocabulary)  # it learned
    assert abs(ours - theirs) <= 0.05 * theirs
