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
import functools
import math
import os
import time
import weakref

import torch
import torch.utils.dlpack

from thunder import _core
from thunder.core import debug, registry
from thunder.core.dtypes import to_torch
from thunder.core.log import log_trace, logger, trace_enabled
from thunder.executors import Executor, OpaqueResultMismatch


def cache_dir():
    """The kernel cache directory asked for: ``$THUNDER_CACHE_DIR``, else ``~/.cache/thunder/kernels`` (``~`` expanded
    in either, as torch's and Hugging Face's cache variables are)."""
    return os.path.expanduser(os.environ.get("THUNDER_CACHE_DIR") or os.path.join("~", ".cache", "thunder", "kernels"))


def compile_timeout():
    """Seconds the compiler may run before it is killed: ``$THUNDER_COMPILE_TIMEOUT``, else 300 (0, ``inf`` or more
    than a year: no limit). Raises ValueError if the variable is not a number of seconds >= 0 (a negative one or
    NaN would read as no limit)."""
    value = os.environ.get("THUNDER_COMPILE_TIMEOUT")
    try:
        seconds = float(value) if value else 300.0
    except ValueError:
        seconds = math.nan
    if not seconds >= 0:
        raise ValueError(f"THUNDER_COMPILE_TIMEOUT must be a number of seconds >= 0 (0 or inf: no limit), got "
                         f"{value!r}")
    return seconds


#: Warnings of the kernel cache already logged in this process (an unusable cache directory warns once).
_cache_warnings = set()


@functools.cache
def erf_one():
    """The least float32 x whose ``torch.erf(x)`` is 1.0 on this machine: where the prelude's float erf reaches 1
    (``THUNDER_ERF_ONE``, so that ``floor(erf(x))`` and ``erf(x) == 1`` agree with eager's). ATen's vectorized erf
    differs between CPUs of one capability (3.8325069 on an AMD EPYC with AVX-512, 3.9277348 on an Intel Xeon with
    AVX-512 and on AVX2): read from torch itself, over every float32 in [3.5, 4.5)."""
    bits = torch.arange(0x40600000, 0x40900000, dtype=torch.int32).view(torch.float32)  # 3.5 .. 4.5
    ones = (torch.erf(bits) == 1.0).nonzero()
    return float(bits[ones[0, 0]]) if len(ones) else 4.5


def compile_flags():
    """The flags kernels compile with: the core's defaults, and ``-DTHUNDER_ERF_ONE`` (erf_one, as an exact
    hexadecimal literal)."""
    return [*_core.default_compile_flags(), f"-DTHUNDER_ERF_ONE={erf_one().hex()}f"]


def load_module(source, directory=None):
    """Compiles a translation unit (or loads it from the kernel cache) with the executor's settings
    (compile_flags); logs once why the cache directory asked for was not used, if it was not. Returns a
    ``thunder._core.KernelModule``."""
    module = _core.load_module(source, directory or cache_dir(), flags=compile_flags(), timeout=compile_timeout())
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

#: A kernel whose inputs and outputs hold fewer elements than this all together, over a domain no larger, is
#: launched holding the GIL (``thunder._core.launch_brief``): it runs for well under a microsecond, less than
#: releasing and taking the GIL again would let another thread do (~45 ns of a 2x2 add's ~2 us call).
BRIEF_LAUNCH_ELEMENTS = 1 << 14

_DLPACK_DTYPES = {torch.bool: 6, torch.bfloat16: 4, torch.float16: 2, torch.float32: 2, torch.float64: 2,
                  torch.uint8: 1, torch.int8: 0, torch.int16: 0, torch.int32: 0, torch.int64: 0}

_prototype_memory = torch.empty(0, dtype=torch.uint8)  # shared by every prototype; grown, never shrunk


