"""How a file's weights lined up with a model's, and the error a strict load raises.

Loading first matches every stored weight with one of the model's, then changes the
model only if the match is complete (or the caller asked for what matches): the report
names each weight that is missing, unexpected or of another shape, all at once.

>>> report = LoadReport(matched=("d/kernel",), missing=("d/bias",))
>>> report.ok, report.problems()
(False, ['missing from the file: d/bias'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class ShapeMismatch(NamedTuple):
    name: str
    file_shape: tuple
    model_shape: tuple


@dataclass(frozen=True)
class LoadReport:
    """How a file's weights lined up with a model's, name by name.

    >>> LoadReport(matched=("d/kernel",), missing=("d/bias",))
    LoadReport(matched=1, missing=['d/bias'])
    """

    matched: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # in the model, not in the file
    unexpected: tuple[str, ...] = ()  # in the file, not in the model
    mismatched: tuple[ShapeMismatch, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def problems(self) -> list[str]:
        """One line per kind of problem, naming every offending weight."""
        lines = []
        if self.missing:
            lines.append(f"missing from the file: {', '.join(self.missing)}")
        if self.unexpected:
            lines.append(f"not in the model: {', '.join(self.unexpected)}")
        if self.mismatched:
            shapes = (f"{m.name} (file {m.file_shape}, model {m.model_shape})" for m in self.mismatched)
            lines.append(f"shape mismatch: {', '.join(shapes)}")
        return lines

    def __repr__(self) -> str:
        parts = [f"matched={len(self.matched)}"]
        if self.missing:
            parts.append(f"missing={list(self.missing)}")
        if self.unexpected:
            parts.append(f"unexpected={list(self.unexpected)}")
        if self.mismatched:
            parts.append(
                f"mismatched={[f'{m.name}: file {m.file_shape}, model {m.model_shape}' for m in self.mismatched]}"
            )
        return f"LoadReport({', '.join(parts)})"


class WeightsMismatchError(ValueError):
    """A strict load found weights that do not line up; `report` says which."""

    def __init__(self, message: str, report: LoadReport):
        super().__init__(message)
        self.report = report


def mismatch_error(where: str, report: LoadReport, matched_by: str, advice: str) -> WeightsMismatchError:
    """The error of a strict load that found `report`'s problems; `matched_by` says how
    weights were paired and `advice` what the caller can do.

    >>> err = mismatch_error("load", LoadReport(missing=("d/bias",)), "names", "Pass strict=False.")
    >>> print(err)
    load: the file does not match the model, so no weight was changed:
      missing from the file: d/bias
    Weights are matched by their names. Pass strict=False.
    """
    lines = "\n  ".join(report.problems())
    return WeightsMismatchError(
        f"{where}: the file does not match the model, so no weight was changed:\n  {lines}\n"
        f"Weights are matched by their {matched_by}. {advice}",
        report,
    )
