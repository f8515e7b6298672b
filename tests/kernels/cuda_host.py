"""CUDA kernels run on the host: a RawKernel source compiled with the system C++ compiler behind
shims, each CUDA thread a fiber (ucontext) with its own stack.

A launch runs in rounds: in each round every block's threads run in turn, in a shuffled order,
each until its next `__syncthreads` or its end, so a block's threads meet at every barrier and
blocks advance side by side (as resident blocks do). The one `shared_bytes` array (64 KiB)
holds the shared memory of the block that runs now; it is saved and restored around each
block's turn, and starts as garbage. Past the launch's size it is poisoned, so that the
address sanitizer sees an access beyond it (to its 8-byte granules). Atomics are plain adds:
one fiber runs at a time. A barrier that some threads of a block never reach (they returned)
fails the launch.
"""

from __future__ import annotations

import shutil
import subprocess

COMPILER = next((shutil.which(c) for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]

SHIMS = r"""
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <ucontext.h>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif
using std::exp; using std::log;
struct tf_dim3 { unsigned x = 0, y = 0, z = 0; };
static tf_dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr size_t tf_shared_limit = 1 << 16;
alignas(16) unsigned char shared_bytes[tf_shared_limit];
template <typename T> static T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
static inline float __int_as_float(int bits) { float x; std::memcpy(&x, &bits, sizeof x); return x; }

struct tf_fiber { ucontext_t context; std::vector<char> stack; bool done = false; };
static ucontext_t tf_scheduler;
static tf_fiber* tf_running = nullptr;
static std::function<void()>* tf_body = nullptr;
static void tf_enter() { (*tf_body)(); tf_running->done = true; }
static void __syncthreads() { swapcontext(&tf_running->context, &tf_scheduler); }

template <typename F> static void launch(unsigned grid, unsigned block, size_t shared, F kernel, unsigned seed = 1) {
    if (shared > tf_shared_limit) { std::fprintf(stderr, "%zu bytes of shared memory asked\n", shared); std::exit(4); }
    ASAN_UNPOISON_MEMORY_REGION(shared_bytes, tf_shared_limit);
    ASAN_POISON_MEMORY_REGION(shared_bytes + shared, tf_shared_limit - shared);
    gridDim.x = grid;
    blockDim.x = block;
    std::function<void()> body = kernel;
    tf_body = &body;
    std::vector<tf_fiber> fibers(grid * block);
    for (tf_fiber& f : fibers) {
        f.stack.resize(1 << 16);
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack.data();
        f.context.uc_stack.ss_size = f.stack.size();
        f.context.uc_link = &tf_scheduler;
        makecontext(&f.context, tf_enter, 0);
    }
    std::vector<std::vector<unsigned char>> saved(grid, std::vector<unsigned char>(shared, 0xA5));
    std::vector<unsigned> order(block);
    std::mt19937 shuffle(seed);
    for (bool busy = true; busy;) {
        busy = false;
        for (unsigned b = 0; b < grid; ++b) {
            std::memcpy(shared_bytes, saved[b].data(), shared);
            for (unsigned t = 0; t < block; ++t) order[t] = t;
            std::shuffle(order.begin(), order.end(), shuffle);
            unsigned finished = 0;
            for (unsigned t : order) {
                tf_fiber& f = fibers[b * block + t];
                if (f.done) { ++finished; continue; }
                blockIdx.x = b;
                threadIdx.x = t;
                tf_running = &f;
                swapcontext(&tf_scheduler, &f.context);
                finished += f.done;
            }
            if (finished != 0 && finished != block) {
                std::fprintf(stderr, "block %u: %u of %u threads returned while the others wait at a barrier\n",
                             b, finished, block);
                std::exit(5);
            }
            busy = busy || finished < block;
            std::memcpy(saved[b].data(), shared_bytes, shared);
        }
    }
}

template <typename T> static std::vector<T> tf_read(std::FILE* f, long long n) {
    std::vector<T> v(n);
    if (n && std::fread(v.data(), sizeof(T), n, f) != (size_t)n) {
        std::fprintf(stderr, "short input\n");
        std::exit(2);
    }
    return v;
}
template <typename T> static void tf_write(std::FILE* f, const std::vector<T>& v) {
    std::fwrite(v.data(), sizeof(T), v.size(), f);
}
"""


def compile_program(text: str, directory, name: str, sanitize: bool = True) -> str:
    """`text` built as an executable in `directory` (with the address and undefined-behaviour
    sanitizers where the compiler has them); returns its path."""
    source, binary = directory / f"{name}.cc", directory / name
    source.write_text(text)
    flags = ["-O1", "-g", "-std=c++17", "-ffp-contract=off", "-fno-fast-math", "-w"]
    if sanitize and sanitizers_work(directory):
        flags += SANITIZE
    done = subprocess.run([COMPILER, *flags, str(source), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, f"host compile failed:\n{done.stderr[-4000:]}"
    return str(binary)


_SANITIZERS: list = []


def sanitizers_work(directory) -> bool:
    """Whether the compiler builds and runs a program with SANITIZE (checked once)."""
    if not _SANITIZERS:
        source, binary = directory / "probe.cc", directory / "probe"
        source.write_text("int main() { return 0; }\n")
        built = subprocess.run([COMPILER, *SANITIZE, str(source), "-o", str(binary)], capture_output=True)
        _SANITIZERS.append(built.returncode == 0 and subprocess.run([str(binary)], capture_output=True).returncode == 0)
    return _SANITIZERS[0]


def run_program(binary: str, directory, data: bytes) -> bytes:
    """Run `binary` with an input file holding `data`; returns what it wrote to its output file."""
    (directory / "in.bin").write_bytes(data)
    out = directory / "out.bin"
    done = subprocess.run([binary, str(directory / "in.bin"), str(out)], capture_output=True, text=True)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-6000:]}"
    return out.read_bytes()
