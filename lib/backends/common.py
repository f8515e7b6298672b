"""Value checks shared by op references and backend kernels: labels and indices in range.

On the host a bad value raises at once. On an accelerator reading a value back stalls the
device, so a checked op computes a tiny flag there instead (whether a value is bad, and the
first bad one), goes on with safe values (out-of-range ids clipped into range, in-place
writes made all-or-nothing), and records the flag; `check_pending` reads every recorded
flag in one transfer and raises the error the host would have raised. A graph run and an
eager train step call it once, before their first write to a variable (or at their end);
an epoch of `fit` (and a pass of `evaluate`) holds its steps' checks and reads them once, at
its end (`deferring_checks`), so a bad id there is reported at the end of its epoch.

>>> import numpy as np
>>> check_index_range("gather", np.array([0, -3]), 3, 0).tolist()
[0, -3]
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np

# Pending checks beyond this many are read at once: memory stays bounded where nothing reads.
MAX_PENDING = 1024


class IndexOutOfRange(IndexError, ValueError):
    """An index outside a tensor's bounds (both an IndexError and a ValueError)."""


class _Pending(threading.local):
    """This thread's recorded checks, each (flag: a device array [any bad, first bad value],
    the error it makes of the bad value, where it was recorded (see `recording_at`)): `flags`
    are read at the end of the step, `held` where `deferring_checks` reads them."""

    def __init__(self):
        self.flags: list[tuple] = []
        self.held: list[tuple] = []
        self.deferring = False
        self.place = None


PENDING = _Pending()


def _on_host(array) -> bool:
    return isinstance(array, np.ndarray | np.generic) or not hasattr(array, "get")


# NumPy's ufuncs do not hand their `at` method to other array types (CuPy's arrays answer
# NotImplemented), so `ufunc_at` sends a device array's to the backend that holds it.
_DEVICE_UFUNC_AT: list[Callable] = []


def all_but_last(axes, ndim: int) -> bool:
    """Whether `axes` (a tuple, negative axes allowed) are every axis of an `ndim`-dimensional
    array but its last: the axes of a bias's gradient.

    >>> all_but_last((0, -3, 2), 4), all_but_last((0,), 3), all_but_last(None, 2)
    (True, False, False)
    """
    return isinstance(axes, tuple) and ndim >= 1 and sorted(a % ndim for a in axes) == list(range(ndim - 1))


def register_ufunc_at(run: Callable) -> None:
    """Make `run(name, out, index, values)` do ufunc.at for the arrays no other backend holds."""
    if run not in _DEVICE_UFUNC_AT:
        _DEVICE_UFUNC_AT.append(run)


def ufunc_at(ufunc, out, index, values) -> None:
    """`ufunc.at(out, index, values)` in the array module that holds `out`.

    >>> out = np.zeros(3)
    >>> ufunc_at(np.add, out, np.array([0, 0, 2]), 1.0)
    >>> out.tolist()
    [2.0, 0.0, 1.0]
    """
    if _on_host(out):
        ufunc.at(out, index, values)
        return
    if not _DEVICE_UFUNC_AT:
        raise TypeError(f"{ufunc.__name__}.at: no backend holds arrays of type {type(out).__name__}")
    _DEVICE_UFUNC_AT[-1](ufunc.__name__, out, index, values)


# An accelerator's backend may check a range in one fused step of its own: `run(values, low,
# high)` gives (values clipped into range, the flag `check_pending` reads, whether all were in
# range) for its arrays, or None where it cannot.
_DEVICE_RANGE_CHECK: list[Callable] = []


def register_range_check(run: Callable) -> None:
    """Make `run(values, low, high)` check device values in range (see `check_in_range`)."""
    if run not in _DEVICE_RANGE_CHECK:
        _DEVICE_RANGE_CHECK.append(run)


def check_in_range(values, low: int, high: int, error: Callable[[int], Exception]) -> tuple:
    """(integer `values` safe to index with, whether all lay in [low, high)). On the host a
    value out of range raises `error(the first such value)` at once, and the flag is None; on
    an accelerator the check is recorded (`check_pending` raises that error later), the values
    come back clipped into range and the flag is a 0-d boolean device array, for a write that
    must happen whole or not at all (`where(flag, new, old)`).

    >>> check_in_range(np.array([0, 4]), 0, 3, lambda bad: ValueError(f"id {bad}"))
    Traceback (most recent call last):
    ValueError: id 4
    """
    if _on_host(values):
        if values.size and (values.min() < low or values.max() >= high):
            raise error(values[(values < low) | (values >= high)].flat[0])
        return values, None
    for run in _DEVICE_RANGE_CHECK if high > low else ():
        fused = run(values, low, high)
        if fused is not None:
            safe, flag, ok = fused
            _hold(flag, error, certain=False)
            return safe, ok
    any_bad = _record((values < low) | (values >= high), values, error, certain=high <= low)
    return np.clip(values, low, max(high - 1, low)), ~any_bad


