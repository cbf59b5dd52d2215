"""The CUDA fusion executor: generated CUDA kernels, compiled at run time with NVRTC.

It claims what the CPU fusion executor claims (the same prims, the same kernel plans: ``thunder._core`` plans
each fusion once, target-neutral), on CUDA tensors. ``lower`` renders a trace's ``cuda`` fusions in the CUDA
dialect (``thunder._core.render_cuda``: grid-stride elementwise loops with 16-byte vector accesses, one warp or
block per row for row reductions, two-stage full reductions), compiles them with NVRTC to CUBIN for the
device's architecture (PTX kept as the fallback; ``thunder._core.compile_cuda``, cached on disk beside the
CPU kernels, keyed also by architecture and NVRTC's version) and returns a launcher per fusion, which
allocates its outputs with torch's caching allocator and launches on torch's current stream
(``thunder._core.launch_cuda``; no host synchronization).

Nothing CUDA is loaded until a trace has a ``cuda`` fusion: NVRTC (``libnvrtc.so.13`` of the
``nvidia-cuda-nvrtc`` wheel, or ``$THUNDER_NVRTC_LIBRARY``) and the driver (``libcuda.so.1``) are opened with
``dlopen`` by the C++ core then. See docs/gpu_executor.md.
"""
import concurrent.futures
import dataclasses
import importlib.util
import os
import time
import weakref
from typing import Callable

import torch

from thunder import _core
from thunder.core import debug, registry
from thunder.core.dtypes import to_torch
from thunder.core.log import log_trace, logger, trace_enabled
from thunder.executors import Executor
from thunder.executors.cpuex import (_mismatch, _opaque_results, _parameters, _readable, _size_argument, _verified,
                                     cache_dir, reusable_kernels)

#: Where the NVRTC wheels put the library, under a ``nvidia`` directory of site-packages (CUDA 13's layout first).
_NVRTC_PATHS = ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12")


def nvrtc_library():
    """The path of NVRTC: ``$THUNDER_NVRTC_LIBRARY``, else ``libnvrtc.so.13`` of the ``nvidia-cuda-nvrtc`` wheel
    (found without importing anything from it), else None."""
    path = os.environ.get("THUNDER_NVRTC_LIBRARY")
    if path:
        return os.path.abspath(path)
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for rel in _NVRTC_PATHS:
            candidate = os.path.join(base, rel)
            if os.path.exists(candidate):
                return os.path.abspath(candidate)
    return None


def require_nvrtc():
    """nvrtc_library(), or RuntimeError saying how to get it."""
    path = nvrtc_library()
    if path is None:
        raise RuntimeError("thunder: the CUDA executor needs NVRTC: pip install nvidia-cuda-nvrtc==13.0.88 "
                           "(or set THUNDER_NVRTC_LIBRARY to the path of libnvrtc.so)")
    return path


