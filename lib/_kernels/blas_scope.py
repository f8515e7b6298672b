"""The one record, shared by every kernel module that calls BLAS, of how many of their kernel
calls are running (see _blas.pxi). It changes only with the GIL held.

>>> len(SCOPE), ADDRESS == ctypes.addressof(SCOPE)
(1, True)
"""

from __future__ import annotations

import ctypes

SCOPE = (ctypes.c_int * 1)()  # [kernel calls running]
ADDRESS = ctypes.addressof(SCOPE)
