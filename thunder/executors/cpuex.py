"""The CPU fusion executor: generated C++ kernels.

It claims the prims the code generator handles (elementwise math, casts,
``where``, broadcasts, reductions, slices, cats, ``slice_update``) and every torch-level op whose
decomposition is made only of those — unless the op's outputs require grad
(the kernels have no backward yet; torch's autograd handles those). The core's
fusion pass groups what it claimed into regions; ``lower`` renders one C++
translation unit per trace (``thunder._core.render_cpu``), compiles it with the
system compiler into the on-disk kernel cache (``thunder._core.load_module``)
and returns a launcher per fusion.

Cache: ``$THUNDER_CACHE_DIR`` or ``~/.cache/thunder/kernels``; entries are keyed
by source, compiler version, flags and CPU features, checked (owner, mode, SHA-256)
before they are loaded, and evicted least recently used first beyond
``$THUNDER_CACHE_MAX_BYTES`` (default 2 GiB); ``thunder.clear_kernel_cache()``
empties it. The compiler is killed after ``$THUNDER_COMPILE_TIMEOUT`` seconds
(default 300). See docs/cpu_executor.md.
"""
import concurrent.futures
import math
import os
import time

import torch
import torch.utils.dlpack

from thunder import _core
from thunder.core import debug, registry
from thunder.core.dtypes import to_torch
from thunder.core.log import log_trace, logger, trace_enabled
from thunder.executors import Executor