def device_arch(device=None):
    """The architecture NVRTC compiles for on `device` (default: the current one): ``sm_<major><minor>``."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


#: Set by lower(): the last translation unit's source, for inspection.
last_source = None


def _workspace(cache, device, stream, nbytes):
    """A zeroed workspace of a launcher (a two-stage reduction's partial results and its block counter, which the
    kernel resets): one per device and stream, kept by the launcher (launches on two streams at once would
    otherwise share the counter; launches on one stream run in order)."""
    ws = cache.get((device, stream))
    if ws is None:
        ws = cache[(device, stream)] = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    return ws


#: The raw ``cudaStream_t`` of a device's current stream, by device index (as Inductor's generated code reads it:
#: ~0.1 us, where ``torch.cuda.current_stream(index).cuda_stream`` makes a Stream object each call).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def _launcher(name, module, source, trace, inputs, outputs, sizes, block, grid, workspace, symbol=None,
              by_value=(), device_type="cuda", names=None, unverified=()):
    """The Python function that runs one CUDA kernel: inputs made contiguous where the kernel reads them so,
    outputs from torch's caching allocator on the inputs' device, the kernel launched on that device's current
    stream with the grid and block the schedule chose for these shapes. Inputs on another device than the
    current one make theirs current for the call (the module is loaded per context). ``symbol``: the kernel's
    name in ``module`` when it runs the code of another kernel (default: ``name``). ``device_type``: the tensors
    the kernel reads where they are; "cpu" for the emulator (``thunder.executors.cuda_emulation``).
    ``by_value``: per input, whether the kernel takes it by value (``render_cuda``'s, from the CUDA dialect's
    ``host_scalar``: a 0-dim CPU tensor, ``cuda_x * torch.tensor(2.0)``), as torch passes it: read on the host, no
    copy to the device and no synchronization, and a launch a CUDA graph can capture (with the value it had then).
    ``names``: what the launcher's text calls instead of the CUDA runtime's ``launch``, ``raw_stream`` and
    ``current_device`` (the emulator's). ``unverified``: the results of opaque ops, whose dtype and shape it checks
    first (``thunder.executors.OpaqueResultMismatch``).

    The kernel's handle is looked up once per device, in its context, on the first call there."""
    namespace = {"launch": _core.launch_cuda, "empty": torch.empty, "raw_stream": _raw_stream,
                 "current_device": torch.cuda.current_device, "device_guard": torch.cuda.device,
                 "workspaces": {}, "workspace_of": _workspace, "kernels": {},
                 "kernel_in_context": lambda: module.function(symbol or name), "mismatch": _mismatch,
                 **(names or {})}
    all_params, params, numbers = _parameters(trace, inputs)
    lines = [f"def {name}({', '.join(all_params)}):"]
    tensors = [p for p in inputs if trace.meta(p)[0] != "number"]
    by_value = dict(zip(params, by_value or [False] * len(tensors)))  # every other tensor is where the kernel runs
    on_cuda = [a for a, p in zip(params, tensors)
               if not by_value[a] and str(trace.meta(p)[2]).startswith(device_type)]
    made_on = str(trace.meta(outputs[0])[2]) if outputs else "cuda"  # without CUDA inputs, the outputs' device
    namespace["made_on"] = torch.device(made_on) if ":" in made_on else None
    if on_cuda or namespace["made_on"] is not None:  # a device with an index, not the current one
        lines += [f"    device = {on_cuda[0] + '.device' if on_cuda else 'made_on'}", "    index = device.index"]
        # the module is loaded, and the kernel launched, in the device's context
        lines += ["    if index != current_device():", "        with device_guard(device):",
                  f"            return {name}({', '.join(all_params)})"]
    else:
        lines.append("    device = index = current_device()")
    checked = {}  # the dtypes and shapes of the opaque results it checks
    for a, p in zip(params, tensors):
        if p in unverified:
            lines.append("    " + _verified(name, a, p, trace, checked))
        lines.append(f"    {a} = {a}.item()" if by_value[a] else "    " + _readable(a, bool(trace.strides(p))))
    lines += ["    kernel = kernels.get(index)", "    if kernel is None:",
              "        kernel = kernels[index] = kernel_in_context()"]
    outs = [f"o{k}" for k in range(len(outputs))]
    for k, (o, p) in enumerate(zip(outs, outputs)):
        dtype, shape, _, _ = trace.meta(p)
        namespace[f"dtype{k}"] = to_torch(dtype)
        lines.append(f"    {o} = empty({tuple(shape)}, dtype=dtype{k}, device=device)")
    values = {}  # the sizes the text names
    args = [x if by_value.get(x) else f"{x}.data_ptr()" for x in params + outs]
    args += [_size_argument(params, z, values) for z in sizes] + numbers
    namespace.update(values)
    lines.append("    on = raw_stream(index)")
    if workspace:
        args.append(f"workspace_of(workspaces, device, on, {workspace}).data_ptr()")
    lines.append(f"    launch(kernel, {grid}, {block}, on, [{', '.join(args)}])")
    lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
    text = "\n".join(lines) + "\n"
    namespace.update(checked)
    registry_name = f"{name}_{registry.digest(source + text + repr(sorted(values.items())) + repr(checked))}"
    filename = debug.register_source(text, f"kernel launcher {registry_name}")
    exec(compile(text, filename, "exec"), namespace)
    launcher = namespace[name]
    launcher.registry_name = registry_name
    launcher.module = module  # keeps it loaded
    debug.release_source_with(launcher, filename)
    return launcher


def compile_source(source, arch=None, directory=None):
    """Compiles a CUDA translation unit with NVRTC (or loads it from the kernel cache): a
    ``thunder._core.CudaImage`` (CUBIN, PTX, ptxas' report per kernel). ``arch`` defaults to the current
    device's."""
    image = _core.compile_cuda(source, require_nvrtc(), arch or device_arch(), directory or cache_dir())
    if image.warning:
        logger.warning("%s", image.warning)
    return image


#: The modules of units lowered before, by (source, cache directory, architecture): a unit lowered again (each
#: new length of a graph with symbolic sizes lowers the same shape-generic kernels) is not looked up, read and
#: verified in the cache again.
_loaded = weakref.WeakValueDictionary()

#: Kernels per translation unit below which a trace's kernels are not split across NVRTC threads (each
#: program pays NVRTC's start again: ~25 ms against ~60-80 ms a kernel).
KERNELS_PER_UNIT = 2


def _module(source, where):
    """The CudaModule of a translation unit, compiled by NVRTC or loaded from the kernel cache; ``where``: (the
    cache directory, the architecture)."""
    directory, arch = where
    module = _loaded.get((source, directory, arch))
    if module is None:
        image = compile_source(source, arch, directory)
        if image.cache_hit:
            logger.debug("thunder: cuda kernels %s loaded from the cache", image.path)
        else:
            logger.debug("thunder: compiled cuda kernels in %.0f ms with: %s", image.compile_seconds * 1e3,
                         image.command)
        if trace_enabled():
            log_trace("thunder: cuda kernel source (%s):\n%s", image.path, source)
        module = _loaded[(source, directory, arch)] = _core.CudaModule(image)
    return module


@dataclasses.dataclass(frozen=True)
class Target:
    """Where ``lower``'s kernels run. ``executor``: the fusions' executor (its fusions are named
    ``<executor>_fusion<k>``); ``device_type``: the device of the tensors the kernels read in place; ``where()``:
    what a compiled kernel is valid for (a cache directory, an architecture), part of its reuse key;
    ``module(source, where)``: a translation unit compiled and loaded (``.function(name)``, ``.image``: how it was
    made, as ``thunder.last_kernels`` reports it), called from several threads at once; ``names``: the
    launchers' runtime (see ``_launcher``). The emulator (``thunder.executors.cuda_emulation``) is the other
    target: the same units, compiled for the host."""
    executor: str = "cuda"
    device_type: str = "cuda"
    where: Callable[[], tuple] = lambda: (cache_dir(), device_arch())
    module: Callable[[str, tuple], object] = _module
    names: dict = dataclasses.field(default_factory=dict)


CUDA = Target()


def _compile_units(sources, where, target):
    """The module of each source (``target.module``), in parallel threads when there are several:
    ``thunder._core.compile_cuda`` releases the GIL, and NVRTC compiles separate programs concurrently."""
    if len(sources) <= 1:
        return [target.module(s, where) for s in sources]
    with concurrent.futures.ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda s: target.module(s, where), sources))


