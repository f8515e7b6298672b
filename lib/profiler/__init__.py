"""Performance tracing: a timeline of every eager op, every graph node the executor runs,
`fit`'s phases (data, step, callbacks) and the distributed runtime's spans (pushes, pulls,
sends, receives, replica steps, with their bytes), written as a Chrome trace that Perfetto and
chrome://tracing open, summarized per op, or drawn as a PNG.

>>> import tapeflow as tp
>>> with tp.profiler.trace() as profile:
...     _ = tp.matmul(tp.ones((4, 4)), tp.ones((4, 4)))
>>> "matmul" in profile.summary()
True
"""

from tapeflow.profiler.recording import Event, Profile, active, phase, span, start, stop, timed_batches, trace
from tapeflow.profiler.report import chrome_trace, plot_timeline, read_chrome_trace, summary, write_chrome_trace

__all__ = [
    "Event",
    "Profile",
    "active",
    "chrome_trace",
    "phase",
    "plot_timeline",
    "read_chrome_trace",
    "span",
    "start",
    "stop",
    "summary",
    "timed_batches",
    "trace",
    "write_chrome_trace",
]