def cache_dir():
    """The kernel cache directory asked for: ``$THUNDER_CACHE_DIR``, else ``~/.cache/thunder/kernels``."""
    return os.environ.get("THUNDER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "thunder", "kernels")


def compile_timeout():
    """Seconds the compiler may run before it is killed: ``$THUNDER_COMPILE_TIMEOUT``, else 300 (0, ``inf`` or more
    than a year: no limit). Raises ValueError if the variable is not a number."""
    value = os.environ.get("THUNDER_COMPILE_TIMEOUT")
    try:
        return float(value) if value else 300.0
    except ValueError:
        raise ValueError(f"THUNDER_COMPILE_TIMEOUT must be a number of seconds, got {value!r}") from None


#: Warnings of the kernel cache already logged in this process (an unusable cache directory warns once).
_cache_warnings = set()


def load_module(source, directory=None):
    """Compiles a translation unit (or loads it from the kernel cache) with the executor's settings; logs once
    why the cache directory asked for was not used, if it was not. Returns a ``thunder._core.KernelModule``."""
    module = _core.load_module(source, directory or cache_dir(), timeout=compile_timeout())
    if module.warning and module.warning not in _cache_warnings:
        _cache_warnings.add(module.warning)
        logger.warning("%s", module.warning)
    return module


def clear_kernel_cache(directory=None):
    """Empties the on-disk kernel cache (default: the directory ``cache_dir()`` names).

    Removes every cached kernel module (``<key>.so``), the temporary files of compiles whose process no
    longer runs, and the entries of this process's private fallback directory (used when the cache directory
    was unsafe or unwritable). Kernels already loaded stay loaded and keep working; a later compile of one
    of them rebuilds its entry. Returns ``(files removed, bytes of the entries removed)``. Raises RuntimeError
    if the directory belongs to another user or others can write to it (it is then not this process's cache).
    """
    return _core.clear_kernel_cache(directory or cache_dir())


#: Set by lower(): the last translation unit's source and module, for inspection.
last_source = None


def _index_error(name):
    return IndexError(f"thunder: {name}: an index is out of range for the dimension it indexes (as torch.gather "
                      "or a loss's target would raise)")


#: Outputs of at least this many bytes come from the output buffer pool (``_core.pooled_capsule``): reused
#: memory instead of fresh pages faulted in on first write. Smaller ones are
#: ``torch.empty_like`` of a prototype of their shape and dtype kept by the launcher (0.6 us here, where
#: ``torch.empty(shape, dtype=...)`` takes 1.2 us to parse its arguments); malloc serves them without fresh pages.
POOLED_OUTPUT_BYTES = 64 << 10

_DLPACK_DTYPES = {torch.bool: 6, torch.bfloat16: 4, torch.float16: 2, torch.float32: 2, torch.float64: 2,
                  torch.uint8: 1, torch.int8: 0, torch.int16: 0, torch.int32: 0, torch.int64: 0}


def _allocation(name, shape, dtype, namespace):
    """The launcher's expression for a fresh, uninitialized output tensor (adding what it needs to namespace)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    if math.prod(shape) * itemsize >= POOLED_OUTPUT_BYTES and dtype in _DLPACK_DTYPES:
        return f"from_dlpack(pooled({tuple(shape)}, {_DLPACK_DTYPES[dtype]}, {itemsize * 8}))"
    namespace[f"prototype_{name}"] = torch.empty(tuple(shape), dtype=dtype)
    # The shape in the text too: the launcher's registry name is a digest of its text and the kernel's
    # source, which (sizes being arguments) is the same for every shape of a size class.
    return f"empty_like(prototype_{name})  # {tuple(shape)} {dtype}"


def _size_argument(params, size):
    """The launcher's expression for one size argument of a shape-generic kernel: a size is the number itself
    (a launcher serves the one shape its trace was lowered for, as its outputs' allocation does: guards, or the
    specialization of a graph with symbolic sizes, fix the shapes; reading it from the tensor cost ~60 ns), a
    strided trace input's stride is read from the tensor."""
    index, dim, stride, value = size
    return f"{params[index]}.stride({dim})" if stride and index >= 0 else str(value)


def _launcher(name, module, source, trace, inputs, outputs, sizes=()):
    """The Python function that runs one kernel: generated for its arity, it makes the inputs contiguous
    (a copy only if one is not; a non-contiguous trace input is read in place, its strides passed to the
    kernel or, where 0 or 1, written into it, which the guards fix), allocates the outputs, launches the
    kernel with the data pointers, torch's thread count and the sizes a shape-generic kernel takes as
    arguments (``sizes``: see ``thunder._core.render_cpu``), and returns the output (a tuple of them if
    several). It holds the kernel's module: the module is unloaded when no launcher (or compiled graph) uses
    it any more."""
    namespace = {"launch": _core.launch, "kernel": module.symbol(name), "module": module,  # keeps it loaded
                 "threads": torch.get_num_threads,
                 "index_error": _index_error, "empty_like": torch.empty_like,
                 "pooled": _core.pooled_capsule, "from_dlpack": torch.utils.dlpack.from_dlpack}
    params = [f"a{i}" for i in range(len(inputs))]
    lines = [f"def {name}({', '.join(params)}):"]
    for a, p in zip(params, inputs):
        if not trace.strides(p):
            lines.append(f"    if not {a}.is_contiguous(): {a} = {a}.contiguous()")
    outs = [f"o{k}" for k in range(len(outputs))]
    for o, p in zip(outs, outputs):
        dtype, shape, _, _ = trace.meta(p)
        lines.append(f"    {o} = {_allocation(o, shape, to_torch(dtype), namespace)}")
    pointers = [f"{x}.data_ptr()" for x in params + outs] + ["threads()"] + [_size_argument(params, z) for z in sizes]
    lines.append(f"    if launch(kernel, ({', '.join(pointers)},)):")
    lines.append(f"        raise index_error({name!r})")
    lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
    text = "\n".join(lines) + "\n"
    # Its name in the kernel registry (printed traces import it by that name): the kernel's name and a digest
    # of what it runs, the same for the same kernel in every process.
    registry_name = f"{name}_{registry.digest(source + text)}"
    filename = debug.register_source(text, f"kernel launcher {registry_name}")
    exec(compile(text, filename, "exec"), namespace)
    launcher = namespace[name]
    launcher.registry_name = registry_name
    debug.release_source_with(launcher, filename)
    return launcher


#: Kernels per translation unit below which a trace's kernels are not split across compiler processes
#: (each process pays the compiler's start-up and the headers again).
KERNELS_PER_UNIT = 4


def lower(trace, round_every_op=True, seconds=None):
    """Compiles the trace's CPU fusions, in parallel compiler processes when there are many; returns
    ({fusion name: launcher}, [(kernel module, its C++ source)]). ``round_every_op``: float16/bfloat16 values
    are rounded after every op, as eager does; False (a backward trace): only where they are stored or
    converted, float32 in between. ``seconds``, a dict, receives the wall time of "codegen" (the sources
    rendered) and "compile" (the compiler processes, or the kernel cache, and the launchers)."""
    global last_source
    seconds = {} if seconds is None else seconds
    start = time.perf_counter()
    count = sum(1 for b in trace.symbols if b.executor == "cpu" and b.callee.startswith("cpu_fusion"))
    parts = max(1, min(os.cpu_count() or 1, count // KERNELS_PER_UNIT))
    units = _core.render_cpu(trace, "cpu", parts, round_every_op)
    seconds["codegen"] = time.perf_counter() - start
    if not units:
        return {}, []
    start = time.perf_counter()
    directory = cache_dir()
    if len(units) == 1:
        modules = [load_module(units[0][0], directory)]
    else:  # load_module releases the GIL while the compiler runs
        with concurrent.futures.ThreadPoolExecutor(len(units)) as pool:
            modules = list(pool.map(lambda unit: load_module(unit[0], directory), units))
    launchers = {}
    for module, (source, kernels) in zip(modules, units):
        if module.cache_hit:
            logger.debug("thunder: cpu kernels %s loaded from the cache", module.path)
        else:
            logger.debug("thunder: compiled cpu kernels in %.0f ms with: %s", module.compile_seconds * 1e3,
                         module.command)
        if trace_enabled():  # whole kernel sources only at TRACE: DEBUG stays readable
            log_trace("thunder: cpu kernel source (%s):\n%s", module.path, source)
        launchers.update({name: _launcher(name, module, source, trace, ins, outs, sizes)
                          for name, ins, outs, sizes in kernels})
    last_source = "\n".join(source for source, _ in units)
    seconds["compile"] = time.perf_counter() - start
    return launchers, [(module, source) for module, (source, _) in zip(modules, units)]


#: Claims every prim the code generator handles (csrc/codegen/kernel_plan.cc), on CPU tensors of every dtype
#: but the complex ones (generated kernels have no complex arithmetic); matmuls, and the ops built on them such
#: as linear and attention, stay with the torch executor (oneDNN or torch's BLAS: docs/cpu_executor.md, "Matmuls").
cpu_executor = Executor("cpu", {f"prims.{n}": "" for n in _core.fusible_prims()}, {}, fusion=True, lower=lower,
                        devices=("cpu",),
                        dtypes=tuple(d for n, d in _core.DType.__members__.items() if not n.startswith("complex")),
                        closed_by=("prims.matmul",))