def _prototype(shape, dtype):
    """A contiguous tensor of ``shape`` and ``dtype`` for ``torch.empty_like`` to copy its layout from. Its memory
    is shared by every prototype (a view of one buffer as large as the largest), so a launcher kept per shape
    (a graph with symbolic sizes keeps one per shape signature it saw) costs no memory of its output's size."""
    global _prototype_memory
    nbytes = math.prod(shape) * dtype.itemsize
    with torch.inference_mode(False):  # a launcher made under inference mode serves calls outside it too
        if _prototype_memory.numel() < nbytes:
            _prototype_memory = torch.empty(max(nbytes, POOLED_OUTPUT_BYTES), dtype=torch.uint8)
        return _prototype_memory[:nbytes].view(dtype).view(tuple(shape))


def _allocation(name, shape, dtype, values):
    """The launcher's expression for a fresh, uninitialized output tensor; the per-launcher objects it names
    (its shape, a prototype tensor) go into ``values``."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    if math.prod(shape) * itemsize >= POOLED_OUTPUT_BYTES and dtype in _DLPACK_DTYPES:
        values[f"shape_{name}"] = tuple(shape)
        return f"from_dlpack(pooled(shape_{name}, {_DLPACK_DTYPES[dtype]}, {itemsize * 8}))"
    values[f"prototype_{name}"] = _prototype(shape, dtype)
    return f"empty_like(prototype_{name})"


def _size_argument(params, size, values):
    """The launcher's expression for one size argument of a shape-generic kernel: a size is a number the
    launcher is made with (it serves the one shape its trace was lowered for, as its outputs' allocation does:
    guards, or the specialization of a graph with symbolic sizes, fix the shapes; reading it from the tensor
    cost ~60 ns), a strided trace input's stride is read from the tensor."""
    index, dim, stride, value = size
    if stride and index >= 0:
        return f"{params[index]}.stride({dim})"
    values[f"s{len(values)}"] = value
    return f"s{len(values) - 1}"


def _readable(a, strided):
    """A launcher's line making its tensor parameter ``a`` what a kernel reads: contiguous unless the kernel reads
    it with its strides (``strided``), and with its negative bit resolved -- a tensor with that bit
    (``z.conj().imag``, ``torch._neg_view``) holds its values negated, and Dynamo's guards do not tell it from
    another. A copy only where one is needed."""
    if strided:
        return f"if {a}.is_neg(): {a} = {a}.resolve_neg()"
    return f"if not {a}.is_contiguous() or {a}.is_neg(): {a} = {a}.contiguous().resolve_neg()"


def _mismatch(kernel, value, dtype, shape):
    """The error of a launcher whose input, an opaque op's result, is not the tensor the trace says it is."""
    return OpaqueResultMismatch(
        f"thunder: kernel {kernel} reads an opaque op's result as {str(dtype).removeprefix('torch.')}"
        f"{list(shape)}, as Dynamo's fake tensor said, but the op returned {str(value.dtype).removeprefix('torch.')}"
        f"{list(value.shape)}")


def _opaque_results(trace):
    """thunder.core.compile.opaque_results: the results its launchers check (OpaqueResultMismatch). (A backward's
    kernels read such a result as a saved value, an input of their trace, which is not checked: the forward's
    kernels that read it were, on the first call.)"""
    from thunder.core.compile import opaque_results  # (thunder.core.compile imports the executors)
    return opaque_results(trace)


def _verified(kernel, a, p, trace, names):
    """A launcher's line raising OpaqueResultMismatch unless its parameter ``a`` (the trace's ``p``, an opaque op's
    result) has the dtype and shape of ``p``, which it binds in ``names``."""
    dtype, shape, _, _ = trace.meta(p)
    names[f"dtype_{a}"], names[f"shape_{a}"] = to_torch(dtype), torch.Size(shape)
    return (f"if {a}.dtype is not dtype_{a} or {a}.shape != shape_{a}: "
            f"raise mismatch({kernel!r}, {a}, dtype_{a}, shape_{a})")


