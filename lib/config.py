"""Global switches: `tp.config.run_functions_eagerly(True)` runs every
`tp.function` as plain Python, for debugging.

>>> import tapeflow as tp
>>> tp.config.run_functions_eagerly(False); tp.config.functions_run_eagerly()
False
"""

from tapeflow.graph.function import functions_run_eagerly, run_functions_eagerly

__all__ = ["functions_run_eagerly", "run_functions_eagerly"]
