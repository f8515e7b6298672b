"""The one record, shared by every kernel module that calls BLAS, of how many kernel calls
run with OpenBLAS pinned to one thread and of the thread count to give back when the last
of them ends (see _blas.pxi). Its fields change only with the GIL held.

>>> len(SCOPE), ADDRESS == ctypes.addressof(SCOPE)
(2, True)
"""

from __future__ import annotations

import ctypes

SCOPE = (ctypes.c_int * 2)()  # [kernel calls running, OpenBLAS thread count to restore]
ADDRESS = ctypes.addressof(SCOPE)
