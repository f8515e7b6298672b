"""lib/_kernels/cuda/range_check.cu without a GPU (cuda_host: the kernel compiled for the host,
each CUDA thread a fiber), against the array operations' check in `common.check_in_range`; and
the GPU backend's dispatch to it, the launch replaced by a host run of the same arithmetic."""

import numpy as np
import pytest
from cuda_host import COMPILER, SHIMS, compile_program, run_program
from strict_arrays import HOST_READS, StrictArray, unwrap, use_strict_arrays

from tapeflow._kernels import cuda
from tapeflow.backends import common, cupy_backend

needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (c++, g++ or clang++) on PATH")

MAIN = r"""
template <typename I, typename K>
static void tf_check(std::FILE* in, std::FILE* out, long long n, long long low, long long high, unsigned threads,
                     K kernel) {
    std::vector<I> values = tf_read<I>(in, n), clipped(n);
    std::vector<long long> flag(2, -7);
    bool ok[1] = {false};
    launch(1, threads, threads * sizeof(long long), [&] {
        kernel(values.data(), n, low, high, clipped.data(), flag.data(), ok);
    });
    tf_write(out, clipped);
    tf_write(out, flag);
    long long okay = ok[0];
    std::fwrite(&okay, sizeof okay, 1, out);
}

int main(int argc, char** argv) {
    std::FILE* in = std::fopen(argv[1], "rb");
    std::FILE* out = std::fopen(argv[2], "wb");
    if (!in || !out) return 2;
    std::vector<long long> h = tf_read<long long>(in, 5);
    if (h[0] == 8) tf_check<long long>(in, out, h[1], h[2], h[3], (unsigned)h[4], range_check_i64);
    else tf_check<int>(in, out, h[1], h[2], h[3], (unsigned)h[4], range_check_i32);
    std::fclose(in);
    std::fclose(out);
    return 0;
}
"""
_BINARY: list = []


def _on_host(tmp_path_factory, values: np.ndarray, low: int, high: int, threads: int) -> tuple:
    """(clipped values, flag, ok) as one block of `threads` computes them."""
    if not _BINARY:
        directory = tmp_path_factory.mktemp("range_check")
        source = "\n".join([SHIMS, cuda.SOURCES["range_check"].read_text(), MAIN])
        _BINARY.extend([compile_program(source, directory, "range_check"), directory])
    binary, directory = _BINARY
    header = np.array([values.itemsize, values.size, low, high, threads], np.int64)
    out = run_program(binary, directory, header.tobytes() + values.tobytes())
    clipped = np.frombuffer(out, values.dtype, values.size, 0)
    rest = np.frombuffer(out, np.int64, 3, values.nbytes)
    return clipped, rest[:2], bool(rest[2])


CASES = {
    "in-range": (np.array([0, 3, 9, 5]), 0, 10),
    "one-bad": (np.array([0, 3, 12, 5, 1]), 0, 10),
    "first-of-several": (np.array([4, -1, 2, 11, -5, 3]), 0, 10),
    "negative-indices": (np.array([-3, 2, -4, 3, 7]), -4, 4),
    "long": (np.arange(1000) % 97 - (np.arange(1000) == 613) * 500, 0, 97),
    "one-slot": (np.array([0, 0, 1]), 0, 1),
}


@needs_compiler
@pytest.mark.parametrize("threads", [32, 256])
@pytest.mark.parametrize("itype", [np.int64, np.int32])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_block_finds_the_first_bad_value_and_clips_as_the_array_check(tmp_path_factory, case, itype, threads):
    values, low, high = CASES[case]
    values = values.astype(itype)
    clipped, flag, ok = _on_host(tmp_path_factory, values, low, high, threads)
    bad = (values < low) | (values >= high)
    np.testing.assert_array_equal(clipped, np.clip(values, low, max(high - 1, low)))
    want = [1, int(values[bad][0])] if bad.any() else [0, 0]
    assert flag.tolist() == want and ok == (not bad.any())


def test_on_a_gpu_a_range_check_is_one_launch_recorded_as_one_flag(monkeypatch):
    """The backend's hook on the stand-in's arrays, the RawKernel replaced by its arithmetic:
    one launch of one block, the values clipped, and the flag held until the checks are read,
    which raises the host's error naming the first bad value; nothing read before."""
    launches = []

    def fake_kernel(name, function):
        def run(grid, block, args, shared_mem=0):
            values, n, low, high, clipped, flag, ok = (unwrap(a) for a in args)
            launches.append((name, function, grid, block, shared_mem))
            bad = (values < low) | (values >= high)
            clipped[...] = np.clip(values, low, max(int(high) - 1, int(low)))
            flag[...] = [1, values[bad][0]] if bad.any() else [0, 0]
            ok[...] = not bad.any()

        return run

    use_strict_arrays(cupy_backend, monkeypatch)
    monkeypatch.setattr(cupy_backend, "ON_GPU", True)
    monkeypatch.setattr(cuda, "kernel", fake_kernel)
    error = lambda bad: IndexError(f"id {bad}")  # noqa: E731
    HOST_READS.clear()
    safe, ok = common.check_in_range(StrictArray(np.array([[1, 2], [7, 0]])), 0, 5, error)
    assert launches == [("range_check", "range_check_i64", (1,), (256,), 256 * 8)]
    assert unwrap(safe).tolist() == [[1, 2], [4, 0]] and unwrap(ok).shape == () and not unwrap(ok)
    assert not HOST_READS
    with pytest.raises(IndexError, match="id 7"):
        common.check_pending()
    big = StrictArray(np.zeros(cupy_backend.RANGE_CHECK_LIMIT + 1, np.int64))  # more than a block walks
    safe, ok = common.check_in_range(big, 0, 5, error)
    assert len(launches) == 1 and unwrap(ok)
    common.check_pending()