def check_distinct(name: str, rows):
    """Row numbers (in range, none negative) must be distinct: an update of a repeated row would
    depend on the order of the writes. On the host a repeat raises at once (and None comes
    back); on an accelerator the check is recorded, as `check_in_range`'s are, and its 0-d
    boolean flag (no row repeats) comes back, for a write that must happen whole or not at all.

    >>> check_distinct("op", np.array([2, 0, 2]))
    Traceback (most recent call last):
    ValueError: op: row 2 repeats; sum the rows of a repeated index first (coalesce)
    """

    def error(bad):
        return ValueError(f"{name}: row {bad} repeats; sum the rows of a repeated index first (coalesce)")

    ordered = rows.reshape(-1)
    if ordered.shape[0] < 2:
        return None
    ordered = ordered[ordered.argsort()]
    repeated = ordered[1:] == ordered[:-1]
    if _on_host(rows):
        if repeated.any():
            raise error(ordered[1:][repeated][0])
        return None
    return ~_record(repeated, ordered[1:], error, certain=False)


def check_labels(name: str, labels, num_classes: int):
    """Class labels must lie in [0, num_classes); returns labels safe to index with (see
    `check_in_range`)."""
    return check_in_range(labels, 0, num_classes, functools.partial(_label_error, name, num_classes))[0]


def check_index_range(name: str, idx, size: int, axis: int):
    """Indices must lie in [-size, size); returns indices safe to index with (see
    `check_in_range`)."""
    return checked_index_range(name, idx, size, axis)[0]


def checked_index_range(name: str, idx, size: int, axis: int) -> tuple:
    """(indices safe to index with, whether all were in range): `check_in_range` for
    indices of an axis of `size`."""
    return check_in_range(idx, -size, size, functools.partial(_index_error, name, size, axis))


def _label_error(name: str, num_classes: int, bad) -> ValueError:
    return ValueError(f"{name}: label {bad} is out of range [0, {num_classes})")


def _index_error(name: str, size: int, axis: int, bad) -> IndexOutOfRange:
    return IndexOutOfRange(f"{name}: index {bad} is out of range for axis {axis} of size {size}")


def _record(bad, values, error: Callable[[int], Exception], certain: bool):
    """Record the device check `bad` (a boolean mask over `values`); returns its 0-d `any`.
    A check that cannot pass (`certain`: nothing is in range) is read at once."""
    flat = bad.reshape(-1)
    if flat.shape[0] == 0:
        return flat.any()
    any_bad = flat.any()
    first = values.reshape(-1)[flat.argmax()]
    _hold(np.stack([any_bad.astype(np.int64), first.astype(np.int64)]), error, certain)
    return any_bad


def _hold(flag, error: Callable[[int], Exception], certain: bool) -> None:
    """Record `flag` (a device array [any bad, first bad value]) until the checks are read."""
    (PENDING.held if PENDING.deferring else PENDING.flags).append((flag, error, PENDING.place))
    if certain or len(PENDING.flags) + len(PENDING.held) >= MAX_PENDING:
        check_pending()


class recording_at:
    """Context in which the checks recorded are raised as `place(error)`, from the error
    the host would raise (a graph runs each node inside one, so that a failed check names
    its node, as a failure on the host does).

    >>> with recording_at(RuntimeError):
    ...     PENDING.place
    <class 'RuntimeError'>
    """

    __slots__ = ("_place", "_saved")

    def __init__(self, place):
        self._place = place

    def __enter__(self):
        self._saved = PENDING.place
        PENDING.place = self._place

    def __exit__(self, *exc) -> None:
        PENDING.place = self._saved


def has_pending() -> bool:
    """Whether checks recorded on an accelerator wait to be read.

    >>> has_pending()
    False
    """
    return bool(PENDING.flags or PENDING.held)


class deferring_checks:
    """Context in which the end of a step reads no checks: they are held and read once as
    it exits (an epoch of `fit` reads its checks with its logs, not at every step); an
    error leaving the block drops them.

    >>> with deferring_checks():
    ...     PENDING.deferring
    True
    """

    __slots__ = ("_saved",)

    def __enter__(self):
        self._saved = PENDING.deferring
        PENDING.deferring = True

    def __exit__(self, exc_type, exc, traceback) -> None:
        PENDING.deferring = self._saved
        if self._saved:
            return
        if exc_type is not None:
            PENDING.held = []
            return
        check_pending()


def check_pending(deferrable: bool = False) -> None:
    """Read the checks recorded on an accelerator, in one transfer per device, and raise the
    error of the first that failed (in the order the ops ran); what was read is no longer
    pending. A `deferrable` read (a step's end) leaves the checks `deferring_checks` holds.

    >>> check_pending()  # nothing recorded on the host
    """
    pending = PENDING
    entries = pending.flags
    if not deferrable or not pending.deferring:
        entries, pending.held = pending.held + entries, []
    pending.flags = []
    if not entries:
        return
    by_device: dict = {}
    for i, (flag, _, _) in enumerate(entries):
        by_device.setdefault(str(getattr(flag, "device", None)), []).append(i)
    rows: list = [None] * len(entries)
    for positions in by_device.values():
        host = np.stack([entries[i][0] for i in positions]).get()  # the one read for this device
        for i, row in zip(positions, host, strict=True):
            rows[i] = row
    for row, (_, error, place) in zip(rows, entries, strict=True):
        if row[0]:
            exc = error(int(row[1]))
            if place is None:
                raise exc
            raise place(exc) from exc