def _parameters(trace, inputs):
    """A launcher's parameters for a kernel's ``inputs`` (its tensors, then the numbers computed at run time):
    (every parameter's name, the tensors' names, the numbers' expressions as kernel arguments -- a float passed as
    a float, whose bits ``thunder._core.launch`` and ``launch_cuda`` pass; an int or a bool as itself)."""
    names = [f"a{i}" for i in range(len(inputs))]
    kinds = [trace.meta(p) for p in inputs]
    tensors = [a for a, m in zip(names, kinds) if m[0] != "number"]
    numbers = [f"float({a})" if m[1] == "float" else a for a, m in zip(names, kinds) if m[0] == "number"]
    return names, tensors, numbers


#: What every launcher's text refers to besides its own values.
_LAUNCHER_GLOBALS = {"launch": _core.launch, "launch_brief": _core.launch_brief, "threads": torch.get_num_threads,
                     "index_error": _index_error, "mismatch": _mismatch, "empty_like": torch.empty_like,
                     "pooled": _core.pooled_capsule, "from_dlpack": torch.utils.dlpack.from_dlpack}


@functools.lru_cache(maxsize=1024)
def _launcher_factory(text):
    """The function that makes launchers of one text, given the kernel's address and the launcher's values:
    the text is compiled once, and a new shape of a shape-generic kernel only binds new values (compiling
    each launcher cost ~0.3 ms, 27 of them at each new length of a GPT-2). The source stays readable in
    tracebacks while the factory or a launcher it made lives."""
    filename = debug.register_source(text, "kernel launcher")
    namespace = dict(_LAUNCHER_GLOBALS)
    exec(compile(text, filename, "exec"), namespace)
    make = namespace["make"]
    debug.release_source_with(make, filename)
    return make


