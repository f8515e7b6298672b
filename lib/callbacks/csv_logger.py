"""CSVLogger: writes each epoch's logs as a row of a CSV file."""

from __future__ import annotations

import csv
import io
import os
import warnings

from tapeflow.callbacks.callback import Callback


class CSVLogger(Callback):
    """Writes one CSV row per epoch: `epoch` then the logged values, columns from the first epoch's keys.

    Each row goes out in one write and is flushed at once, so the file is complete after
    every epoch. With `append`, rows are added to an existing file under its own header.

    >>> CSVLogger("training.log", separator=";").separator
    ';'
    """

    def __init__(self, filename, separator: str = ",", append: bool = False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.separator = separator
        self.append = append
        self.keys: list[str] | None = None
        self._file = None

    def on_train_begin(self, logs=None):
        self.keys = None
        if self.append and os.path.exists(self.filename) and os.path.getsize(self.filename) > 0:
            with open(self.filename, newline="") as f:
                header = next(csv.reader(f, delimiter=self.separator), None)
            if header and header[0] == "epoch":
                self.keys = header[1:]
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # closed in on_train_end
        if self.append and self.keys is None and self._file.tell() > 0:
            warnings.warn(
                f"CSVLogger: {self.filename} has no 'epoch' header; appending a new one", RuntimeWarning, stacklevel=2
            )

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        rows = []
        if self.keys is None:
            self.keys = sorted(logs)
            rows.append(["epoch", *self.keys])
        rows.append([epoch, *(_csv_value(logs[key]) if key in logs else "NA" for key in self.keys)])
        line = io.StringIO()
        csv.writer(line, delimiter=self.separator, lineterminator="\n").writerows(rows)
        self._file.write(line.getvalue())
        self._file.flush()

    def on_train_end(self, logs=None):
        if self._file is not None:
            self._file.close()
            self._file = None


def _csv_value(value):
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)
