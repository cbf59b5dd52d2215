"""The CUDA dialect's kernels run on the CPU, each GPU thread an OS thread: their values checked against eager on
machines without a GPU.

The compile check (``python -m thunder.executors.cuda --compile-check``) shows that every fused pattern compiles
with NVRTC; it says nothing of the values. Here a generated translation unit is compiled by the host's g++ with
a header that stands in for CUDA (below: ``threadIdx``/``blockIdx`` per thread, ``__syncthreads`` and
``__shfl_xor_sync`` as barriers, ``__shared__`` memory, ``atomicAdd``, the half-precision conversions the prelude
writes in PTX) and launched with the grid and block its schedule chose: the blocks one after another, the
threads of a block concurrently (a thread that returns leaves the block's and its warp's barriers, as an exited
GPU thread no longer holds back ``__syncthreads``). :data:`emulating_executor` is the CPU fusion executor
lowering through this, so ``thunder.jit(fn, executors=[emulating_executor, torch_executor])`` runs a program's
fusions, forward and backward, as CUDA kernels on CPU tensors.

What this does not check: the driver, the launches on streams, memory coalescing and speed, and CUDA's own math
library (the host's libm computes ``expf`` and the others, within a few ulp of CUDA's). A data race a GPU's
schedule would expose may not show here. Slow: a block of 256 threads is 256 OS threads; use small tensors.
"""
import atexit
import ctypes
import dataclasses
import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time

from thunder.executors import cudaex

#: Prepended to a generated CUDA translation unit (whose integer typedefs and PTX lines are taken out first).
SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
// The blocks of a launch run one after another: a function's static is its block's shared memory.
#define __shared__ static

