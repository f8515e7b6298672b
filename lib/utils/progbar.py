"""Keras 3's `Progbar`: a progress bar with running averages of the values it is given."""

from __future__ import annotations

import math
import sys
import time

import numpy as np

_BOLD, _GREEN, _GREY, _RESET = "\x1b[1m", "\x1b[32m", "\x1b[37m", "\x1b[0m"


def _duration(seconds: float) -> str:
    if seconds > 3600:
        return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"
    if seconds > 60:
        return f"{int(seconds // 60)}:{int(seconds % 60):02d}"
    return f"{int(seconds)}s"


def _per_unit(seconds: float, unit: str) -> str:
    if seconds >= 1 or seconds == 0:
        return f" {seconds:.0f}s/{unit}"
    if seconds >= 1e-3:
        return f" {seconds * 1e3:.0f}ms/{unit}"
    return f" {seconds * 1e6:.0f}us/{unit}"


class Progbar:
    """A progress bar printed to stdout, redrawn in place (`verbose=1`) or as one line at
    the end (`verbose=2`), with each named value averaged over the steps it covered
    (names in `stateful_metrics` are shown as given).

    >>> bar = Progbar(2, verbose=0)
    >>> bar.update(1, [("loss", 1.0)]); bar.update(2, [("loss", 3.0)], finalize=False)
    >>> bar._values["loss"]
    [4.0, 2]
    """

    def __init__(
        self,
        target,
        width: int = 20,
        verbose: int = 1,
        interval: float = 0.05,
        stateful_metrics=None,
        stateless_metrics=None,
        unit_name: str = "step",
    ):
        if stateful_metrics is not None and stateless_metrics is not None:
            raise ValueError("Progbar: give stateful_metrics or stateless_metrics, not both")
        self.target, self.width, self.verbose = target, width, verbose
        self.interval, self.unit_name = interval, unit_name
        self.stateful_metrics = set(stateful_metrics or ()) if stateless_metrics is None else None
        self.stateless_metrics = set(stateless_metrics) if stateless_metrics is not None else None
        self._values: dict = {}
        self._values_order: list = []
        self._seen_so_far = 0
        self._start = time.time()
        self._last_update = 0.0
        self._time_after_first_step = None
        self._prev_total_width = 0

    def _is_averaged(self, name) -> bool:
        if self.stateful_metrics is not None:
            return name not in self.stateful_metrics
        return name in self.stateless_metrics

    def update(self, current, values=None, finalize=None) -> None:
        """Show progress `current` with `values`, a list of (name, value) pairs."""
        if finalize is None:
            finalize = self.target is not None and current >= self.target
        for name, value in values or []:
            if name not in self._values_order:
                self._values_order.append(name)
            if not self._is_averaged(name) or finalize:
                self._values[name] = [value, 1]
            else:
                steps = max(current - self._seen_so_far, 1)
                total, count = self._values.get(name, [0, 0])
                self._values[name] = [total + value * steps, count + steps]
        self._seen_so_far = current
        now = time.time()
        per_unit = self._step_time(current, now)
        if self.verbose == 1:
            if now - self._last_update < self.interval and not finalize:
                return
            self._draw(current, now, per_unit, finalize)
        elif self.verbose == 2 and finalize and self.target:
            digits = int(math.log10(self.target)) + 1
            line = (
                f"{current:{digits}d}/{self.target} - {now - self._start:.0f}s -{_per_unit(per_unit, self.unit_name)}"
            )
            line += "".join(f" - {name}: {self._shown(name, two_sided=False)}" for name in self._values_order)
            self._write(line + "\n")
        self._last_update = now

    def add(self, n, values=None) -> None:
        """Advance by `n` steps."""
        self.update(self._seen_so_far + n, values)

    def _draw(self, current, now, per_unit, finalize) -> None:
        hidden = 0  # the width of the colour codes, which take no room on screen
        if self.target is not None and self.target > 0:
            digits = int(math.log10(self.target)) + 1
            bar = f"{_BOLD}{current:{digits}d}/{self.target}{_RESET} "
            done = int(self.width * current / self.target)
            hidden += 8
            if done > 0:
                bar += f"{_GREEN}{'━' * done}{_RESET}"
                hidden += 9
            bar += f"{_GREY}{'━' * (self.width - done)}{_RESET}"
            hidden += 9
        else:
            bar = f"{current:7d}/Unknown"
        if self.target is not None and self.target > 0 and not finalize:
            info = f" {_BOLD}{_duration(per_unit * (self.target - current))}{_RESET}"
        else:
            info = f" {_BOLD}{now - self._start:.0f}s{_RESET}"
        hidden += 8
        info += _per_unit(per_unit, self.unit_name)
        info += "".join(f" - {name}: {self._shown(name, two_sided=True)}" for name in self._values_order)
        width = len(bar) + len(info) - hidden
        padding = " " * max(self._prev_total_width - width, 0)
        self._write("\b" * self._prev_total_width + "\r" + bar + info + padding + ("\n" if finalize else ""))
        self._prev_total_width = width

    def _shown(self, name, two_sided: bool) -> str:
        entry = self._values[name]
        if not isinstance(entry, list):
            return str(entry)
        total, count = entry
        mean = (total if isinstance(total, float) else np.mean(total)) / max(1, count)
        small = abs(mean) <= 1e-3 if two_sided else mean <= 1e-3
        return f"{mean:.4e}" if small else f"{mean:.4f}"

    def _step_time(self, current, now) -> float:
        if not current:
            return 0.0
        if self._time_after_first_step is not None and current > 1:
            per_unit = (now - self._time_after_first_step) / (current - 1)
        else:
            per_unit = (now - self._start) / current
        if current == 1:
            self._time_after_first_step = now
        return per_unit

    @staticmethod
    def _write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
