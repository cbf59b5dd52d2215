"""Every trace runs as printed: the text of any trace -- fusion and memory-planning traces, forward and backward,
included -- executed in a fresh namespace defines a function that gives the compiled graph's answer. The text
imports what it calls: kernels by a stable name from thunder's kernel registry (thunder.core.registry), the
objects a graph holds (opaque callables, compile-time constants) likewise, plain imports as such.
(tests/conftest.py's round-trip checks run every test program's traces this way too.)"""
import gc

import torch
import torch.nn as nn

import thunder
from thunder.core import registry
from conftest import as_printed, assert_same, check_program


def gelu_sum(a, b):
    return torch.nn.functional.gelu(a @ b + 1.0).sum(dim=-1)


def run_printed(view, *args):
    """Executes the text of ``view`` in a fresh namespace and calls the function it defines."""
    namespace = {}
    exec(str(view), namespace)
    return namespace["computation"](*args)


def test_final_fused_trace_runs_as_printed():
    jitted = thunder.jit(gelu_sum)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    out = jitted(a, b)
    final = thunder.last_traces(jitted)[-1]
    text = str(final)
    assert "cpu_fusion0(" in text and "del " in text  # a fusion and memory planning
    assert "from thunder.core.registry import cpu_fusion0_" in text
    assert_same(run_printed(final, a, b)[0], out)
    for view in thunder.last_traces(jitted):  # every stage of the pipeline
        assert_same(run_printed(view, a, b)[0], out)


def test_training_forward_and_backward_traces_run_as_printed():
    jitted = thunder.jit(gelu_sum)
    a = torch.randn(8, 16, requires_grad=True)
    b = torch.randn(16, 4)
    out = jitted(a, b)
    out.sum().backward()
    forward = thunder.last_traces(jitted)[-1]
    outputs, saved = run_printed(forward, a.detach(), b)
    assert_same(outputs[0], out.detach())
    backward = thunder.last_backward_traces(jitted)
    assert backward and "cpu_fusion" in str(backward[-1])
    for view in backward:
        grads = run_printed(view, list(saved), torch.ones(8))  # the backward empties the list of saved values
        assert_same(grads[0], a.grad)
    # the forward's and the backward's kernels are both "cpu_fusion0" in their traces, under distinct registry names
    forward_kernel = next(l for l in str(forward).splitlines() if " as cpu_fusion0" in l)
    backward_kernel = next(l for l in str(backward[-1]).splitlines() if " as cpu_fusion0" in l)
    assert forward_kernel != backward_kernel


def test_opaque_callables_and_constants_are_imported_from_the_registry():
    def fn(x):
        return torch.ops.aten.sin.default(x) * 2 + torch.arange(4.0) * 3  # an aten overload: opaque, no public name

    jitted = thunder.jit(fn)
    x = torch.randn(4)
    out = jitted(x)
    final = thunder.last_traces(jitted)[-1]
    text = str(final)
    assert "import _opaque0_" in text and "import _constants_" in text, text
    assert_same(run_printed(final, x)[0], out)


def test_a_module_with_a_grad_mode_change_runs_as_printed():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            with torch.no_grad():
                scale = self.fc(x).abs().mean()
            return self.fc(x).relu() * scale

    torch.manual_seed(0)
    jitted = check_program(M(), torch.randn(2, 4))  # runs every trace as printed, on the graph's inputs
    text = str(thunder.last_traces(jitted)[-1])
    assert "torch._C._set_grad_enabled(False)" in text and "import cpu_fusion" in text, text


def test_kernel_names_are_stable_and_released_with_their_graph():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    first, second = thunder.jit(gelu_sum), thunder.jit(gelu_sum)
    first(a, b)
    second(a, b)

    def imports(jitted):
        return [l for l in str(thunder.last_traces(jitted)[-1]).splitlines() if "thunder.core.registry" in l]

    assert imports(first) == imports(second)  # the same kernel gets the same name
    name = imports(first)[0].split(" import ")[1].split(" as ")[0]
    assert registry.lookup(name) is not None
    del first, second
    torch._dynamo.reset()  # Dynamo's cache on gelu_sum's code holds the compiled graphs too
    gc.collect()
    assert name not in registry.registered_names()