namespace emu {
struct Dim3 { unsigned x = 0, y = 1, z = 1; };
struct Trap {};
struct Warp {
  explicit Warp(int n) : bar(n) {}
  std::barrier<> bar;
  alignas(8) unsigned char slot[32][8];
};
struct Block {
  explicit Block(int n) : bar(n) {}
  std::barrier<> bar;
  std::vector<std::unique_ptr<Warp>> warps;
};
inline thread_local Block* block = nullptr;
inline std::atomic<int> trapped{0};
template <class T> std::remove_cv_t<T> arg(unsigned long long bits) {
  std::remove_cv_t<T> v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
inline float f16_to_float(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
inline uint16_t float_to_f16(float f) { _Float16 v = (_Float16)f; uint16_t h; std::memcpy(&h, &v, 2); return h; }
inline uint16_t float_to_bf16(float f) {  // round to nearest even; a NaN stays a (quiet) NaN
  uint32_t u; std::memcpy(&u, &f, 4);
  if (f != f) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
}  // namespace emu

inline thread_local emu::Dim3 threadIdx, blockIdx;
inline emu::Dim3 blockDim, gridDim;

inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline void __syncthreads() { emu::block->bar.arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __trap() { throw emu::Trap{}; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
template <class T> T __shfl_xor_sync(unsigned, T v, int mask) {
  emu::Warp& w = *emu::block->warps[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  std::memcpy(w.slot[lane], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T other;
  std::memcpy(&other, w.slot[lane ^ mask], sizeof(T));
  w.bar.arrive_and_wait();
  return other;
}

namespace emu {
// `threads` workers, made once per launch, run the blocks in turn: between blocks they meet at `step`, and
// worker 0 makes the next block's barriers (a thread that returned left the last ones).
template <class F> int run(long long grid, int threads, F kernel) {
  gridDim.x = (unsigned)grid;
  blockDim.x = (unsigned)threads;
  trapped = 0;
  std::barrier<> step(threads);
  std::unique_ptr<Block> current;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      threadIdx.x = (unsigned)t;
      for (long long b = 0; b < grid; ++b) {
        if (t == 0) {
          current = std::make_unique<Block>(threads);
          for (int w = 0; w < (threads + 31) / 32; ++w)
            current->warps.push_back(std::make_unique<Warp>(std::min(32, threads - 32 * w)));
        }
        step.arrive_and_wait();
        blockIdx.x = (unsigned)b;
        block = current.get();
        try { kernel(); } catch (Trap&) { trapped = 1; }
        block->warps[t / 32]->bar.arrive_and_drop();
        block->bar.arrive_and_drop();
        step.arrive_and_wait();
      }
    });
  for (std::thread& t : pool) t.join();
  return trapped;
}
}  // namespace emu
"""

#: The prelude's PTX conversions, and what stands in for each.
_PTX = {
    'asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h))': "f = emu::f16_to_float(h)",
    'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f))': "h = emu::float_to_f16(f)",
    'asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f))': "h = emu::float_to_bf16(f)",
}

_KERNEL = re.compile(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\)')


def host_source(source):
    """A CUDA translation unit as host C++: SHIM, the unit without its integer typedefs and PTX, and per kernel
    ``int emu_<name>(const unsigned long long* args, long long grid, int block)`` running it (1: it trapped)."""
    body = "\n".join(line for line in source.splitlines() if not re.match(r"typedef [\w ]+ u?int\d+_t;$", line))
    for ptx, host in _PTX.items():
        body = body.replace(ptx, host)
    runners = []
    for name, params in _KERNEL.findall(source):
        types = [re.sub(r"\s*(__restrict__\s*)?\w+$", "", p.strip()) for p in params.split(",") if p.strip()]
        call = ", ".join(f"emu::arg<{t}>(a[{k}])" for k, t in enumerate(types))
        runners.append(f'extern "C" int emu_{name}(const unsigned long long* a, long long grid, int block) '
                       f"{{ return emu::run(grid, block, [&] {{ {name}({call}); }}); }}")
    return SHIM + body + "\n" + "\n".join(runners) + "\n"


#: The units compiled in this process, by source. Nothing is kept on disk: the shared objects are built in a
#: private directory of this process (removed at exit) and loaded from there.
_modules, _lock = {}, threading.Lock()
_directory = None


def _private_directory():
    global _directory
    if _directory is None:
        _directory = tempfile.mkdtemp(prefix="thunder-cuda-emulation-")
        atexit.register(shutil.rmtree, _directory, True)
    return _directory


class EmulatedModule:
    """A CUDA translation unit compiled for the host (g++ -O1, C++20), as ``thunder._core.CudaModule`` is used:
    ``function(name)`` gives what the launcher passes to ``launch``; ``image`` says how it was made (``command``,
    ``path``, ``cache_hit``: always False, ``compile_seconds``), as a CudaModule's. RuntimeError with g++'s errors
    if the unit does not compile."""

    def __init__(self, source):
        text = host_source(source)
        base = os.path.join(_private_directory(), hashlib.sha256(text.encode()).hexdigest()[:24])
        with open(base + ".cc", "w") as f:
            f.write(text)
        command = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", base + ".cc", "-o", base + ".so"]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the emulated CUDA unit does not compile ({base}.cc):\n{done.stderr[-4000:]}")
        self.library = ctypes.CDLL(base + ".so")
        self.path, self.source, self.command = base + ".so", source, " ".join(command)
        self.cache_hit, self.compile_seconds, self.image = False, time.perf_counter() - start, self

    def function(self, name):
        fn = getattr(self.library, f"emu_{name}")
        fn.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_longlong, ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn


def _bits(value, index):
    """A launch argument as the 8 bytes the kernel reads (as ``thunder._core.launch_cuda`` passes it)."""
    if isinstance(value, float):
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    if isinstance(value, bool) or isinstance(value, int):
        return int(value) & 0xFFFFFFFFFFFFFFFF
    raise TypeError(f"kernel argument {index}: {type(value).__name__}")


#: One emulated launch at a time: the shim's grid, block, trap flag and `__shared__` statics are the process's,
#: and every emulated call shares one device and stream (and so a two-stage workspace).
_launching = threading.Lock()


def launch(function, grid, block, stream, args):
    """Runs an emulated kernel: the blocks in turn, each block's threads concurrently. RuntimeError if it trapped
    (an index out of range, as a device-side assert)."""
    values = (ctypes.c_ulonglong * max(1, len(args)))(*[_bits(v, k) for k, v in enumerate(args)])
    with _launching:
        trapped = function(values, grid, block)
    if trapped:
        raise RuntimeError("the emulated CUDA kernel trapped (an index out of range)")


def _module(source, where):
    """The unit's EmulatedModule, compiled once per process (several threads may compile one unit at once; one
    result is kept)."""
    with _lock:
        module = _modules.get(source)
    if module is None:
        module = EmulatedModule(source)
        with _lock:
            module = _modules.setdefault(source, module)
    return module


#: The CUDA executor's lowering (``cudaex.lower``: its units, reuse across traces, parallel compiles, launchers)
#: for the CPU fusion executor's fusions, compiled for the host. The launchers' runtime, for CPU tensors: the CPU
#: is the device (whose index, None, is always current), its stream 0.
HOST = cudaex.Target(executor="cpu", device_type="cpu", where=lambda: ("emulated", "host"), module=_module,
                     names={"launch": launch, "raw_stream": lambda index: 0, "current_device": lambda: None})

lower = functools.partial(cudaex.lower, target=HOST)


def _make_executor():
    from thunder.executors.cpuex import cpu_executor
    return dataclasses.replace(cpu_executor, lower=lower)


#: The CPU fusion executor (its claims and fusions, on CPU tensors) whose kernels are the CUDA dialect's, emulated.
emulating_executor = _make_executor()
