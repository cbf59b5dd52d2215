"""The CUDA dialect on a machine without a GPU: every fused pattern renders and compiles with NVRTC to sm_90
CUBIN (python -m thunder.executors.cuda --compile-check), and nothing CUDA is loaded by CPU-only use."""
import os
import subprocess
import sys

import pytest
import torch

import thunder
from thunder import _core
from thunder.executors.cudaex import nvrtc_library

needs_nvrtc = pytest.mark.skipif(nvrtc_library() is None, reason="nvidia-cuda-nvrtc is not installed")


@needs_nvrtc
def test_every_fused_pattern_compiles_to_sm90_without_spills():
    from thunder.executors.cuda import compile_check

    compiled, failed, records = compile_check("sm_90", quick=True, out=open(os.devnull, "w"))
    errors = [f"{r['program']} {r['kernel']}: {r['error'][:500]}" for r in records if "error" in r]
    assert not errors, "\n".join(errors)
    assert compiled > 100
    kinds = {r["kind"] for r in records}
    assert kinds == {"elementwise", "row", "two-stage"}


@needs_nvrtc
def test_compile_check_command_ends_with_its_count(tmp_path):
    """The CLI's last line, on a small program set (the full run is the test above)."""
    code = ("import sys; from thunder.executors import cuda; import torch\n"
            "cuda._programs = lambda quick=False: {'sample': (lambda x: (x.exp() * 2).sum(-1), (torch.randn(4, 64),), False)}\n"
            "sys.exit(cuda.main(['--compile-check', '--json', sys.argv[1]]))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "k.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "1 compiled, 0 failed"


@needs_nvrtc
def test_images_are_cached_by_source_arch_and_nvrtc_version(tmp_path):
    source = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n'
    lib = nvrtc_library()
    first = _core.compile_cuda(source, lib, "sm_90", str(tmp_path))
    again = _core.compile_cuda(source, lib, "sm_90", str(tmp_path))
    other = _core.compile_cuda(source, lib, "sm_80", str(tmp_path))
    assert not first.cache_hit and again.cache_hit and not other.cache_hit
    assert first.key == again.key != other.key
    assert again.cubin == first.cubin and again.cubin[:4] == b"\x7fELF" and ".target sm_90" in again.ptx
    assert [k[0] for k in again.kernels] == ["k"] and again.kernels[0][2:4] == (0, 0)
    # A corrupted entry is a miss: compiled again, never loaded.
    with open(first.path, "r+b") as f:
        f.seek(100)
        f.write(b"\0\0\0\0")
    assert not _core.compile_cuda(source, lib, "sm_90", str(tmp_path)).cache_hit


@needs_nvrtc
def test_a_source_that_does_not_compile_raises_with_nvrtcs_log(tmp_path):
    with pytest.raises(RuntimeError, match="NVRTC.*failed"):
        _core.compile_cuda('extern "C" __global__ void k() { undefined_thing(); }', nvrtc_library(), "sm_90", str(tmp_path))


def test_ptxas_report_is_parsed():
    log = ("ptxas info    : Compiling entry function 'k1' for 'sm_90'\nptxas info    : Function properties for k1\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 0 barriers, 8 bytes cumulative stack size\n")
    assert _core.parse_ptxas_report(log) == [("k1", 40, 4, 4, 8)]


def test_without_a_driver_loading_says_why():
    ok, why = _core.cuda_driver_status()
    if ok:
        pytest.skip("a CUDA driver is present")
    assert "libcuda.so.1" in why


def test_cpu_use_loads_no_cuda_library():
    code = ("import torch, thunder\n"
            "f = thunder.jit(lambda x: (x.sin() * 2).softmax(-1))\n"
            "f(torch.randn(4, 8))\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('nvrtc' in maps, 'libcuda' in maps)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_the_cuda_executor_beside_the_cpu_one_leaves_cpu_traces_as_they_were():
    from thunder.executors.cpuex import cpu_executor
    from thunder.executors.cudaex import cuda_executor
    from thunder.executors.torchex import torch_executor

    def f(x, w):
        return torch.nn.functional.layer_norm(x, (8,), w).relu() * 2

    args = (torch.randn(4, 8), torch.randn(8))
    texts = []
    for executors in ([cpu_executor, torch_executor], [cpu_executor, cuda_executor, torch_executor]):
        jitted = thunder.jit(f, executors=executors)
        torch.testing.assert_close(jitted(*args), f(*args))
        texts.append(str(thunder.last_traces(jitted)[-1]).split("\n", 1)[1])
    assert texts[0] == texts[1]


def test_cuda_launchers_are_made_without_a_gpu():
    # Their text is generated and compiled at lowering: a launcher that does not even compile (an argument list
    # out of step with the CPU launcher's helpers) must fail here, not first on a device.
    from thunder.executors import cuda as check, cudaex

    program = (lambda x, t: (x * t).softmax(-1) + t, (torch.randn(8, 96), 0.5), False, {"dynamic": True})
    found, errors = check.collect_traces({"p": program})
    assert not errors and len(found["p"]) == 1
    trace = found["p"][0]
    ((source, kernels),) = _core.render_cuda(trace, "cpu")
    assert kernels
    for name, ins, outs, sizes, block, grid, workspace, _, symbol, by_value in kernels:
        launcher = cudaex._launcher(name, None, source, trace, ins, outs, sizes, block, grid, workspace, symbol,
                                    by_value)
        assert launcher.registry_name.startswith(name + "_")
    # The numbers become 8-byte arguments as the CPU's do (one conversion): an int beyond 64 bits is refused
    # before any driver call.
    with pytest.raises(OverflowError, match="does not fit in 64 bits"):
        _core.launch_cuda(0, 1, 1, 0, [1 << 64])


def _cuda_trace():
    """exp(x) * s on cuda:1 with s a 0-dim CPU tensor, exp(z) * 2 on cuda:0, softmax(exp(c)) on the CPU, through the
    default passes with the CUDA, CPU and torch executors' tables."""
    from thunder.core.options import DEFAULT_PASSES
    from thunder.executors.cpuex import cpu_executor
    from thunder.executors.cudaex import cuda_executor
    from thunder.executors.torchex import torch_executor

    tables = [(ex.name, ex.callees, ex.fusion, list(ex.devices), list(ex.dtypes), list(ex.closed_by))
              for ex in (cuda_executor, cpu_executor, torch_executor)]
    b, f32 = _core.TraceBuilder(), _core.DType.float32
    x, s = b.add_input_tensor(f32, [4, 8], "cuda:1", False, []), b.add_input_tensor(f32, [], "cpu", False, [])
    z, c = b.add_input_tensor(f32, [4, 8], "cuda:0", False, []), b.add_input_tensor(f32, [4, 8], "cpu", False, [])
    exp = lambda v: b.call("ltorch", "exp", [v], {})  # noqa: E731
    outputs = (b.call("ltorch", "mul", [exp(x), s], {}), b.call("ltorch", "mul", [exp(z), 2.0], {}),
               b.call("ltorch", "softmax", [exp(c), -1], {}))
    return _core.run_pipeline(b.finish(outputs), list(DEFAULT_PASSES), None, tables)[-1].trace


def test_cuda_tensors_are_fused_one_kernel_per_device():
    """Kernel planning refused every tensor not on the CPU, and claiming compared "cuda:0" with the executor's
    "cuda": on a device, the CUDA executor fused nothing (the compile check renders CPU traces, so it never saw).
    Each device's ops make their own kernel; a 0-dim CPU tensor is a scalar input, as torch takes it."""
    calls = [line.split("(", 1)[0].split("= ")[1] + "(" + line.split("(", 1)[1].split(")")[0] + ")"
             for line in str(_cuda_trace()).splitlines() if "_fusion" in line and not line.lstrip().startswith("#")]
    assert calls == ["cuda_fusion0(t0, t1)", "cuda_fusion1(t2)", "cpu_fusion0(t3)"], calls


def test_cuda_launchers_run_on_their_inputs_device(monkeypatch):
    """A launcher makes its inputs' device current for the call (a module is loaded, and a kernel launched, per
    context; torch's current device may be another) and passes a 0-dim CPU input by value (read on the host: no
    copy to the device, no synchronization). With NVRTC, the trace's kernels compile as lowering does on a
    device."""
    import inspect

    from thunder.executors import cudaex

    trace = _cuda_trace()
    ((source, kernels),) = _core.render_cuda(trace, "cuda")
    texts = {name: inspect.getsource(cudaex._launcher(name, None, source, trace, *rest[:6], rest[7], rest[8]))
             for name, *rest in kernels}
    assert sorted(texts) == ["cuda_fusion0", "cuda_fusion1"]
    for name, text in texts.items():
        assert "    device = a0.device\n    index = device.index\n    if index != current_device():\n" \
               f"        with device_guard(device):\n            return {name}(" in text, text
    assert "    a1 = a1.item()\n" in texts["cuda_fusion0"] and "[a0.data_ptr(), a1, o0.data_ptr()" in texts["cuda_fusion0"]
    assert ".item()" not in texts["cuda_fusion1"] and ".to(" not in texts["cuda_fusion0"] + texts["cuda_fusion1"]
    assert "(const float* __restrict__ in0,\n    const double in1,\n" in source
    if nvrtc_library() is None:
        return
    monkeypatch.setattr(cudaex, "device_arch", lambda device=None: "sm_90")
    monkeypatch.setattr(_core, "CudaModule", _Unloaded)  # loading needs a driver
    launchers, units = cudaex.lower(trace)
    assert sorted(launchers) == ["cuda_fusion0", "cuda_fusion1"] and len(units) == 1


class _Unloaded:
    """A CudaModule that loads nothing (loading needs a driver)."""

    def __init__(self, image):
        self.image = image


def _layers_trace(layers=3, width=8):
    """``layers`` times tanh(x) * 2 then a matmul, on cuda:0: each layer's fusion renders alike but for its name."""
    from thunder.core.options import DEFAULT_PASSES
    from thunder.executors.cudaex import cuda_executor
    from thunder.executors.torchex import torch_executor

    tables = [(ex.name, ex.callees, ex.fusion, list(ex.devices), list(ex.dtypes), list(ex.closed_by))
              for ex in (cuda_executor, torch_executor)]
    b, f32 = _core.TraceBuilder(), _core.DType.float32
    x, w = b.add_input_tensor(f32, [4, width], "cuda:0", False, []), b.add_input_tensor(f32, [width, width], "cuda:0", False, [])
    for _ in range(layers):
        x = b.call("ltorch", "matmul", [b.call("ltorch", "mul", [b.call("ltorch", "tanh", [x], {}), 2.0], {}), w], {})
    out = b.call("ltorch", "sigmoid", [x], {})
    return _core.run_pipeline(b.finish((out,)), list(DEFAULT_PASSES), None, tables)[-1].trace


def test_cuda_kernels_repeating_a_layer_are_rendered_once():
    """A model's layers make fusions whose texts differ only in their names: NVRTC compiled each (GPT-2's 12
    layers, 12 times). A repeat is listed with the symbol of the first, whose code it runs."""
    trace = _layers_trace()
    ((source, kernels),) = _core.render_cuda(trace, "cuda")
    assert [k[0] for k in kernels] == ["cuda_fusion0", "cuda_fusion1", "cuda_fusion2", "cuda_fusion3"], kernels
    assert source.count("__global__") == 2
    symbols = {k[0]: k[8] for k in kernels}
    assert symbols == {"cuda_fusion0": "cuda_fusion0", "cuda_fusion1": "cuda_fusion0", "cuda_fusion2": "cuda_fusion0",
                       "cuda_fusion3": "cuda_fusion3"}
    assert len({k[7] for k in kernels}) == 2  # keys: the text apart from the name


def test_cuda_units_split_for_parallel_compiles_and_leave_out_loaded_kernels():
    """At most ``parts`` units of consecutive distinct kernels (NVRTC compiles them in threads); kernels whose key
    is loaded go into a last unit without source."""
    trace = _cuda_trace()
    one = _core.render_cuda(trace, "cuda", 1)
    two = _core.render_cuda(trace, "cuda", 2)
    assert len(one) == 1 and len(two) == 2 and all(src.count("__global__") == 1 for src, _ in two)
    assert sorted(k[0] for _, ks in two for k in ks) == ["cuda_fusion0", "cuda_fusion1"]
    keys = {k[0]: k[7] for k in one[0][1]}
    ((src0, ks0), (src1, ks1)) = _core.render_cuda(trace, "cuda", 2, {keys["cuda_fusion1"]})
    assert src0.count("__global__") == 1 and [k[0] for k in ks0] == ["cuda_fusion0"]
    assert src1 == "" and [k[0] for k in ks1] == ["cuda_fusion1"]
    assert _core.render_cuda(_core.TraceBuilder().finish(()), "cuda", 2) == []


@pytest.mark.skipif(nvrtc_library() is None, reason="needs NVRTC (requirements-dev.txt)")
def test_cuda_lower_compiles_each_kernel_once_per_jitted_function(monkeypatch, tmp_path):
    """Units compile in parallel threads; a second trace of the same jitted function (another graph, another
    shape) reuses the kernels the first compiled, by key, as the CPU executor does."""
    from thunder.executors import cudaex

    monkeypatch.setattr(cudaex, "device_arch", lambda device=None: "sm_90")
    monkeypatch.setattr(cudaex, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(_core, "CudaModule", _Unloaded)
    monkeypatch.setattr(cudaex, "KERNELS_PER_UNIT", 1)
    monkeypatch.setattr(cudaex.os, "cpu_count", lambda: 2)
    compiled = {}
    launchers, units = cudaex.lower(_layers_trace(), compiled=compiled)
    assert sorted(launchers) == [f"cuda_fusion{k}" for k in range(4)] and len(units) == 2
    assert {u.cache_hit for u, _ in units} == {False} and len(compiled) == 2
    # A deeper model: its repeated layer and its last kernel were compiled for the first trace.
    launchers, again = cudaex.lower(_layers_trace(5), compiled=compiled)
    assert len(launchers) == 6 and sorted(s for _, s in again) == sorted(s for _, s in units)
    assert len(compiled) == 2


def test_half_precision_graphs_keep_thunders_autodiff_where_their_device_fuses():
    """A float16/bfloat16 graph on CUDA tensors kept torch's autograd (unmeasured then), so no backward region ran
    as a CUDA kernel; its backward kernels' values are checked by the emulator (test_cuda_emulation.py). Without a
    fusion executor for the device, torch's derivative kernels stay the faster choice."""
    from thunder.core.compile import _autodiff_held_back
    from thunder.executors.cpuex import cpu_executor
    from thunder.executors.cudaex import cuda_executor
    from thunder.executors.torchex import torch_executor

    def trace_on(*devices):
        b = _core.TraceBuilder()
        xs = [b.add_input_tensor(_core.DType.bfloat16, [4, 8], d, True, []) for d in devices]
        return b.finish(tuple(b.call("ltorch", "exp", [x], {}) for x in xs))

    assert _autodiff_held_back(trace_on("cuda:0"), None, [cuda_executor, torch_executor]) is None
    assert _autodiff_held_back(trace_on("cpu"), None, [cpu_executor, cuda_executor, torch_executor]) is None
    reason = _autodiff_held_back(trace_on("cuda:0", "cpu"), None, [cpu_executor, torch_executor])
    assert "fusion executor for their device (cuda;" in reason
    assert "(cpu, cuda;" in _autodiff_held_back(trace_on("cuda:1", "cpu"), None, [torch_executor])


def test_two_stage_workspaces_are_per_device_and_stream():
    """A two-stage reduction's block counter lives in its launcher's workspace: two streams launching the same
    graph at once shared it (each launch's last block would be miscounted)."""
    from thunder.executors.cudaex import _workspace

    cache = {}
    first, again, other = _workspace(cache, "cpu", 7, 16), _workspace(cache, "cpu", 7, 16), _workspace(cache, "cpu", 9, 16)
    assert first is again and other is not first and not first.any() and first.numel() == 16
