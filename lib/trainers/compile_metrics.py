"""The compiled metrics of a model, output by output: `metrics` see no sample weights,
`weighted_metrics` see them (class weights included), and each has its name in the logs
as Keras 3 gives it: the metric's name for a model with one output, "<output>_<name>"
with several; a clash gets "_1", "_2", ... and a weighted metric that clashes with an
unweighted one is named "weighted_<name>". A metric given by a string is named by it.

>>> metrics = OutputMetrics(["accuracy"], ["accuracy"], ["out"], [None])
>>> metrics.log_names
['accuracy', 'weighted_accuracy']
>>> metrics.update([[1, 0]], [[[0.2, 0.8], [0.3, 0.7]]], [[1.0, 3.0]])
>>> metrics.results()
{'accuracy': 0.5, 'weighted_accuracy': 0.25}
"""

from __future__ import annotations

from tapeflow import metrics as metrics_module
from tapeflow.trainers.compile_losses import per_output


def _as_list(entry) -> list:
    if entry is None:
        return []
    return list(entry) if isinstance(entry, list | tuple) else [entry]


class OutputMetrics:
    """The metrics of `compile(metrics=..., weighted_metrics=...)` for outputs `output_names`.

    Args:
        metrics: for one output, a list of metrics (Metric objects, Keras names or functions);
            for several, a list with one entry (a metric or a list of them) per output, or a
            dict by output name.
        weighted_metrics: the same form, for metrics that take the sample weights.
        output_names: the outputs' names, in the order the model returns them.
        losses: each output's Loss (or None), which lets "accuracy" pick its kind.
    """

    def __init__(self, metrics, weighted_metrics, output_names: list[str], losses: list, where: str = "compile"):
        self.output_names = list(output_names)
        self.entries: list[tuple[int, metrics_module.Metric, bool]] = []  # (output, metric, weighted)
        for spec, weighted, argument in ((metrics, False, "metrics"), (weighted_metrics, True, "weighted_metrics")):
            if spec is None:
                continue
            if not isinstance(spec, list | tuple | dict):
                raise ValueError(
                    f"{where}: {argument} must be a list (or a dict by output name), got {spec!r}; "
                    f"write {argument}=[{spec!r}]"
                )
            groups = [spec] if len(self.output_names) == 1 and not isinstance(spec, dict) else None
            groups = groups or per_output(spec, self.output_names, argument, where)
            for output, group in enumerate(groups):
                for entry in _as_list(group):
                    metric = metrics_module.get(entry, loss=losses[output])
                    if isinstance(entry, str):
                        metric.name = entry  # as Keras 3 names it: "mae" logs as "mae"
                    self.entries.append((output, metric, weighted))
        self.log_names = self._names()

    @property
    def metrics(self) -> list[metrics_module.Metric]:
        return [metric for _, metric, _ in self.entries]

    def _names(self) -> list[str]:
        prefix = (lambda i: f"{self.output_names[i]}_") if len(self.output_names) > 1 else (lambda i: "")
        taken: dict[str, int] = {}
        names = []
        for output, metric, weighted in self.entries:
            name = prefix(output) + metric.name
            if name in taken and weighted:
                name = prefix(output) + "weighted_" + metric.name
            if name in taken:
                taken[name] += 1
                name = f"{name}_{taken[name] - 1}"
            taken.setdefault(name, 1)
            names.append(name)
        return names

    def update(self, y_true: list, y_pred: list, sample_weight: list | None = None) -> None:
        """Add one batch: per-output targets, predictions and sample weights (None for none)."""
        for output, metric, weighted in self.entries:
            if y_true[output] is None:
                continue
            weights = sample_weight[output] if weighted and sample_weight is not None else None
            metric.update_state(y_true[output], y_pred[output], sample_weight=weights)

    def results(self) -> dict[str, float]:
        return {name: metric.result() for name, (_, metric, _) in zip(self.log_names, self.entries, strict=True)}

    def reset(self) -> None:
        for metric in self.metrics:
            metric.reset_state()