def lower(trace, round_every_op=True, seconds=None, compiled=None, target=CUDA):
    """Compiles the trace's CUDA fusions, in parallel NVRTC threads when there are many; returns ({fusion name:
    launcher}, [(image, its CUDA source)]) (``thunder._core.CudaImage``s: each unit's CUBIN and how it was made).
    A kernel whose text repeats another's apart from its name (a model's layers) is compiled once. The CUDA
    dialect rounds float16/bfloat16 values after every op whatever ``round_every_op`` says, as eager's kernels do.
    ``seconds``, a dict, receives the wall time of "codegen" and "compile" (NVRTC or the cache, the modules, the
    launchers).

    ``compiled``: a dict of the kernels compiled for other traces of one jitted function, by key (a kernel's text
    apart from its name), cache directory and architecture: (its module, held weakly, its symbol there, its
    unit's source). A kernel found there is not compiled again (a prefill and a decode step, a static graph and
    its graph with symbolic sizes share most kernels); the trace's other kernels are, and are added to it.

    ``target``: where the kernels run (``Target``; the emulator's for CPU tensors)."""
    global last_source
    seconds = {} if seconds is None else seconds
    count = sum(1 for b in trace.symbols
                if b.executor == target.executor and b.callee.startswith(f"{target.executor}_fusion"))
    if not count:
        return {}, []
    start = time.perf_counter()
    where = target.where()
    reusable = reusable_kernels(compiled, where)
    unverified = _opaque_results(trace)
    parts = max(1, min(os.cpu_count() or 1, count // KERNELS_PER_UNIT))
    units = _core.render_cuda(trace, target.executor, parts, set(reusable))
    seconds["codegen"] = time.perf_counter() - start
    if not units:
        return {}, []
    start = time.perf_counter()
    sources = [source for source, _ in units if source]
    modules = dict(zip(sources, _compile_units(sources, where, target)))
    launchers, used = {}, {}
    for source, kernels in units:
        for name, ins, outs, sizes, block, grid, workspace, key, symbol, by_value in kernels:
            if source:
                module, text = modules[source], source
                if compiled is not None:
                    compiled[(key, where)] = (weakref.ref(module), symbol, source)
            else:  # compiled for another trace
                module, symbol, text = reusable[key]
            used[id(module)] = (module.image, text)
            launchers[name] = _launcher(name, module, text, trace, ins, outs, sizes, block, grid, workspace, symbol,
                                        by_value, target.device_type, target.names, unverified)
    last_source = "\n".join(text for _, text in used.values())
    seconds["compile"] = time.perf_counter() - start
    return launchers, list(used.values())


#: Claims the prims the kernel plans fuse (as the CPU executor), on CUDA tensors of every non-complex dtype;
#: matmuls and what is built on them stay with torch (cuBLAS).
cuda_executor = Executor("cuda", {f"prims.{n}": "" for n in _core.fusible_prims()}, {}, fusion=True, lower=lower,
                         devices=("cuda",),
                         dtypes=tuple(d for n, d in _core.DType.__members__.items() if not n.startswith("complex")),
                         closed_by=("prims.matmul",))
