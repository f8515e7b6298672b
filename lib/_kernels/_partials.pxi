# Threads that sum into partials of their own (a filter gradient) leave `parts` arrays of `size`
# numbers one after another; their sum is added into the first thread's result.

cdef inline void _add_partials(floating* total, const floating* partials, Py_ssize_t parts,
                               Py_ssize_t size) noexcept nogil:
    """total[i] += partials[p * size + i] for every part p in order, i < size."""
    cdef Py_ssize_t p, i
    cdef const floating* part
    for p in range(parts):
        part = partials + p * size
        for i in range(size):
            total[i] += part[i]
