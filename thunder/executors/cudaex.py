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
import importlib.util
import os
import time

import torch

from thunder import _core
from thunder.core import debug, registry
from thunder.core.dtypes import to_torch
from thunder.core.log import log_trace, logger, trace_enabled
from thunder.executors import Executor
from thunder.executors.cpuex import _parameters, _readable, _size_argument, cache_dir

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


def _workspace(cache, device, nbytes):
    """A zeroed workspace of a launcher (a two-stage reduction's partial results and its block counter, which the
    kernel resets): one per device, kept by the launcher."""
    ws = cache.get(device)
    if ws is None:
        ws = cache[device] = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    return ws


def _launcher(name, module, source, trace, inputs, outputs, sizes, block, grid, workspace):
    """The Python function that runs one CUDA kernel: inputs made contiguous where the kernel reads them so,
    outputs from torch's caching allocator on the inputs' device, the kernel launched on that device's current
    stream with the grid and block the schedule chose for these shapes. Inputs on another device than the
    current one make theirs current for the call (the module is loaded per context)."""
    namespace = {"launch": _core.launch_cuda, "module": module, "empty": torch.empty, "stream": torch.cuda.current_stream,
                 "current_device": torch.cuda.current_device, "device_guard": torch.cuda.device,
                 "workspaces": {}, "workspace_of": _workspace}
    all_params, params, numbers = _parameters(trace, inputs)
    lines = [f"def {name}({', '.join(all_params)}):"]
    tensors = [p for p in inputs if trace.meta(p)[0] != "number"]
    # A 0-dim CPU tensor is a scalar the fusion takes (as torch takes cuda_x * torch.tensor(2.0)); the kernel reads
    # device memory, so it is copied to the device. The device is a CUDA input's.
    on_device = {a: str(trace.meta(p)[2]).startswith("cuda") for a, p in zip(params, tensors)}
    on_cuda = [a for a in params if on_device[a]]
    made_on = str(trace.meta(outputs[0])[2]) if outputs else "cuda"  # without CUDA inputs, the outputs' device
    namespace["made_on"] = torch.device(made_on) if ":" in made_on else None
    named = on_cuda or namespace["made_on"] is not None  # a device with an index, not the current one
    lines.append(f"    device = {on_cuda[0] + '.device' if on_cuda else 'made_on' if named else 'current_device()'}")
    if named:  # the module is loaded, and the kernel launched, in the device's context
        lines += ["    if device.index != current_device():", "        with device_guard(device):",
                  f"            return {name}({', '.join(all_params)})"]
    for a, p in zip(params, tensors):
        lines.append(f"    {a} = {a}.to(device)" if not on_device[a] else "    " + _readable(a, bool(trace.strides(p))))
    outs = [f"o{k}" for k in range(len(outputs))]
    for k, (o, p) in enumerate(zip(outs, outputs)):
        dtype, shape, _, _ = trace.meta(p)
        namespace[f"dtype{k}"] = to_torch(dtype)
        lines.append(f"    {o} = empty({tuple(shape)}, dtype=dtype{k}, device=device)")
    values = {}  # the sizes the text names
    args = [f"{x}.data_ptr()" for x in params + outs] + [_size_argument(params, z, values) for z in sizes] + numbers
    namespace.update(values)
    if workspace:
        args.append(f"workspace_of(workspaces, device, {workspace}).data_ptr()")
    lines.append(f"    launch(module.function({name!r}), {grid}, {block}, stream(device).cuda_stream, "
                 f"[{', '.join(args)}])")
    lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
    text = "\n".join(lines) + "\n"
    registry_name = f"{name}_{registry.digest(source + text + repr(sorted(values.items())))}"
    filename = debug.register_source(text, f"kernel launcher {registry_name}")
    exec(compile(text, filename, "exec"), namespace)
    launcher = namespace[name]
    launcher.registry_name = registry_name
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


def lower(trace, round_every_op=True, seconds=None):
    """Compiles the trace's CUDA fusions; returns ({fusion name: launcher}, [(image, source)]). The CUDA dialect
    rounds float16/bfloat16 values after every op whatever ``round_every_op`` says (not yet measured there).
    ``seconds``, a dict, receives the wall time of "codegen" and "compile" (NVRTC or the cache, the module, the
    launchers)."""
    global last_source
    seconds = {} if seconds is None else seconds
    start = time.perf_counter()
    source, kernels = _core.render_cuda(trace, "cuda")
    seconds["codegen"] = time.perf_counter() - start
    if not kernels:
        return {}, []
    start = time.perf_counter()
    image = compile_source(source)
    if image.cache_hit:
        logger.debug("thunder: cuda kernels %s loaded from the cache", image.path)
    else:
        logger.debug("thunder: compiled cuda kernels in %.0f ms with: %s", image.compile_seconds * 1e3, image.command)
    if trace_enabled():
        log_trace("thunder: cuda kernel source (%s):\n%s", image.path, source)
    module = _core.CudaModule(image)
    launchers = {name: _launcher(name, module, source, trace, ins, outs, sizes, block, grid, workspace)
                 for name, ins, outs, sizes, block, grid, workspace in kernels}
    last_source = source
    seconds["compile"] = time.perf_counter() - start
    return launchers, [(image, source)]


#: Claims the prims the kernel plans fuse (as the CPU executor), on CUDA tensors of every non-complex dtype;
#: matmuls and what is built on them stay with torch (cuBLAS).
cuda_executor = Executor("cuda", {f"prims.{n}": "" for n in _core.fusible_prims()}, {}, fusion=True, lower=lower,
                         devices=("cuda",),
                         dtypes=tuple(d for n, d in _core.DType.__members__.items() if not n.startswith("complex")),
                         closed_by=("prims.matmul",))