def test_the_fresh_namespace_of_the_round_trip_helper_is_empty():
    jitted = thunder.jit(gelu_sum)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    out = jitted(a, b)
    fn = as_printed(thunder.last_traces(jitted)[-1])
    assert "cpu_fusion0" in fn.__globals__ and fn.__globals__["cpu_fusion0"].registry_name.startswith("cpu_fusion0_")
    assert_same(fn(a, b)[0], out)


def test_the_symbolic_traces_of_a_graph_serving_every_length_run_as_printed():
    """A graph with a symbolic size (a second length, dynamic=None): its symbolic traces from fusion on call the
    kernels of the signature that ran last, and import them (they printed ``cpu_fusion0(...)`` with no import, and
    raised NameError), forward and backward."""
    def f(x, w):
        return torch.nn.functional.layer_norm(x @ w, (8,)).relu() * x.shape[0]

    jitted = thunder.jit(f)
    for n in (4, 5, 6):
        x, w = torch.randn(n, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
        out = jitted(x, w)
        out.sum().backward()
    traces = thunder.last_traces(jitted)
    assert any("symbolic" in view.name for view in traces)
    x_grad, w_grad, x, w = x.grad, w.grad, x.detach(), w.detach()

    def args(view):
        return (6, x, w) if len(view.trace.inputs) == 3 else (x, w)
    for view in traces:
        result = run_printed(view, *args(view))
        assert_same((result[0] if view.saves else result)[0], out.detach())
    saved = run_printed(traces[-1], *args(traces[-1]))[1]
    for view in thunder.last_backward_traces(jitted):
        grads = run_printed(view, list(saved), torch.ones(6, 8))  # the backward empties the list it is given
        assert_same(list(grads[-2:]), [x_grad, w_grad])  # after the size's (None)


def test_each_input_of_a_printed_trace_says_what_it_is_in_the_program():
    """The trace's inputs are the graph's, in the order Dynamo first used them (``b`` before ``a`` here): each
    input's comment names the argument, parameter or size it is, in static, symbolic and module graphs."""
    def f(a, b):
        return b.exp() - a

    jitted = thunder.jit(f)
    a, b = torch.randn(3), torch.randn(3)
    jitted(a, b)
    text = str(thunder.last_traces(jitted)[-1])
    assert '# t0: "cpu f32[3]"  (b)' in text and '# t1: "cpu f32[3]"  (a)' in text, text
    assert_same(run_printed(thunder.last_traces(jitted)[-1], b, a)[0], f(a, b))

    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jitted = thunder.jit(model)
    jitted(torch.randn(2, 3))
    text = str(thunder.last_traces(jitted)[-1])
    assert "(self[0].weight)" in text and "(self[0].bias)" in text and "(args[0])" in text, text

    jitted = thunder.jit(lambda x: x * 2, dynamic=True)
    jitted(torch.randn(5))
    text = str(thunder.last_traces(jitted)[-1])
    assert '"int"  (x.size()[0])' in text and "(x)" in text, text


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x ** 2


def test_symbolic_traces_import_the_graphs_objects_as_static_ones_do():
    """With symbolic sizes (dynamic=True), every forward and backward trace imports what it calls beyond kernels:
    an opaque callable (a custom autograd.Function), the folded constants (``_constants``) and the generic VJP
    (``autograd_vjp``); a shape signature's namespace had the names without their imports (NameError)."""
    def f(x):
        return _Cube.apply(x) * torch.arange(4.0) + x.topk(2, dim=0).values.sum()

    jitted = thunder.jit(f, dynamic=True)
    x = torch.randn(6, 4, requires_grad=True)
    jitted(x).sum().backward()
    for view in thunder.last_traces(jitted) + thunder.last_backward_traces(jitted):
        namespace = {}
        exec(str(view), namespace)
        body = "\n".join(line for line in str(view).split("def computation")[1].splitlines()
                         if not line.strip().startswith("#"))
        for name in ("_constants", "_autograd_function0", "autograd_vjp"):
            assert name not in body or name in namespace, (view.name, name)
    assert_same(run_printed(thunder.last_traces(jitted)[-1], 6, 4, x.detach())[0][0], f(x).detach())