def _launcher(name, module, source_digest, trace, inputs, outputs, sizes=(), written_over=(), symbol=None,
              guarded=(), unverified=()):
    """The Python function that runs one kernel: generated for its arity, it makes the inputs contiguous and their
    negative bit resolved (a copy only if one is not; a non-contiguous trace input is read in place, its strides
    passed to the kernel or, where 0 or 1, written into it, which the guards fix), allocates the outputs (an output
    ``written_over[i] >= 0`` is that input, which dies in the kernel: ``thunder._core.render_cpu``), launches the
    kernel with the data pointers, torch's thread count, the sizes a shape-generic kernel takes as
    arguments (``sizes``: see ``thunder._core.render_cpu``) and the numbers among ``inputs`` (computed at run
    time; they follow the tensors), and returns the output (a tuple of them if
    several). ``source_digest`` is the digest of the kernel's translation unit, ``symbol`` its name there (default:
    ``name``; another graph's kernel that computes alike). ``guarded``: the trace inputs whose layout and negative
    bit Dynamo's guards fix (see :func:`lower`), read as they come. ``unverified``: the results of opaque ops,
    whose dtype and shape it checks first (OpaqueResultMismatch). It holds the kernel's module: the module is
    unloaded when no launcher (or compiled graph) uses it any more."""
    values = {}  # the names the text binds per launcher: output shapes or prototypes, sizes
    all_params, params, numbers = _parameters(trace, inputs)
    lines = [f"    def {name}({', '.join(all_params)}):"]
    for a, p in zip(params, inputs):
        if p in unverified:
            lines.append("        " + _verified(name, a, p, trace, values))
        if p not in guarded:
            lines.append("        " + _readable(a, strided=bool(trace.strides(p))))
    outs = [f"o{k}" for k in range(len(outputs))]
    for k, (o, p) in enumerate(zip(outs, outputs)):
        dtype, shape, _, _ = trace.meta(p)
        over = written_over[k] if written_over else -1
        if over >= 0:  # the input itself; a view of a dead tensor as a tensor of its own, as a new output is
            lines.append(f"        {o} = {params[over]} if {params[over]}._base is None else {params[over]}.detach()")
        else:
            lines.append(f"        {o} = {_allocation(o, shape, to_torch(dtype), values)}")
    # The elements read and written, or the domain's (an outer product reads few and computes many): its extents
    # are the size arguments that are not strides.
    elements = max(sum(math.prod(trace.meta(p)[1]) for p in [*inputs, *outputs] if trace.meta(p)[0] != "number"),
                   math.prod(value for _, _, stride, value in sizes if not stride))
    sizes = [_size_argument(params, z, values) for z in sizes]
    pointers = [f"{x}.data_ptr()" for x in params + outs] + ["threads()"] + sizes + numbers
    launch = "launch_brief" if elements < BRIEF_LAUNCH_ELEMENTS else "launch"
    lines.append(f"        if {launch}(kernel, ({', '.join(pointers)},)):")
    lines.append(f"            raise index_error({name!r})")
    lines.append(f"        return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
    lines.append(f"    return {name}")
    text = "\n".join([f"def make({', '.join(['kernel', *values])}):"] + lines) + "\n"
    launcher = _launcher_factory(text)(module.symbol(symbol or name), *values.values())
    launcher.module = module  # keeps it loaded
    # Its name in the kernel registry (printed traces import it by that name): the kernel's name and a digest
    # of what it runs -- the kernel's source, the launcher's text and the values it binds -- the same for the
    # same kernel in every process.
    bound = ", ".join(f"{k}={tuple(v.shape) if isinstance(v, torch.Tensor) else v}" for k, v in values.items())
    other = "" if symbol in (None, name) else f" as {symbol}"  # another graph's kernel, named so in its unit
    launcher.registry_name = f"{name}_{registry.digest(source_digest + text + bound + other)}"
    return launcher


#: The kernel modules this process has loaded, by (translation unit, cache directory), while something uses them:
#: a unit lowered again (each new length of a graph with symbolic sizes lowers the same shape-generic kernels) is
#: not looked up, read and verified in the cache again.
_loaded = weakref.WeakValueDictionary()

#: Kernels per translation unit below which a trace's kernels are not split across compiler processes
#: (each process pays the compiler's start-up and the headers again).
KERNELS_PER_UNIT = 4


def reusable_kernels(compiled, where):
    """The kernels other traces of a jitted function compiled that this one can call: ``compiled`` maps (key,
    where) -- a kernel's text apart from its name, and where it was compiled (the cache directory; for CUDA also
    the architecture) -- to (its module, held weakly, its symbol there, its unit's source). Returns {key: (module,
    symbol, source)} for ``where``; entries whose module is gone are dropped from ``compiled``."""
    reusable = {}
    for (key, at), (module, symbol, source) in list((compiled or {}).items()):
        if module() is None:
            compiled.pop((key, at), None)  # another thread may have dropped it
        elif at == where:
            reusable[key] = (module(), symbol, source)
    return reusable


def _units(trace, round_every_op, loaded=()):
    """The trace's CPU kernels rendered as translation units, as many as there are cores for (at least
    KERNELS_PER_UNIT kernels each), leaving out the kernels whose key is in ``loaded``: [(source, kernels)]."""
    count = sum(1 for b in trace.symbols if b.executor == "cpu" and b.callee.startswith("cpu_fusion"))
    parts = max(1, min(os.cpu_count() or 1, count // KERNELS_PER_UNIT))
    return _core.render_cpu(trace, "cpu", parts, round_every_op, set(loaded))


def lower(trace, round_every_op=True, seconds=None, compiled=None, guarded_inputs=False):
    """Compiles the trace's CPU fusions, in parallel compiler processes when there are many; returns
    ({fusion name: launcher}, [(kernel module, its C++ source)]). ``round_every_op``: float16/bfloat16 values
    are rounded after every op, as eager does; False (a backward trace): only where they are stored or
    converted, float32 in between. ``seconds``, a dict, receives the wall time of "codegen" (the sources
    rendered) and "compile" (the compiler processes, or the kernel cache, and the launchers).

    ``compiled``: a dict of the kernels compiled for other traces of one jitted function (its other graphs and
    shapes), by key (``thunder._core.render_cpu``: a kernel's text apart from its name) and cache directory:
    (its module, held weakly, its name there, its unit's source). A kernel found there is not compiled again
    (a model's static first graph and its graph with symbolic sizes, or a prefill and a decode step, share most
    kernels, which differ only in their names and their units' partition); the trace's other kernels are, and are
    added to it.

    ``guarded_inputs``: the trace's inputs are a Dynamo graph's, whose guards fix each tensor's strides and
    negative bit to the trace's (a new layout, or a view with the bit, compiles another graph): a kernel reads them
    without the launcher's checks (0.15 us an input). Other inputs -- a backward's, those of a trace run by
    hand -- are made contiguous and resolved where needed."""
    global last_source
    seconds = {} if seconds is None else seconds
    guarded = frozenset(trace.inputs) if guarded_inputs else frozenset()
    unverified = _opaque_results(trace)
    start = time.perf_counter()
    directory = cache_dir()
    reusable = reusable_kernels(compiled, directory)
    units = _units(trace, round_every_op, reusable)
    seconds["codegen"] = time.perf_counter() - start
    if not units:
        return {}, []
    start = time.perf_counter()
    modules = [_loaded.get((source, directory)) if source else None for source, _ in units]
    missing = [k for k, m in enumerate(modules) if m is None and units[k][0]]
    if len(missing) == 1:
        modules[missing[0]] = load_module(units[missing[0]][0], directory)
    elif missing:  # load_module releases the GIL while the compiler runs
        with concurrent.futures.ThreadPoolExecutor(len(missing)) as pool:
            for k, m in zip(missing, pool.map(lambda k: load_module(units[k][0], directory), missing)):
                modules[k] = m
    launchers, used = {}, {}
    for k, (module, (source, kernels)) in enumerate(zip(modules, units)):
        if not source:  # kernels compiled for another trace
            for name, ins, outs, sizes, over, key in kernels:
                owner, symbol, owner_source = reusable[key]
                used[id(owner)] = (owner, owner_source)
                launchers[name] = _launcher(name, owner, registry.digest(owner_source, 64), trace, ins, outs, sizes,
                                            over, symbol=symbol, guarded=guarded, unverified=unverified)
            continue
        _loaded[(source, directory)] = module
        used[id(module)] = (module, source)
        if k not in missing:
            logger.debug("thunder: cpu kernels %s already loaded", module.path)
        elif module.cache_hit:
            logger.debug("thunder: cpu kernels %s loaded from the cache", module.path)
        else:
            logger.debug("thunder: compiled cpu kernels in %.0f ms with: %s", module.compile_seconds * 1e3,
                         module.command)
        if trace_enabled():  # whole kernel sources only at TRACE: DEBUG stays readable
            log_trace("thunder: cpu kernel source (%s):\n%s", module.path, source)
        source_digest = registry.digest(source, 64)
        for name, ins, outs, sizes, over, key in kernels:
            launchers[name] = _launcher(name, module, source_digest, trace, ins, outs, sizes, over,
                                        guarded=guarded, unverified=unverified)
            if compiled is not None:
                compiled[(key, directory)] = (weakref.ref(module), name, source)
    last_source = "\n".join(source for _, source in used.values())
    seconds["compile"] = time.perf_counter() - start
    return launchers, list(used.values())


#: Claims every prim the code generator handles (csrc/codegen/kernel_plan.cc), on CPU tensors of every dtype
#: but the complex ones (generated kernels have no complex arithmetic); matmuls, and the ops built on them such
#: as linear and attention, stay with the torch executor (oneDNN or torch's BLAS: docs/cpu_executor.md, "Matmuls").
cpu_executor = Executor("cpu", {f"prims.{n}": "" for n in _core.fusible_prims()}, {}, fusion=True, lower=lower,
                        devices=("cpu",),
                        dtypes=tuple(d for n, d in _core.DType.__members__.items() if not n.startswith("complex")),
                        closed_by=("prims.matmul",))
