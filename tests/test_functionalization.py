"""In-place writes under thunder.jit (issue #11): the importer lowers every write to an out-of-place op plus
``ltorch.copy_``, the ``functionalize`` pass removes the writes, and the inputs written are copied back.

Every case runs the program eagerly and jitted on equal, independent inputs and compares:

- the returned values (dtype, shape, values);
- every input afterwards (and the bases of views passed in): mutated exactly as eager mutates them;
- identity: where eager returns one of its inputs (``x.add_(y)`` returns ``x``), the jitted program returns the
  very same input object;
- aliasing: a returned tensor shares memory with an input iff eager's does (``return x[0].add_(1)`` returns a view).

Sources of cases: PyTorch's OpInfo database (every OpInfo with an in-place variant), ``out=``, ``inplace=True``,
augmented assignment, subscript writes, writes through views and reads of other views of the same memory,
module buffers and parameters, and inputs that alias each other (thunder's guard,
``thunder/frontend/dynamo.py::_guard_input_aliasing``, must make these behave as eager).
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree

import thunder
from thunder import testing_opinfo as T
from thunder.core.compile import CompiledGraph

from conftest import assert_same, assert_same_outcome, outcome


# ---------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------

#: The generator inputs are drawn from (see twice()).
_GEN = torch.Generator()


def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_GEN).to(dtype)


class In:
    """A call's arguments, and further tensors to compare after the call (the bases of views passed in)."""

    def __init__(self, *args, watch=()):
        self.args, self.watch = args, tuple(watch)


def _as_in(x):
    return x if isinstance(x, In) else In(*x) if isinstance(x, tuple) else In(x)


def _storage(t):
    return t.untyped_storage().data_ptr() if t.layout == torch.strided and t.numel() else None


def _shares(t, tensors):
    s = _storage(t)
    return s is not None and any(_storage(u) == s for u in tensors)


def compare_call(actual, expected, c_in, e_in, *, aliasing=True, what="result"):
    """The jitted call's result and inputs-after against eager's: values, identities, aliasing."""
    assert_same(actual, expected, path=what)
    c_leaves, e_leaves = pytree.tree_leaves((c_in.args, c_in.watch)), pytree.tree_leaves((e_in.args, e_in.watch))
    c_tensors = [t for t in c_leaves if isinstance(t, torch.Tensor)]
    e_tensors = [t for t in e_leaves if isinstance(t, torch.Tensor)]
    for i, (c, e) in enumerate(zip(c_tensors, e_tensors)):
        assert_same(c, e, path=f"input tensor {i} after the call")
    a_out, e_out = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    for i, (a, e) in enumerate(zip(a_out, e_out)):
        if not isinstance(e, torch.Tensor):
            continue
        for k, inp in enumerate(e_tensors):
            if e is inp:
                assert a is c_tensors[k], f"output {i}: eager returns input tensor {k} itself, thunder another tensor"
        if aliasing:
            assert _shares(a, c_tensors) == _shares(e, e_tensors), \
                f"output {i}: shares memory with an input in eager: {_shares(e, e_tensors)}, in thunder: " \
                f"{_shares(a, c_tensors)}"


def graphs(jitted):
    return list(jitted._thunder_state.graphs)


def assert_compiled(jitted):
    """Every captured graph was compiled by thunder (none runs with torch as captured)."""
    gs = graphs(jitted)
    assert gs, f"nothing was captured:\n{jitted}"
    uncompiled = [g for g in gs if not isinstance(g, CompiledGraph)]
    assert not uncompiled, "graphs run with torch as captured: " + "; ".join(g.reason for g in uncompiled)


def twice(make, seed=0):
    """Two equal, independent sets of inputs from ``make()`` (which draws from _GEN), for eager and for thunder."""
    _GEN.manual_seed(seed)
    first = _as_in(make())
    _GEN.manual_seed(seed)
    return first, _as_in(make())


def check(fn, make, *, calls=2, executors=None, compiled=True, aliasing=True):
    """``fn`` jitted against eager, each call on fresh inputs from ``make()`` (a tuple of arguments, or an In).
    ``calls`` > 1 also runs the cached program. Returns the jitted callable."""
    jitted = thunder.jit(fn, executors=executors)
    for call in range(calls):
        e_in, c_in = twice(make, seed=call)
        expected = fn(*e_in.args)
        actual = jitted(*c_in.args)
        compare_call(actual, expected, c_in, e_in, aliasing=aliasing, what=f"call {call}")
    if compiled:
        assert_compiled(jitted)
    return jitted


def check_raises(fn, make):
    """Eager raises on these inputs; so must the jitted program, leaving the inputs as eager leaves them."""
    e_in, c_in = twice(make)
    with pytest.raises(Exception) as eager:
        fn(*e_in.args)
    jitted = thunder.jit(fn)
    with pytest.raises(Exception) as compiled:
        jitted(*c_in.args)
    return eager.value, compiled.value


def mod_state(m):
    return {k: v.detach().clone() for k, v in list(m.named_parameters()) + list(m.named_buffers())}


# ---------------------------------------------------------------------------------------------
# 1. Every OpInfo with an in-place variant
# ---------------------------------------------------------------------------------------------

#: float32 samples run per OpInfo (the first ones), and samples of the one other dtype.
FIRST_SAMPLES = 8
OTHER_SAMPLES = 3
#: The other dtype of each OpInfo is taken in turn from those it supports, so that the sweep covers them all.
_OTHER_DTYPES = (torch.int64, torch.bfloat16, torch.float64, torch.bool, torch.float16, torch.int32)


def _inplace_tasks():
    out = []
    ops = sorted((k, op) for k, op in T.op_db().items() if op.inplace_variant is not None)
    for n, (op_id, op) in enumerate(ops):
        dts = T.supported_dtypes(op)
        if not dts:
            continue
        first = torch.float32 if torch.float32 in dts else dts[0]
        out.append((op_id, first, FIRST_SAMPLES))
        others = [d for d in _OTHER_DTYPES if d in dts and d != first]
        if others:
            out.append((op_id, others[n % len(others)], OTHER_SAMPLES))
    return out


#: (OpInfo id, dtype name) -> reason: thunder bugs found by the sweep (strict: they must fail until fixed).
_INPLACE_XFAIL = {}


def _task_param(task, xfail=None):
    op_id, dtype, limit = task
    name = T.DTYPE_NAMES[dtype]
    xfail = xfail or {}
    marks = [pytest.mark.xfail(strict=True, reason=xfail[(op_id, name)])] if (op_id, name) in xfail else []
    return pytest.param(op_id, dtype, limit, id=f"{op_id}-{name}", marks=marks)


_TASKS = _inplace_tasks()


def _samples(op, dtype, limit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        return list(T._take(op.sample_inputs("cpu", dtype, requires_grad=False), limit))


def _run_eager(fn, args, kwargs):
    torch.manual_seed(1234)  # random in-place variants (uniform_, bernoulli_, dropout) draw the same numbers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _inplace_samples(op_id, dtype, limit):
    """(index, sample, eager's args, kwargs, result or the exception it raised) of the first samples."""
    op = T.op_db()[op_id]
    fn = op.get_inplace()
    for i, s in enumerate(_samples(op, dtype, limit)):
        if not isinstance(s.input, torch.Tensor):
            continue
        args, kwargs = T._clone(((s.input, *s.args), dict(s.kwargs)))
        try:
            result = _run_eager(fn, args, kwargs)
        except Exception as e:  # noqa: BLE001
            result = e
        yield i, s, fn, args, kwargs, result


@pytest.mark.parametrize("op_id,dtype,limit", [_task_param(t, _INPLACE_XFAIL) for t in _TASKS])
def test_opinfo_inplace_variant(op_id, dtype, limit):
    """The in-place variant of each sample, jitted: result, the mutated input (values, and the returned tensor is
    the input itself when eager's is), the other arguments untouched, aliasing as eager's."""
    T._fast_dynamo()
    problems, ran = [], 0
    documented = T.skip_reason(op_id, T.DTYPE_NAMES[dtype], "inplace") or \
        T.skip_reason(op_id, T.DTYPE_NAMES[dtype], "forward")
    if documented:
        pytest.skip(f"documented in thunder.testing_opinfo.SKIPS: {documented}")
    for i, s, fn, e_args, e_kwargs, expected in _inplace_samples(op_id, dtype, limit):
        if isinstance(expected, Exception):
            continue  # eager rejects this sample (see test_opinfo_inplace_rejections)
        c_args, c_kwargs = T._clone(((s.input, *s.args), dict(s.kwargs)))
        jitted = thunder.jit(T._fresh_function(fn, f"{op_id.replace('.', '_')}_{i}"))
        ran += 1
        try:
            actual = _run_eager(jitted, c_args, c_kwargs)
        except Exception as e:  # noqa: BLE001
            problems.append(f"sample {i}: thunder raised {type(e).__name__}: {str(e).strip()[:300]}")
            continue
        try:
            T.compare(actual, expected, dtype, "forward")
            T.compare(T._tensors((c_args, c_kwargs)), T._tensors((e_args, e_kwargs)), dtype, "forward")
            if isinstance(expected, torch.Tensor) and expected is e_args[0] and actual is not c_args[0]:
                raise AssertionError("eager returns the input itself, thunder another tensor")
            a_alias, e_alias = T._aliasing(actual, (c_args, c_kwargs)), T._aliasing(expected, (e_args, e_kwargs))
            if a_alias != e_alias:
                raise AssertionError(f"outputs sharing an input's memory: thunder {a_alias}, eager {e_alias}")
            # A graph Dynamo captured must compile (a graph break is Dynamo's choice; a graph thunder hands back to
            # torch is a failure of the importer or of a pass).
            uncompiled = [g.reason for g in jitted._thunder_state.graphs if not isinstance(g, CompiledGraph)]
            if uncompiled:
                raise AssertionError(f"a graph runs uncompiled: {uncompiled[0]}")
        except AssertionError as e:
            problems.append(f"sample {i} ({T._path(jitted)[0]}): {str(e)[:400]}")
    assert not problems, f"{op_id} {dtype}: {len(problems)} of {ran} samples fail:\n" + "\n".join(problems[:6])


@pytest.mark.parametrize("op_id,dtype,limit", [_task_param(t) for t in _TASKS])
def test_opinfo_inplace_rejections(op_id, dtype, limit):
    """Samples eager rejects (an in-place op whose result dtype cannot be cast to the input's, a shape the input
    cannot take): the jitted program raises too, and leaves the input as eager leaves it."""
    T._fast_dynamo()
    problems = []
    for i, s, fn, e_args, e_kwargs, expected in _inplace_samples(op_id, dtype, limit):
        if not isinstance(expected, Exception):
            continue
        c_args, c_kwargs = T._clone(((s.input, *s.args), dict(s.kwargs)))
        jitted = thunder.jit(T._fresh_function(fn, f"{op_id.replace('.', '_')}_r{i}"))
        try:
            _run_eager(jitted, c_args, c_kwargs)
            problems.append(f"sample {i}: eager raises {type(expected).__name__} ({str(expected)[:160]}), "
                            "thunder returns")
        except Exception:  # noqa: BLE001
            pass
        try:
            T.compare(T._tensors((c_args, c_kwargs)), T._tensors((e_args, e_kwargs)), dtype, "forward")
        except AssertionError as e:
            problems.append(f"sample {i}: inputs after the failed call differ from eager's: {str(e)[:200]}")
    assert not problems, "\n".join(problems[:6])


def test_inplace_sweep_covers_native_and_opaque():
    """The sweep runs every OpInfo with an in-place variant, thunder-native or not."""
    ids = {t[0] for t in _TASKS}
    with_inplace = {k for k, op in T.op_db().items() if op.inplace_variant is not None and T.supported_dtypes(op)}
    assert ids == with_inplace
    assert ids & T.NATIVE_OPINFOS and ids - T.NATIVE_OPINFOS


def test_inplace_variants_under_default_executors():
    """The first float32 sample of every third native OpInfo with an in-place variant (each kernel costs a compile),
    under the default executors: the CPU fusion executor fuses the out-of-place op and the copy-back."""
    T._fast_dynamo()
    problems = []
    native = [op_id for op_id, dtype, _ in _TASKS if op_id in T.NATIVE_OPINFOS and dtype == torch.float32]
    for op_id in native[::3]:
        dtype = torch.float32
        for i, s, fn, e_args, e_kwargs, expected in _inplace_samples(op_id, dtype, 1):
            if isinstance(expected, Exception):
                continue
            c_args, c_kwargs = T._clone(((s.input, *s.args), dict(s.kwargs)))
            jitted = thunder.jit(T._fresh_function(fn, f"{op_id.replace('.', '_')}_cpu{i}"), executors="cpu")
            try:
                actual = _run_eager(jitted, c_args, c_kwargs)
                # The fused kernels round transcendental functions in their own way: float32 tolerance of the
                # CPU executor's own tests.
                assert_same(actual, expected, rtol=1e-5, atol=1e-5)
                assert_same(T._tensors((c_args, c_kwargs)), T._tensors((e_args, e_kwargs)), rtol=1e-5, atol=1e-5)
                if isinstance(expected, torch.Tensor) and expected is e_args[0]:
                    assert actual is c_args[0], "eager returns the input itself, thunder another tensor"
            except Exception as e:  # noqa: BLE001
                problems.append(f"{op_id} sample {i}: {type(e).__name__}: {str(e)[:300]}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# 2. out=
# ---------------------------------------------------------------------------------------------



@pytest.fixture(autouse=True)
def _seeded():
    _GEN.manual_seed(0)
    torch.manual_seed(0)


def _ab(shape=(3, 4)):
    g = torch.Generator().manual_seed(7)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


_OUT_CASES = {
    "add": lambda a, b, o: torch.add(a, b, out=o),
    "add_alpha": lambda a, b, o: torch.add(a, b, alpha=2, out=o),
    "sub": lambda a, b, o: torch.sub(a, b, out=o),
    "mul": lambda a, b, o: torch.mul(a, b, out=o),
    "div_floor": lambda a, b, o: torch.div(a, b, rounding_mode="floor", out=o),
    "maximum": lambda a, b, o: torch.maximum(a, b, out=o),
    "atan2": lambda a, b, o: torch.atan2(a, b, out=o),
    "sin": lambda a, b, o: torch.sin(a, out=o),
    "exp": lambda a, b, o: torch.exp(a, out=o),
    "clamp": lambda a, b, o: torch.clamp(a, -0.5, 0.5, out=o),
    "where": lambda a, b, o: torch.where(a > 0, a, b, out=o),
    "neg": lambda a, b, o: torch.neg(a, out=o),
}


@pytest.mark.parametrize("name", sorted(_OUT_CASES))
def test_out_variant(name):
    op = _OUT_CASES[name]

    def f(a, b, o):
        r = op(a, b, o)
        return r, o.sum()

    check(f, lambda: (*_ab(), torch.empty(3, 4).fill_(9.0)))


def test_out_variant_into_a_view_of_an_input_and_into_an_input():
    def into_view(a, b, base):
        torch.mul(a, b, out=base[1:, ::2])
        return base * 1

    check(into_view, lambda: In(*_ab((2, 3)), torch.zeros(3, 6)))

    def into_input(a, b):
        r = torch.add(a, b, out=a)
        return r

    check(into_input, lambda: _ab())

    def into_local(a, b):
        o = torch.zeros_like(a)
        torch.sub(a, b, out=o)
        o.mul_(2)
        return o

    check(into_local, lambda: _ab())


def test_out_variant_reductions_and_matmul():
    def f(a, b, o1, o2, o3):
        torch.sum(a, 1, out=o1)
        torch.cumsum(a, 0, out=o2)
        torch.matmul(a, b.t(), out=o3)
        return o1 + 1, o2, o3

    check(f, lambda: (*_ab(), torch.empty(3), torch.empty(3, 4), torch.empty(3, 3)))


def test_out_variant_resizes_an_empty_out():
    """eager resizes an out= tensor with no elements to the result's shape."""
    def f(a, b, o):
        torch.add(a, b, out=o)
        return o * 2

    check(f, lambda: (*_ab(), torch.empty(0)), compiled=False)


def test_out_variant_casts_up_and_refuses_down():
    def f(a, b, o):
        torch.add(a, b, out=o)
        return o

    check(f, lambda: (*_ab(), torch.zeros(3, 4, dtype=torch.float64)), compiled=False)
    check_raises(f, lambda: (*_ab(), torch.zeros(3, 4, dtype=torch.int64)))


# ---------------------------------------------------------------------------------------------
# 3. inplace=True
# ---------------------------------------------------------------------------------------------

_INPLACE_FUNCTIONAL = {
    "relu": lambda x: F.relu(x, inplace=True),
    "relu_positional": lambda x: F.relu(x, True),
    "relu6": lambda x: F.relu6(x, inplace=True),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2, inplace=True),
    "leaky_relu_positional": lambda x: F.leaky_relu(x, 0.1, True),
    "elu": lambda x: F.elu(x, alpha=0.5, inplace=True),
    "celu": lambda x: F.celu(x, alpha=2.0, inplace=True),
    "selu": lambda x: F.selu(x, inplace=True),
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5, inplace=True),
    "hardtanh_positional": lambda x: F.hardtanh(x, -0.25, 0.75, True),
    "silu": lambda x: F.silu(x, inplace=True),
    "hardswish": lambda x: F.hardswish(x, inplace=True),
    "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True),
    "mish": lambda x: F.mish(x, inplace=True),
    "threshold": lambda x: F.threshold(x, 0.1, 20.0, inplace=True),
    "dropout_eval": lambda x: F.dropout(x, 0.5, training=False, inplace=True),
    "torch.relu_": lambda x: torch.relu_(x),
    "torch.sigmoid_": lambda x: torch.sigmoid_(x),
    "nn.ReLU(inplace=True)": nn.ReLU(inplace=True),
    "nn.LeakyReLU(0.3, True)": nn.LeakyReLU(0.3, True),
    "nn.Hardtanh(inplace=True)": nn.Hardtanh(-1.0, 0.5, inplace=True),
    "nn.ELU(inplace=True)": nn.ELU(inplace=True),
    "nn.ReLU6(inplace=True)": nn.ReLU6(inplace=True),
    "nn.SiLU(inplace=True)": nn.SiLU(inplace=True),
}


@pytest.mark.parametrize("name", sorted(_INPLACE_FUNCTIONAL))
def test_inplace_true_on_an_input(name):
    act = _INPLACE_FUNCTIONAL[name]

    def f(x):
        return act(x)

    check(f, lambda: (_randn(4, 5) * 2,))


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "elu", "hardtanh", "silu", "nn.ReLU(inplace=True)"])
def test_inplace_true_on_intermediates_and_views(name):
    act = _INPLACE_FUNCTIONAL[name]

    def local(x):
        y = x * 3 - 1
        z = act(y)
        return z is y, y + 0, x

    check(local, lambda: (_randn(4, 5),))

    def view(x):
        act(x[1:, :2])
        return x.sum(1)

    check(view, lambda: (_randn(4, 5),))


def test_inplace_module_in_a_sequential_with_grads():
    """nn.ReLU(inplace=True) after a Linear (a non-leaf, as in real models): values and gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU(inplace=True), nn.Linear(6, 2), nn.LeakyReLU(0.1, inplace=True))
    ref = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for _ in range(2):
        x = torch.randn(3, 5)
        out, expected = jitted(x), ref(x)
        assert_same(out, expected)
        out.sum().backward()
        expected.sum().backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_same(p.grad, q.grad, path=n)
    assert_compiled(jitted)


# ---------------------------------------------------------------------------------------------
# 4. Augmented assignment
# ---------------------------------------------------------------------------------------------

#: The augmented assignment operators, each as a function written with the statement itself (`x += y`): what
#: Dynamo sees is the bytecode of that statement, not a call of operator.iadd.
_AUG_TEMPLATE = """
def input_tensor_rhs(x, y):
    z = x
    z {op} y
    return z, x * 1

def input_scalar_rhs_then_local(x, y):
    x {op} {scalar}
    w = x * 2
    w {op} y[0]
    return w, x

def through_a_view(x, y):
    v = x[1:]
    v {op} y[:1]
    x[0] {op} {scalar}
    return x.sum()
"""
_AUG_FLOAT_OPS = ("+=", "-=", "*=", "/=", "//=", "%=", "**=")
_AUG_INT_OPS = ("+=", "-=", "*=", "//=", "%=", "&=", "|=", "^=", "<<=", ">>=")


def _aug_functions(op, scalar):
    namespace = {}
    exec(compile(_AUG_TEMPLATE.format(op=op, scalar=scalar), f"<augmented {op}>", "exec"), namespace)
    return [v for k, v in namespace.items() if not k.startswith("__")]


def _floats(*shape):
    signs = torch.tensor([1.0, -1.0]).repeat(shape[-1] // 2 + 1)[:shape[-1]]
    return (_randn(*shape).abs() + 0.5) * signs


def _ints(*shape, low=1, high=7):
    return torch.randint(low, high, shape, generator=_GEN)


@pytest.mark.parametrize("op", _AUG_FLOAT_OPS)
def test_augmented_assignment_float(op):
    for f in _aug_functions(op, 1.5):
        check(f, lambda: (_floats(3, 4), _floats(3, 4).abs() + 0.5))


@pytest.mark.parametrize("op", _AUG_INT_OPS)
def test_augmented_assignment_int(op):
    for f in _aug_functions(op, 2):
        check(f, lambda: (_ints(3, 4), _ints(3, 4, low=1, high=3)))


def test_augmented_assignment_matmul_rebinds_like_eager():
    def f(x, w):
        y = x
        y @= w  # eager: y = y @ w, a new tensor; x untouched
        return x, y

    check(f, lambda: (_randn(3, 3), _randn(3, 3)))


def test_augmented_assignment_that_eager_rejects():
    def int_true_div(x):
        x /= 2
        return x

    check_raises(int_true_div, lambda: (_ints(3),))

    def int_plus_float(x):
        x += 1.5
        return x

    check_raises(int_plus_float, lambda: (_ints(3),))

    def broadcast_to_bigger(x, y):
        x += y  # y's shape (3, 4) cannot be written into x (4,)
        return x

    check_raises(broadcast_to_bigger, lambda: (_randn(4), _randn(3, 4)))


def test_augmented_assignment_on_a_python_alias_of_an_input():
    def f(x):
        y = x
        y += 1
        y *= 2
        return x, y

    check(f, lambda: (_randn(4),))


# ---------------------------------------------------------------------------------------------
# 5. Subscript writes
# ---------------------------------------------------------------------------------------------

def _setitem_cases():
    def int_index(x, v):
        x[1] = v[0]
        return x.sum(0)

    def ellipsis_aug(x, v):
        x[..., 1:] += v[..., :3]
        return x

    def strided(x, v):
        x[1:3, ::2] = v[:2, :2]
        return x.mean()

    def mask(x, v):
        x[x > 0] = 0.5
        return x * 2

    def mask_tensor_value(x, v):
        m = v > 0
        x[m] = v[m]
        return x

    def index_tensor(x, v):
        x[torch.tensor([2, 0])] = v[:2]
        return x

    def index_tensor_aug(x, v):
        x[torch.tensor([0, 2])] += 1
        return x

    def none_and_negative_steps(x, v):
        x[None, -1, 1:-1] = 7
        return x

    def broadcast_value(x, v):
        x[:, 1] = v[0, 0]
        x[1:] = v[0]
        return x

    def int_value_into_float(x, v):
        x[1:] = (v[1:] * 10).to(torch.int64)  # (constants: test_constant_written_through_a_view)
        return x

    def whole(x, v):
        x[:] = v
        x[...] += 1
        return x

    def write_then_read_then_write(x, v):
        x[:1] = 1
        a = x.sum()
        x[:1] = 2
        b = x.sum()
        return a, b

    def in_a_loop(x, v):
        for i in range(3):
            x[i] = x[i] * (i + 2) + v[i]
        return x

    def in_a_loop_reading_neighbours(x, v):
        for i in range(1, 3):
            x[i] = x[i - 1] + x[i]  # reads what the previous iteration wrote
        return x

    def local(x, v):
        y = torch.zeros(3, 4)
        y[1] = x[0]
        y[:, 0] = v[:, 0]
        return y

    def local_from_input_view(x, v):
        y = x[1:]  # a view of the input
        y[:1, :1] = 100
        y = y * 2  # rebinds the name: no more writes to x
        y[:1, 1:2] = 100
        return x, y

    def zero_dim(x, v):
        s = x.sum()
        s.fill_(3)  # s is a local 0-dim tensor
        x[1, 1] = s
        return x, s

    return {f.__name__: f for f in (int_index, ellipsis_aug, strided, mask, mask_tensor_value, index_tensor,
                                     index_tensor_aug, none_and_negative_steps, broadcast_value, int_value_into_float,
                                     whole, write_then_read_then_write, in_a_loop, in_a_loop_reading_neighbours, local,
                                     local_from_input_view, zero_dim)}


_SETITEM = _setitem_cases()


@pytest.mark.parametrize("name", sorted(_SETITEM))
def test_subscript_write(name):
    check(_SETITEM[name], lambda: (_randn(3, 4), _randn(3, 4)))


# ---------------------------------------------------------------------------------------------
# 6. Writes through views; reads through other views of the same memory
# ---------------------------------------------------------------------------------------------

#: How to make a view of a (4, 6) tensor (each returns a tensor whose elements are distinct memory locations).
_VIEWS = {
    "view": lambda x: x.view(6, 4),
    "view_flat": lambda x: x.view(-1),
    "reshape": lambda x: x.reshape(2, 12),
    "flatten": lambda x: x.flatten(),
    "unflatten": lambda x: x.unflatten(1, (2, 3)),
    "transpose": lambda x: x.transpose(0, 1),
    "t": lambda x: x.t(),
    "T": lambda x: x.T,
    "mT": lambda x: x.mT,
    "permute": lambda x: x.permute(1, 0),
    "movedim": lambda x: x.movedim(0, 1),
    "swapaxes": lambda x: x.swapaxes(0, 1),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "squeeze": lambda x: x.unsqueeze(1).squeeze(1),
    "narrow": lambda x: x.narrow(1, 2, 3),
    "select": lambda x: x.select(1, 3),
    "getitem_int": lambda x: x[2],
    "getitem_step": lambda x: x[1:, ::2],
    "getitem_negative": lambda x: x[-2:, -3],
    "getitem_none_ellipsis": lambda x: x[None, ..., 1],
    "split": lambda x: x.split(2, dim=1)[1],
    "chunk": lambda x: x.chunk(2)[1],
    "unbind": lambda x: x.unbind(1)[4],
    "tensor_split": lambda x: x.tensor_split(3, dim=1)[2],
    "view_as": lambda x: x.view_as(x),
    "detach": lambda x: x.detach(),
    "to_same_dtype": lambda x: x.to(torch.float32),
    "float_same_dtype": lambda x: x.float(),
    "contiguous_of_contiguous": lambda x: x.contiguous(),
    "diagonal": lambda x: x.diagonal(),
    "diagonal_offset": lambda x: torch.diagonal(x, 1),
    "unfold_disjoint": lambda x: x.unfold(1, 2, 2),
    "data": lambda x: x.data,
    "adjoint": lambda x: x.adjoint(),
    "H": lambda x: x.H,
    "swapdims": lambda x: x.swapdims(0, 1),
    "moveaxis": lambda x: x.moveaxis(1, 0),
    "real": lambda x: x.real,
    "expand_as_itself": lambda x: x.expand_as(x),
    "broadcast_to_itself": lambda x: x.broadcast_to((4, 6)),
    "view_dtype_same": lambda x: x.view(torch.float32),
    "reshape_as": lambda x: x.reshape_as(x.t()),
    "ravel": lambda x: x.ravel(),
    "hsplit": lambda x: torch.hsplit(x, 2)[1],
    "vsplit": lambda x: torch.vsplit(x, 2)[0],
    "split_with_sizes": lambda x: x.split_with_sizes([1, 3], 0)[1],
    "squeeze_noop": lambda x: x.squeeze(),
    "as_strided": lambda x: x.as_strided((3, 2), (6, 2), 1),
    "chain": lambda x: x.view(2, 12)[1].view(3, 4)[:, 1:3].t(),
    "atleast_2d": lambda x: torch.atleast_2d(x),
}


def _grid():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)




def _view_params(more=None):
    """The views of _VIEWS, those known to fail marked (``more``: {view: reason})."""
    bugs = more or {}
    return [pytest.param(v, marks=[pytest.mark.xfail(strict=True, reason=bugs[v])] if v in bugs else [])
            for v in sorted(_VIEWS)]


@pytest.mark.parametrize("view", _view_params())
def test_write_through_view_then_read_the_base(view):
    make_view = _VIEWS[view]

    def f(x):
        v = make_view(x)
        v.mul_(-1)
        return x + 0, x.sum()

    check(f, lambda: (_grid(),))

    def local_base(x):
        b = x * 2
        v = make_view(b)
        v.add_(1000)
        return b

    check(local_base, lambda: (_grid(),))


@pytest.mark.parametrize("view", _view_params())
def test_write_the_base_then_read_a_view_taken_before(view):
    make_view = _VIEWS[view]

    def f(x):
        v = make_view(x)
        x.add_(100)  # v sees this write
        return v * 1

    check(f, lambda: (_grid(),))

    def returns_the_view(x):
        v = make_view(x)
        x[1:3] = -5
        return v  # a view of the (written) input, as eager's

    check(returns_the_view, lambda: (_grid(),))


@pytest.mark.parametrize("view", _view_params())
def test_write_through_one_view_read_through_another(view):
    make_view = _VIEWS[view]

    def f(x):
        other = x.t()[1:3]  # columns 1, 2 of x, taken before the write
        v = make_view(x)
        v.mul_(-2)
        return other.sum(1), x.select(0, 2) * 1

    check(f, lambda: (_grid(),))


def test_data_and_dtype_views_alias_their_tensor():
    """x.data and x.view(dtype), which Dynamo's example values do not mark as views, share x's memory: writes
    through them reach x, and writes to x reach them (a view as another dtype runs as an opaque view)."""
    def through_data(x):
        x.data.mul_(2)
        return x * 1

    def data_taken_before(x):
        d = x.data
        x.add_(1)
        return d * 1

    def through_same_dtype_view(x):
        x.view(torch.float32)[1:].mul_(2)
        return x * 1

    def other_dtype_view_taken_before(x):
        v = x.view(torch.int32)
        x.add_(1)
        return v * 1

    def through_other_dtype_view(x):
        x.view(torch.int32).add_(1)
        return x * 1

    for f in (through_data, data_taken_before, through_same_dtype_view, other_dtype_view_taken_before,
              through_other_dtype_view):
        check(f, lambda: (torch.arange(4.0),))


def test_write_through_view_of_a_noncontiguous_input():
    def f(x):
        v = x.view(-1) if x.is_contiguous() else x.reshape(-1)  # reshape copies for a non-contiguous x
        v[:1] = 100
        x[1:2, 1:2] = -1
        return v.sum(), x.sum()

    check(f, lambda: In(_grid().t(), watch=()))  # a transposed input
    check(f, lambda: (_grid(),))

    def contiguous_copies(x):
        c = x.contiguous()  # a copy for a non-contiguous x, x itself otherwise
        c.add_(1)
        return x * 1, c

    base_t = lambda: In(_grid().t())  # noqa: E731
    check(contiguous_copies, base_t)
    check(contiguous_copies, lambda: (_grid(),))


_OVERLAPPING_WRITES = {
    "x[1:] = x[:-1]": lambda x: x.__setitem__(slice(1, None), x[:-1]),
    "x[1:].add_(x[:-1])": lambda x: x[1:].add_(x[:-1]),
    "x.add_(x[0])": lambda x: x.add_(x[0]),
    "torch.add(x[:-1], 1, out=x[1:])": lambda x: torch.add(x[:-1], 1, out=x[1:]),
}


@pytest.mark.parametrize("write", list(_OVERLAPPING_WRITES))
def test_partially_overlapping_write_raises_like_eager(write):
    do = _OVERLAPPING_WRITES[write]

    def f(x):
        do(x)
        return x

    e_err, c_err = check_raises(f, lambda: (_randn(6),))
    assert type(c_err) is type(e_err) and str(c_err) == str(e_err)


def test_writes_sharing_memory_with_their_source_otherwise_run_as_eager():
    """Sources that share memory with the destination without partial overlap torch detects (interleaved,
    non-dense) run in place, as eager; a source that is the destination element for element is functionalized."""
    def interleaved(x):
        x[::2].add_(x[1::2])
        return x * 1

    def shifted_columns(x):
        x[:, 1:] += x[:, :-1]  # not dense: eager does not check, and reads elements it already wrote
        return x * 1

    def same_elements(x):
        x.view(-1).mul_(x.flatten())  # x.flatten() of a contiguous x is x.view(-1)
        x[1:3].add_(x[1:3])
        return x * 1

    check(interleaved, lambda: (_randn(6),))
    check(shifted_columns, lambda: (_grid(),))
    jitted = check(same_elements, lambda: (_grid(),))
    assert not any("write not lowered" in reason for g in thunder.compiled_graphs(jitted) for _, _, reason in g.fallbacks)


def test_overlapping_writes_through_two_views():
    def f(x):
        a, b = x[0:4], x[2:6]
        a.add_(1)
        b.mul_(2)  # sees a's write on x[2:4]
        x[1:3] = x[3:5].clone()  # a copy: no overlap
        return a * 1, b * 1

    check(f, lambda: (_randn(6),))


def test_write_into_a_view_input_with_offset():
    """A view passed alone (with a storage offset, non-contiguous): the write reaches its base."""
    def f(x, y):
        x.add_(y)
        x[:1] = 7
        return x.sum()

    def make():
        base = _grid()
        return In(base[1:, 1::2], torch.ones(3, 3), watch=(base,))

    check(f, make)


def test_to_another_dtype_is_a_copy():
    def f(x):
        y = x.to(torch.float64)
        y.add_(1)
        z = x.double()
        z.mul_(3)
        w = x.type_as(x)  # same dtype: x itself
        w.sub_(1)
        return x, y, z

    check(f, lambda: (_grid(),))


def test_reshape_that_must_copy_is_not_a_view():
    def f(x):
        r = x.t().reshape(-1)  # a copy: x.t() is not contiguous
        r.fill_(0)
        s = x.t().flatten()  # also a copy
        s[:1] = 9
        return x, r, s

    check(f, lambda: (_grid(),))


def test_writes_through_two_views_of_a_local_then_read_the_base():
    def f(x):
        b = torch.zeros(4, 6)
        b[:, :3] = x[:, 3:]
        b.t()[3:].copy_(x.t()[:3])
        b[::2, ::5].fill_(-1)
        return b

    check(f, lambda: (_grid(),))


def test_copy_with_broadcast_and_dtype_conversion():
    def f(x, y, n):
        x.copy_(y)  # (6,) broadcast into (4, 6)
        x[0].copy_(n)  # int64 into float32
        return x

    check(f, lambda: (_grid(), _randn(6), torch.arange(6)))


def test_writes_mixed_with_an_opaque_write():
    """A write thunder cannot lower (tensor-indexed) between writes it can: each lands in order."""
    def f(x, idx):
        v = x[1:]
        x.add_(1)
        x[idx] = 0  # index_put: an opaque write
        v.mul_(2)
        x.index_fill_(1, idx, -3.0)
        return x, v * 1

    check(f, lambda: (_grid(), torch.tensor([0, 2])))


def test_write_inside_a_graph_split_by_a_graph_break():
    def f(x):
        x.add_(1)
        v = x[1:]
        print_ok = x.sum().item()  # a graph break
        v.mul_(2)
        return x, print_ok

    jitted = check(f, lambda: (_grid(),), compiled=False)
    assert len(graphs(jitted)) >= 2


def test_write_is_done_on_every_call():
    """The copy-back runs on every call, including cached calls (the fast path), and on the inputs of that call."""
    def f(x, y):
        x.mul_(y)
        return x.sum()

    jitted = thunder.jit(f)
    for k in range(4):
        x, y = _grid(), torch.full((6,), float(k))
        out = jitted(x, y)
        assert_same(out, (_grid() * k).sum())
        assert_same(x, _grid() * k)
    assert thunder.compile_stats(jitted).cache_hits >= 2


def test_returns_the_written_input_and_its_view():
    def f(x):
        r = x.add_(1)
        return r, r[0], x.t(), x

    jitted = check(f, lambda: (_grid(),))
    x = _grid()
    r, r0, xt, xx = jitted(x)
    assert r is x and xx is x
    r0[0] = -99  # a view of x, as in eager
    assert x[0, 0] == -99


def _views_alike(actual, expected):
    """The outputs' memory relations are eager's: which share memory, at which element offsets, with which strides
    and contiguity, and which are views (``_base``) of which."""
    def relations(outs):
        ts = [t for t in outs if isinstance(t, torch.Tensor)]
        def base_index(t):
            return next((k for k, u in enumerate(ts) if t._base is not None and t._base is u), None)
        return [(t.stride(), t.is_contiguous(), t._base is not None, base_index(t),
                 [(t.data_ptr() - u.data_ptr()) // t.element_size()
                  if t.untyped_storage().data_ptr() == u.untyped_storage().data_ptr() else None for u in ts])
                for t in ts]
    assert relations(actual) == relations(expected)


def test_outputs_that_view_a_written_local_alias_one_another_as_in_eager():
    """A graph's outputs that are views of one tensor it computes and writes come out as views of it (the
    functionalized program computes them apart; they are made again from the base by their view ops)."""
    def f(x):
        a = x.reshape(2, 3) * 2.0
        v = a[1:]
        w = a.t()
        s = a.split(1, dim=1)
        v.add_(1)
        return a, v, w, s[2], w[1:]

    check(f, lambda: (_randn(6),))
    x = _randn(6)
    actual, expected = thunder.jit(f)(x.clone()), f(x.clone())
    _views_alike(actual, expected)
    actual[2][0, 1] = -5.0  # a write through one reaches the others
    expected[2][0, 1] = -5.0
    assert_same(actual, expected)


def test_outputs_that_view_one_local_that_is_not_returned():
    def f(x):
        a = x * 2.0
        v, w = a[1:], a[:3]
        v.mul_(3)
        return v, w

    check(f, lambda: (_randn(4),))
    actual, expected = thunder.jit(f)(torch.ones(4)), f(torch.ones(4))
    _views_alike(actual, expected)


def test_outputs_that_view_an_input_are_views_of_it():
    def f(x, y):
        y.add_(1)
        return x[1:], x.t(), x.view(-1)[2:], y[0], y * 2

    check(f, lambda: (_grid(), _grid()))
    x, y = _grid().clone(), _grid().clone()
    out = thunder.jit(f)(x, y)
    assert all(o._base is b for o, b in zip(out[:4], (x, x, x, y)))
    assert not out[1].is_contiguous()
    _views_alike(out, f(x.clone(), y.clone()))


def test_views_of_a_written_local_across_a_graph_break_with_grads():
    def f(x):
        a = x * 2.0
        v = a[1:]
        w = a.view(2, 3)[:, 1]
        v.mul_(3)
        torch._dynamo.graph_break()
        w.add_(10)
        return a

    jitted = thunder.jit(f)
    x, xe = torch.arange(6.0, requires_grad=True), torch.arange(6.0, requires_grad=True)
    out, expected = jitted(x), f(xe)
    assert_same(out, expected)
    (out * torch.arange(6.0)).sum().backward()
    (expected * torch.arange(6.0)).sum().backward()
    assert_same(x.grad, xe.grad)
    assert_compiled(jitted)


def test_output_views_that_cannot_be_made_again_run_the_graph_with_torch():
    """A view whose op reads another value the graph computes (``view_as``) is not replayed: that graph runs as
    captured, saying why."""
    def f(x, y):
        a = x * 1.0
        v = a.view_as(y * 2)
        v.add_(1)
        torch._dynamo.graph_break()
        v.add_(10)
        return a

    jitted = check(f, lambda: (_randn(4), _randn(2, 2)), compiled=False)
    reasons = [g.reason for g in graphs(jitted) if not isinstance(g, CompiledGraph)]
    assert len(reasons) == 1 and "share memory in eager" in reasons[0] and "view_as" in reasons[0]


def test_empty_and_zero_dim_inputs():
    def f(x, s):
        x.add_(1)
        s.mul_(3)
        x[...] = s
        return x, s

    check(f, lambda: (torch.zeros(0, 3), torch.tensor(2.0)))
    check(f, lambda: (torch.zeros(2, 3), torch.tensor(2.0)))


def test_int_and_bool_writes():
    def f(i, b):
        i.add_(3)
        i[:1] = -1
        i.bitwise_and_(6)
        b.logical_not_()
        b[:1] = True
        return i, b

    check(f, lambda: (torch.arange(6).reshape(2, 3), torch.tensor([False, True, False])))


def test_write_before_and_after_a_read_of_the_written_input_as_an_expression():
    def f(x):
        a = x * 1
        x.add_(1)
        b = x * 1
        x.mul_(2)
        return a, b, x * 1

    check(f, lambda: (_randn(3),))


_NUMBER_WRITES = {
    "x[0] = 5": lambda x: x.__setitem__(0, 5.0),
    "x[0, 1] = 5": lambda x: x.__setitem__((0, 1), 5.0),
    "x[:, 1] = 5": lambda x: x.__setitem__((slice(None), 1), 5.0),
    "x[0].zero_()": lambda x: x[0].zero_(),
    "x.select(0, 1).fill_(5)": lambda x: x.select(0, 1).fill_(5.0),
    "x[0] = torch.tensor(5.0)": lambda x: x.__setitem__(0, torch.tensor(5.0)),
    "x[1:] = torch.arange(3)": lambda x: x.__setitem__(slice(1, None), torch.arange(3)),
    "x[1:] = torch.ones(3, dtype=torch.int32)": lambda x: x.__setitem__(slice(1, None),
                                                                        torch.ones(3, dtype=torch.int32)),
    "x[1:2] = 5": lambda x: x.__setitem__(slice(1, 2), 5.0),
    "x[:, 1:2].fill_(5)": lambda x: x[:, 1:2].fill_(5.0),
    "x[0] = x[1] * 2": lambda x: x.__setitem__(0, x[1] * 2),
    "x[1:] = torch.arange(3.0)": lambda x: x.__setitem__(slice(1, None), torch.arange(3.0)),
    "x.copy_(torch.arange(3))": lambda x: x.copy_(torch.arange(3)),
}


@pytest.mark.parametrize("write", list(_NUMBER_WRITES))
def test_constant_written_through_a_view(write):
    do = _NUMBER_WRITES[write]

    def f(x):
        do(x)
        return x.sum(0)

    check(f, lambda: (_randn(2, 3),))


def test_branch_updates_an_element_of_a_tensor_made_in_the_graph():
    def f(x):
        acc = torch.zeros(3)
        if x[0] > 0:
            acc[0] += 1
        return acc

    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, 1.0):
        x = torch.full((2,), sign)
        assert_same(jitted(x), f(x))
    assert_compiled(jitted)


def test_uncompiled_graph_with_converted_branches_runs_one_arm():
    def f(x, c):
        if x.sum() > 0:
            x.add_(1)
        else:
            x.sub_(1)
        return c.float() * 2

    jitted = thunder.jit(f)
    for sign in (1.0, -1.0):
        e_x, c_x = torch.full((3,), sign), torch.full((3,), sign)
        c = torch.ones(2, dtype=torch.uint16)  # thunder's trace has no uint16: the graph runs uncompiled
        assert_same(jitted(c_x, c), f(e_x, c))
        assert_same(c_x, e_x)


_KEYWORD_WRITES = {
    "x.fill_(value=2.0)": lambda x, y: x.fill_(value=2.0),
    "torch.Tensor.fill_(x, value=y)": lambda x, y: torch.Tensor.fill_(x, value=y[0]),
    "x.add_(other=y, alpha=2)": lambda x, y: x.add_(other=y, alpha=2),
    "x.clamp_(min=0.1)": lambda x, y: x.clamp_(min=0.1),
    "x.mul_(other=y)": lambda x, y: x.mul_(other=y),
    "x.lerp_(end=y, weight=0.3)": lambda x, y: x.lerp_(end=y, weight=0.3),
}


@pytest.mark.parametrize("write", list(_KEYWORD_WRITES))
def test_inplace_method_with_keyword_arguments(write):
    do = _KEYWORD_WRITES[write]

    def f(x, y):
        r = do(x, y)
        return r, x * 2

    check(f, lambda: (_randn(4), _randn(4)))


# ---------------------------------------------------------------------------------------------
# 7. Module buffers and parameters
# ---------------------------------------------------------------------------------------------

class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("history", torch.zeros(3, 4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.count += 1
        self.running.mul_(0.9).add_(x.mean(0), alpha=0.1)
        self.history[1:] = self.history[:-1].clone()
        self.history[0] = self.running
        return self.lin(x) + self.running


class ParamUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        y = x @ self.w + self.b
        with torch.no_grad():
            self.w.mul_(0.5)
            self.b[:1] = 1.0
        return y


def _check_module(model, make, calls=3, grad=False, compiled=True):
    ref = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for call in range(calls):
        x = make()
        xe = x.clone()
        out, expected = jitted(x), ref(xe)
        assert_same(out, expected, path=f"call {call}")
        assert_same(mod_state(model), mod_state(ref), path=f"state after call {call}")
        if grad:
            out.sum().backward()
            expected.sum().backward()
            for (n, p), q in zip(model.named_parameters(), ref.parameters()):
                assert_same(p.grad, q.grad, path=f"grad {n}")
    if compiled:
        assert_compiled(jitted)
    return jitted


def test_module_buffers_written_in_forward():
    torch.manual_seed(0)
    jitted = _check_module(Counter(), lambda: _randn(2, 4))
    assert_compiled(jitted)
    torch.manual_seed(0)
    with torch.no_grad():
        _check_module(Counter(), lambda: _randn(2, 4))


def test_module_buffers_written_with_grad():
    torch.manual_seed(0)
    _check_module(Counter(), lambda: _randn(2, 4), grad=True)


def test_parameters_written_under_no_grad_inside_forward():
    torch.manual_seed(0)
    _check_module(ParamUpdate(), lambda: _randn(2, 4), grad=True)


def test_leaf_written_under_no_grad_inside_the_function():
    def f(w, g):
        with torch.no_grad():
            w.sub_(g * 0.1)
        return w * 2

    w, w_e = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    g = _randn(3)
    out, expected = thunder.jit(f)(w, g), f(w_e, g)
    assert_same(out, expected)
    assert_same(w, w_e)
    out.sum().backward()
    expected.sum().backward()
    assert_same(w.grad, w_e.grad)


def test_parameters_written_by_a_jitted_optimizer_step_under_no_grad():
    def sgd(params, grads, lr):
        for p, g in zip(params, grads):
            p.sub_(g * lr)
            p.clamp_(-1, 1)

    torch.manual_seed(0)
    params = [torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)]
    ref = [p.detach().clone().requires_grad_() for p in params]
    jitted = thunder.jit(sgd)
    for step in range(3):
        grads = [torch.randn_like(p) for p in params]
        with torch.no_grad():
            jitted(params, grads, 0.5)
            sgd(ref, grads, 0.5)
        for i, (p, q) in enumerate(zip(params, ref)):
            assert_same(p, q, path=f"step {step} param {i}")
            assert p.requires_grad and p.is_leaf
    assert_compiled(jitted)


def _mul_inplace(a):
    a.mul_(2.5)
    return a


def _mul_augmented(a):
    a *= 2.5
    return a


def _mul_by_a_float_tensor(a):
    a.mul_(torch.tensor(2.5))
    return a


def _mul_out(a):
    torch.mul(a, 2.5, out=a)
    return a


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("fn", [_mul_inplace, _mul_augmented, _mul_by_a_float_tensor, _mul_out])
def test_a_float_result_written_into_an_integer_tensor_raises_like_eager(fn, dtype):
    """torch.can_cast(float, int) is False: eager raises "result type Float can't be cast to the desired output type
    Long" (Dynamo's fake mul_ does not check; the write was lowered and truncated into the input)."""
    eager, compiled = check_raises(fn, lambda: (torch.arange(3).to(dtype),))
    assert str(compiled) == str(eager)


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=0.1),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    lambda ps: torch.optim.RMSprop(ps, lr=0.01),
], ids=["sgd", "sgd_momentum", "adamw", "rmsprop"])
def test_a_torch_optimizer_step_inside_the_jitted_function_updates_the_parameters(make):
    """Dynamo reads an optimizer's parameters and state as graph attributes (get_attr), not inputs: they are made
    inputs of the trace (dynamo._lift_tensor_attributes), so the step's in-place writes reach them (they were
    dropped as dead: the parameters never changed)."""
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    eager = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    model = copy.deepcopy(eager)
    opts = make(list(eager.parameters())), make(list(model.parameters()))

    def step(m, opt):
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    jitted = thunder.jit(lambda: step(model, opts[1]))
    for call in range(3):
        assert_same(jitted(), step(eager, opts[0]), path=f"loss of step {call}")
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_same(p, q, path=name)


def test_writes_under_no_grad_into_a_tensor_that_requires_grad_are_fused():
    """An optimizer's update (p.mul_(0.9).addcdiv_(...) under no_grad, p a parameter): the values written require
    no grad, so their ops fuse (they stayed torch ops: the claim keeps ops whose outputs require grad for torch's
    autograd)."""
    def update(p, g):
        p.mul_(0.9).addcdiv_(g, g + 1)

    p = torch.randn(8, requires_grad=True)
    p_e, g = p.detach().clone().requires_grad_(), torch.randn(8)
    jitted = thunder.jit(update)
    with torch.no_grad():
        jitted(p, g)
        update(p_e, g)
    assert_same(p, p_e)
    assert p.requires_grad and p.is_leaf
    final = thunder.last_traces(jitted)[-1]
    calls = [line.split("=", 1)[1].split("(")[0].strip() for line in str(final).splitlines()
             if " = " in line and not line.strip().startswith("#")]
    assert calls == ["cpu_fusion0"], final


def test_an_adamw_step_is_compiled_without_opaque_ops():
    """AdamW's single-tensor step (CPU's default): Dynamo writes its addcmul_ with a value as Inductor's prims.fma,
    imported as a * b + c; its writes into the parameters (under no_grad) fuse."""
    torch.manual_seed(0)
    model = nn.Linear(16, 8)
    eager = copy.deepcopy(model)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) for m in (eager, model)]
    jitted = thunder.jit(opts[1].step)
    for _ in range(3):
        for p, q in zip(eager.parameters(), model.parameters()):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        opts[0].step()
        jitted()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_same(p, q, path=name)
    for trace in (thunder.last_traces(jitted)[-1],):
        assert "_opaque" not in str(trace) and "cpu_fusion" in str(trace), trace


def test_a_write_to_the_result_of_an_opaque_inplace_op_reaches_its_argument():
    """An opaque in-place op returns its argument: a write chained on it (x.fill_diagonal_(0).add_(g)) writes
    that tensor (it wrote a new root before, which nothing read: dropped)."""
    def written_input(x, g):
        x.fill_diagonal_(0).add_(g)
        return g * 2

    def written_local(x, g):
        y = x * 1
        y.fill_diagonal_(5).mul_(g)
        return y + 1

    check(written_input, lambda: (_grid(), torch.arange(6.0)), compiled=False)
    check(written_local, lambda: (_grid(), torch.arange(6.0)), compiled=False)

    # In-place ops that change sizes or strides (ATen's inplace_view tag) return an argument the trace does not
    # know in that layout: their results stay their own.
    def transposed_input(x, g):
        x.t_().add_(g)
        return x * 1

    def transposed_local(x, g):
        y = x * 1
        y.transpose_(0, 1).mul_(g)
        return y + 1

    square = lambda: (torch.arange(9.0).reshape(3, 3), torch.arange(3.0))  # noqa: E731
    check(transposed_input, square, compiled=False)
    check(transposed_local, square, compiled=False)


@pytest.mark.parametrize("resize", ["unsqueeze_", "t_", "squeeze_"])
def test_a_graph_that_changes_sizes_in_place_runs_as_captured(resize):
    """Dynamo's example value of a tensor is one object, changed in place by x.unsqueeze_(0) as Dynamo traces: every
    node that made or wrote that tensor showed the layout after the change. y.relu_() before y.unsqueeze_(0) was
    imported as a write of a [1] tensor into a [] one and raised (found by a random-program fuzzer)."""
    def fn(x):
        y = x * 2
        y.relu_()
        getattr(y, resize)(*((0,) if resize == "unsqueeze_" else ()))
        return y + 1, y.sum()

    jitted = check(fn, lambda: (torch.tensor(1.5) if resize != "t_" else torch.randn(2, 3, generator=_GEN),),
                   compiled=False)
    (graph,) = thunder.compile_stats(jitted).graphs
    assert not graph["compiled"] and "sizes or strides in place" in graph["reason"]


@pytest.mark.parametrize("dynamic", [True, None])
def test_an_inplace_op_with_a_number_read_at_run_time_is_lowered_and_its_chain_kept(dynamic):
    """buf.mul_(m).add_(g) with m a float Dynamo passes as a tensor read with .item() (SGD's momentum after a
    recompile): the .item() number was taken for a tensor overlapping buf, the mul_ left opaque and the add_
    dropped."""
    def f(buf, g, m):
        buf.mul_(m).add_(g, alpha=0.5)
        return g * 2

    jitted = thunder.jit(f, dynamic=dynamic)
    for m in (0.9, 0.8, 0.7):
        b_e, b_t, g = torch.ones(4), torch.ones(4), torch.arange(4.0)
        assert_same(jitted(b_t, g, m), f(b_e, g, m))
        assert_same(b_t, b_e, path=f"buf after m={m}")
    report = thunder.summary(jitted)  # the one opaque op is the .item() read of m
    assert "1 ops opaque" in report and "torch.Tensor.mul_" not in report and "torch.Tensor.add_" not in report, report


def test_batchnorm_running_stats():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(inplace=True))
    _check_module(model, lambda: _randn(6, 4), grad=True)
    model.eval()
    _check_module(model, lambda: _randn(6, 4))


def test_module_buffer_subscript_write_under_a_branch():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", torch.zeros(4))

        def forward(self, x):
            s = self.state
            for i in range(4):
                if x[i] > 0:
                    s[i] = s[i] + x[i]
                else:
                    s[i] = s[i] * 0.5 - 1
            return x * s

    _check_module(M(), lambda: _randn(4), calls=4)


# ---------------------------------------------------------------------------------------------
# 8. Inputs that alias each other
# ---------------------------------------------------------------------------------------------

def _writes_a_reads_b(a, b):
    a.add_(1)
    return b * 2


def _writes_both(a, b):
    a.mul_(2)
    b.add_(1)
    return a * 1, b * 1


def _reads_then_writes(a, b):
    s = b.sum()
    a.sub_(b.mean())
    return s, b * 1


def _writes_b_subscript(a, b):
    b[0] = -7
    return a.sum(), a * 1


_ALIAS_FNS = {f.__name__: f for f in (_writes_a_reads_b, _writes_both, _reads_then_writes, _writes_b_subscript)}


def _same_twice():
    base = _randn(6)
    return In(base, base)


def _view_and_base():
    base = _randn(6)
    return In(base, base[2:5])


def _base_and_view_reversed():
    base = _randn(6)
    return In(base[1:4], base)


def _overlapping_slices():
    base = _randn(6)
    return In(base[0:4], base[2:6], watch=(base,))


def _disjoint_slices():
    base = _randn(6)
    return In(base[0:3], base[3:6], watch=(base,))


def _transposed_views():
    base = _randn(6).reshape(2, 3)
    return In(base.reshape(-1)[:3], base.t()[0], watch=(base,))


def _shifted_views():
    base = _randn(6)
    return In(base[:3], base[1:4].view(3), watch=(base,))


_ALIAS_INPUTS = {f.__name__.lstrip("_"): f for f in (_same_twice, _view_and_base, _base_and_view_reversed,
                                                     _overlapping_slices, _disjoint_slices, _transposed_views,
                                                     _shifted_views)}


@pytest.mark.parametrize("inputs", sorted(_ALIAS_INPUTS))
@pytest.mark.parametrize("fn", sorted(_ALIAS_FNS))
def test_aliased_inputs(fn, inputs):
    f = _ALIAS_FNS[fn]
    make = _ALIAS_INPUTS[inputs]

    def separate():  # the same shapes and strides, in memory of their own
        return In(*[T._clone_tensor(a) for a in make().args])

    jitted = thunder.jit(f)
    # A call with separate inputs first (compiles the graph under the no-aliasing assumption), then aliased ones,
    # then separate ones again: each equals eager.
    for k, maker in enumerate((separate, make, make, separate)):
        e_in, c_in = twice(maker, seed=k)
        try:
            expected = f(*e_in.args)
        except Exception:  # noqa: BLE001 -- a shape eager rejects: thunder must too
            with pytest.raises(Exception):
                jitted(*c_in.args)
            continue
        actual = jitted(*c_in.args)
        compare_call(actual, expected, c_in, e_in, what=f"call {k} ({maker.__name__})")


def test_aliasing_through_a_closure_and_a_global_tensor():
    state = _randn(6)
    state_e = state.clone()

    def make_f(buf):
        def f(x):
            x.add_(1)
            return buf * 2  # buf aliases x below
        return f

    f_e, jitted = make_f(state_e), thunder.jit(make_f(state))
    expected = f_e(state_e[1:4])
    actual = jitted(state[1:4])
    assert_same(actual, expected)
    assert_same(state, state_e)


_GLOBAL_BUF = torch.zeros(6)


def _reads_global(x):
    x.mul_(2)
    x.add_(1)
    return _GLOBAL_BUF * 1


def test_aliasing_with_a_global_tensor():
    global _GLOBAL_BUF
    _GLOBAL_BUF = torch.arange(6.0)
    # eager, by hand: x is _GLOBAL_BUF[2:]
    e = torch.arange(6.0)
    e[2:].mul_(2)
    e[2:].add_(1)
    expected = e * 1
    jitted = thunder.jit(_reads_global)
    actual = jitted(_GLOBAL_BUF[2:])
    assert_same(actual, expected)
    assert_same(_GLOBAL_BUF, e)


def test_view_of_a_module_buffer_passed_as_an_argument():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.arange(8.0))

        def forward(self, x):
            x.mul_(10)  # x is a view of self.buf
            return self.buf + 0

    class N(nn.Module):  # the other way around: the buffer is written, the argument reads it
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.arange(8.0))

        def forward(self, x):
            self.buf.add_(1)
            return x * 1

    for cls in (M, N):
        m, ref = cls(), cls()
        jitted = thunder.jit(m)
        for call in range(2):
            expected = ref(ref.buf[2:6])
            actual = jitted(m.buf[2:6])
            assert_same(actual, expected, path=f"{cls.__name__} call {call}")
            assert_same(m.buf, ref.buf, path=f"{cls.__name__} buffer after call {call}")
        # and a separate argument afterwards
        expected, actual = ref(torch.ones(4)), jitted(torch.ones(4))
        assert_same(actual, expected)
        assert_same(m.buf, ref.buf)


def test_aliased_inputs_under_a_converted_branch():
    """The guard runs a graph with converted branches taking one arm (branches.run_exactly)."""
    def f(a, b):
        if b.sum() > 0:
            a.add_(1)
        else:
            a.mul_(-1)
        return b * 1

    def make():
        base = _randn(6)
        return In(base, base[1:4])

    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, 1.0, -1.0):
        e_base, c_base = _randn(6).abs() * sign, None
        c_base = e_base.clone()
        expected = f(e_base, e_base[1:4])
        actual = jitted(c_base, c_base[1:4])
        assert_same(actual, expected)
        assert_same(c_base, e_base)
    e_in, c_in = twice(make)
    compare_call(jitted(*c_in.args), f(*e_in.args), c_in, e_in)


def test_aliased_first_call_keeps_the_branch_converted():
    def f(a, b):
        if b.sum() > 0:
            a.add_(1)
        return b * 2

    jitted = thunder.jit(f)
    for aliased in (True, False, True):
        base, e_base = torch.ones(4), torch.ones(4)
        args, e_args = ((base, base[1:3]), (e_base, e_base[1:3])) if aliased else \
            ((base, torch.ones(2)), (e_base, torch.ones(2)))
        assert_same(jitted(*args), f(*e_args))
        assert_same(base, e_base)
    stats = thunder.compile_stats(jitted)
    assert stats.branches_converted == 1, [str(s) for s in stats.branches]
    assert not stats.graph_breaks, [str(b) for b in stats.graph_breaks]


def test_internally_overlapping_input_is_rejected_like_eager():
    def f(x):
        x.add_(1)
        return x

    check_raises(f, lambda: (torch.zeros(1).expand(4),))

    def through_expand(x):
        x.expand(3, 4).mul_(2)
        return x

    check_raises(through_expand, lambda: (torch.ones(4),))


# ---------------------------------------------------------------------------------------------
# 9. In-place writes and autograd
# ---------------------------------------------------------------------------------------------

def _grad_check(fn, *inputs):
    a = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    b = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    jitted = thunder.jit(fn)
    out, expected = jitted(*a), fn(*b)
    assert_same(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for i, (x, y) in enumerate(zip(a, b)):
        if y.requires_grad:
            assert_same(x.grad, y.grad, path=f"grad of input {i}")
    return jitted


def test_grads_through_writes_to_non_leaves():
    def f(x, w):
        y = x * w
        y[0] = y[1] * 3
        y.mul_(2)
        y[:, 1:] += x[:, :1]
        return y

    _grad_check(f, torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True))


def test_grads_when_a_value_that_requires_grad_is_written_into_a_tensor_that_does_not():
    def f(x):
        buf = torch.zeros(3, 4)
        buf[1] = x.sin()
        buf.add_(x)
        return buf

    _grad_check(f, torch.randn(4, requires_grad=True))


def test_grads_through_a_write_to_a_non_leaf_input():
    def f(a, b):
        a.mul_(b)
        a[0] = 0
        return a * 1

    leaf = torch.randn(3, requires_grad=True)
    leaf_e = leaf.detach().clone().requires_grad_()
    b = torch.randn(3, requires_grad=True)
    b_e = b.detach().clone().requires_grad_()
    a, a_e = leaf * 2, leaf_e * 2
    jitted = thunder.jit(f)
    out, expected = jitted(a, b), f(a_e, b_e)
    assert_same(out, expected)
    assert_same(a, a_e)
    (out.sum() + a.sum()).backward()
    (expected.sum() + a_e.sum()).backward()
    assert_same(leaf.grad, leaf_e.grad)
    assert_same(b.grad, b_e.grad)


def test_write_through_detach_keeps_the_graph():
    def f(x):
        y = x * 2
        y.detach()[0] = 5  # writes y's memory, not its autograd history
        return y * x

    _grad_check(f, torch.randn(3, requires_grad=True))


def test_write_through_detach_of_a_leaf_that_requires_grad():
    def f(x):
        x.detach().mul_(0.5)  # the usual way to update a parameter's values outside autograd
        return x * x

    _grad_check(f, torch.randn(3, requires_grad=True))


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("view", ["contiguous", "reshape"])
def test_a_copy_eager_makes_before_a_write_through_detach_keeps_the_old_values(view, grad):
    """`v = a.contiguous()` (or `a.reshape(-1)`) of a non-contiguous leaf copies in eager; a write into `a` through
    `a.detach()` after it stays in place (autograd takes part), and v, read after it, is the copy: v held the
    written values (the clone such a view op reads was made only where an opaque in-place op was in the graph)."""
    def f(a):
        v = getattr(a, view)() if view == "contiguous" else a.reshape(-1)
        a.detach().add_(1)
        return v * 1, a * 1

    def make():
        return torch.arange(6.0).reshape(3, 2).t().requires_grad_()

    with torch.set_grad_enabled(grad):
        assert_same(thunder.jit(f)(make()), f(make()))


def test_non_leaf_written_under_no_grad_keeps_its_history():
    def f(x):
        y = x * 2
        with torch.no_grad():
            y.add_(1)
        return y * y

    _grad_check(f, torch.randn(3, requires_grad=True))


def test_unrecorded_writes_keep_the_autograd_history():
    """Writes autograd does not record (under no_grad, through detach) change values, not history: they stay in
    place, around pending functional writes, in converted branches, and with a written value that requires grad."""
    def in_branch(x):
        y = x * 2
        if y.sum() > 0:
            y.detach()[0] = 5
        return y * x

    def between_recorded_writes(x):
        y = x * 2
        y[1] = 3
        y.detach()[0] = 5
        y[2] = y[0] * 2
        return y * x

    def non_leaf_under_no_grad(x):
        y = x.sin()
        with torch.no_grad():
            y.mul_(2)
            z = y * 3
        return y * x + z

    def value_requires_grad(x):
        y = x * 2
        y.detach().copy_(x)  # y's values change; it does not start to depend on x
        return y * x

    for f in (in_branch, between_recorded_writes, non_leaf_under_no_grad, value_requires_grad):
        _grad_check(f, torch.randn(3, requires_grad=True))

    def views_of_a_parameter_under_no_grad(w, g):
        with torch.no_grad():
            w[0] = 0
            w[1:].mul_(g[1:])
        return w * w

    w, w_e = torch.randn(3, requires_grad=True), None
    w_e = w.detach().clone().requires_grad_()
    g = torch.randn(3)
    out, expected = thunder.jit(views_of_a_parameter_under_no_grad)(w, g), views_of_a_parameter_under_no_grad(w_e, g)
    assert_same(out, expected)
    assert_same(w, w_e)
    assert w.is_leaf and w.requires_grad
    out.sum().backward()
    expected.sum().backward()
    assert_same(w.grad, w_e.grad)


@pytest.mark.parametrize("case", ["view", "twice", "branch", "input_is_a_view"])
def test_grads_through_writes_to_non_leaf_inputs(case):
    """The out-of-place op of a write into an input that requires grad reads a copy of it (as eager's in-place op
    saves one), so the copy-back does not modify what it saved for backward."""
    def view(a, b):
        a[1:].mul_(b[1:])
        return a * 1

    def twice(a, b):
        a.mul_(b)
        a.div_(b)
        return a.sin()

    def branch(a, b):
        if b.sum() > 0:
            a.mul_(b)
        else:
            a.add_(b)
        return a * 2

    f = {"view": view, "twice": twice, "branch": branch, "input_is_a_view": view}[case]
    make = (lambda leaf: (leaf * 2)[1:]) if case == "input_is_a_view" else (lambda leaf: leaf * 2)
    leaf = torch.randn(5, requires_grad=True)
    leaf_e = leaf.detach().clone().requires_grad_()
    b = torch.randn(len(make(leaf)), requires_grad=True)
    b_e = b.detach().clone().requires_grad_()
    a, a_e = make(leaf), make(leaf_e)
    out, expected = thunder.jit(f)(a, b), f(a_e, b_e)
    assert_same(out, expected)
    assert_same(a, a_e)
    (out.sum() + a.sum()).backward()
    (expected.sum() + a_e.sum()).backward()
    assert_same(leaf.grad, leaf_e.grad)
    assert_same(b.grad, b_e.grad)


def test_a_saved_input_then_written_raises_in_backward_like_eager():
    def f(a, b):
        c = a * b  # saves a
        a.mul_(b)
        return c

    for fn in (f, thunder.jit(f)):
        leaf = torch.randn(3, requires_grad=True)
        out = fn(leaf * 2, torch.randn(3, requires_grad=True))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_a_computed_value_saved_then_written_raises_in_backward_like_eager():
    """A write into a value the function computed, which an op before it saved for its backward (seed example 2's
    ``x[0, i] = torch.sin(x[0, i])``, trained): eager's backward raises; thunder's functional trace differentiated
    the program as written. Its backward now raises eager's error where given that output's gradient; a write
    into a value no op saved, or an output whose backward does not reach the stale value, runs."""
    def sin_in_place(h):
        x = h * 1.0
        x[0, 0] = torch.sin(x[0, 0])  # sin saved x[0, 0]
        return x

    def exp_then_scaled(h):
        y = h.exp()  # exp saves its result
        y.mul_(2)
        return y

    def scaled_then_shifted(h):
        y = h * 2  # saves nothing of y
        y.add_(1)
        return y

    for f, raises in ((sin_in_place, True), (exp_then_scaled, True), (scaled_then_shifted, False)):
        outcomes = []
        for fn in (f, thunder.jit(f)):
            h = torch.ones(2, 3, requires_grad=True)
            try:
                fn(h).sum().backward()
                outcomes.append(h.grad)
            except RuntimeError as e:
                assert "modified by an inplace operation" in str(e)
                outcomes.append("raised")
        assert (outcomes[0] == "raised") == raises
        assert_same(outcomes[1], outcomes[0])
        (graph,) = thunder.compile_stats(fn).graphs
        assert graph["compiled"] and graph["backward"] == "thunder", graph

    def two_outputs(h):  # only the second output's backward reaches the written value
        y = h.exp()
        y.mul_(2)
        return h * 3, y

    for fn in (two_outputs, thunder.jit(two_outputs)):
        h = torch.ones(2, 3, requires_grad=True)
        fn(h)[0].sum().backward()
        assert_same(h.grad, torch.full((2, 3), 3.0))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            fn(torch.ones(2, 3, requires_grad=True))[1].sum().backward()


@pytest.mark.parametrize("case", ["itself", "view", "in_branch", "only_other_output"])
def test_an_input_saved_then_written_by_the_forward_raises_in_backward_like_eager(case):
    # x requires no grad: the program saves x itself (or a view of it) for w's gradient, then writes x. The
    # copy-back gave the backward the new values: a silent wrong w.grad where eager raises.
    def f(w, x):
        y = (w * (x[0] if case == "view" else x)).sum()
        if case == "in_branch":
            if x.sum() > 0:
                x.mul_(2)
        else:
            x.mul_(2)
        return y, w.exp() if case == "only_other_output" else y

    for fn in (f, thunder.jit(f)):
        w = torch.randn(3, requires_grad=True)
        y, z = fn(w, torch.ones(3, 3) if case == "view" else torch.ones(3))
        if case == "only_other_output":  # the backward for z alone reads nothing written: no error, as in eager
            z.sum().backward()
            assert_same(w.grad, w.detach().exp())
            continue
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
        if case == "in_branch":  # the untaken arm writes nothing: no error
            w = torch.randn(3, requires_grad=True)
            fn(w, -torch.ones(3))[0].backward()
            assert_same(w.grad, -torch.ones(3))


@pytest.mark.parametrize("through", ["data", "view_of_data"])
def test_an_input_saved_then_written_through_data_keeps_the_new_values_like_eager(through):
    # A write through x.data is one eager's autograd does not see: its backward reads the new values, no error.
    def f(w, x):
        y = (w * x).sum()
        (x.data if through == "data" else x.data.chunk(3)[1]).mul_(2)
        return y

    grads = []
    for fn in (f, thunder.jit(f)):
        w = torch.randn(3, requires_grad=True)
        fn(w, torch.ones(3)).backward()
        grads.append(w.grad)
    assert_same(grads[1], grads[0])


def test_views_made_after_a_write_through_data_are_saved_for_backward():
    # Setting x's version back after the call (eager's .data write bumps none) broke x.t(), made by the forward
    # after the write: backward raised "A view was created in no_grad mode and its base ... modified inplace".
    def f(x):
        x.data.mul_(2.0)
        return x.t() * x

    grads = []
    for fn in (f, thunder.jit(f)):
        x = torch.arange(16.0).reshape(4, 4).requires_grad_()
        fn(x).sum().backward()
        grads.append(x.grad)
    assert_same(grads[1], grads[0])


@pytest.mark.parametrize("alias", ["detach", "data"])
def test_a_value_requiring_grad_written_into_a_detached_alias_of_an_input(alias):
    # t = x.detach(); t.mul_(x): the product reads t as it was, which eager's in-place op saves for x's gradient.
    # The out-of-place op read t itself, which the write then changed: backward raised "modified by an inplace
    # operation" where eager's runs.
    def f(x):
        t = x.detach() if alias == "detach" else x.data
        t.mul_(x)
        return t * 2

    results = []
    for fn in (f, thunder.jit(f)):
        x = torch.tensor([1.5, -2.0], requires_grad=True)
        y = fn(x)
        y.sum().backward()
        results.append((y.detach(), x.grad, x.detach()))
    assert_same(results[1], results[0])


@pytest.mark.parametrize("case", ["saved_intermediate", "saved_view_before", "saved_alias", "index_assignment",
                                  "out_argument"])
def test_a_write_through_data_in_training_leaves_saved_tensors_readable(case):
    # x.data has a version counter of its own; imported as x.detach() (which shares x's), a write through it made
    # the backward raise where eager's runs -- or, for a saved x.data written later, run where eager's raises.
    def f(x, w):
        if case == "saved_intermediate":
            t = x * 2
            y = t * t  # saves t
            t.data.copy_(t * 1)
            return y
        if case == "saved_view_before":
            y = x @ x.t()  # saves x and x.t()
            x.data.add_(1)
            return y
        if case == "index_assignment":  # setitem returns None: no result shares x's memory (it went unseen)
            y = (w * x).sum()
            x.data[torch.tensor([1])] = 7.0
            return y
        if case == "out_argument":
            y = (w * x).sum()
            torch.mul(w.detach(), 3, out=x.data)
            return y
        d = x.data
        y = (w * d).sum()  # saves d, whose own version the write bumps
        d.mul_(2)
        return y

    outcomes = []
    for fn in (f, thunder.jit(f)):
        # (x, saved for w's gradient, requires none where it is written through x.data alone)
        x = torch.arange(1.0, 5.0).reshape(2, 2).requires_grad_(case not in ("index_assignment", "out_argument"))
        w = torch.ones(2, 2, requires_grad=True)
        try:
            fn(x, w).sum().backward()
            outcomes.append((x.grad, w.grad, x.detach()))
        except RuntimeError as e:
            outcomes.append("modified by an inplace operation" in str(e))
    assert_same(outcomes[1], outcomes[0])


def test_data_only_read_in_training_stays_native():
    # A write through x.data is what needs x.data's own version counter; one only read is thunder's detach.
    def f(x, w):
        return (x * w).sum() / w.data.abs().sum()

    jitted, x, w = thunder.jit(f), torch.randn(3), torch.randn(3, requires_grad=True)
    jitted(x, w).backward()
    assert not thunder._state_of(jitted, "test").graphs[0].fallbacks


def test_an_optimizer_step_through_data_stays_native():
    # No value requiring grad is computed: x.data is thunder's detach, and the step one kernel.
    def step(p, g):
        p.data.add_(g, alpha=-0.1)

    jitted, p, g = thunder.jit(step), torch.ones(4, requires_grad=True), torch.full((4,), 2.0)
    jitted(p, g)
    assert torch.equal(p.detach(), torch.full((4,), 0.8))
    assert not thunder._state_of(jitted, "test").graphs[0].fallbacks



def test_a_step_through_data_between_forward_and_backward_leaves_the_backward_running():
    # The step writes through p.data, whose version counter is its own: the tensor the forward saved (p itself)
    # keeps its version, and eager's backward runs, reading the new values.
    def clamp(p):
        p.data.clamp_(-0.5, 0.5)

    grads = []
    for run in (clamp, thunder.jit(clamp)):
        torch.manual_seed(0)
        w = torch.randn(4, requires_grad=True)
        loss = (w * w).sum()
        run(w)
        loss.backward()
        grads.append(w.grad)
    torch.testing.assert_close(grads[1], grads[0])

def test_in_place_on_a_leaf_that_requires_grad_raises_like_eager():
    def f(x):
        x.add_(1)
        return x

    e_err, c_err = check_raises(f, lambda: (torch.randn(3, requires_grad=True),))
    assert "leaf" in str(c_err) and "in-place" in str(c_err) or "inplace" in str(c_err)


def test_autograd_sees_the_input_was_modified():
    """A tensor saved for backward, then written by a jitted program: backward raises, as in eager."""
    def f(x):
        x.mul_(2)
        return x

    for run in (f, thunder.jit(f)):
        leaf = torch.randn(3, requires_grad=True)
        y = leaf.exp()  # exp saves its result
        run(y)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


# ---------------------------------------------------------------------------------------------
# 10. Branch conversion with writes (deterministic cases; tests/test_branches_property.py for random ones)
# ---------------------------------------------------------------------------------------------

def test_branch_writes_to_an_input_view_and_a_local():
    def f(x, y):
        acc = y[:3].clone()  # (see also test_branch_updates_an_element_of_a_tensor_made_in_the_graph)
        v = x[1:]
        for i in range(3):
            if x[i] > 0:
                v[i] = v[i] * 2
                acc[i] += 1
            elif y[i] > 0:
                v.add_(y[i])
            else:
                acc.sub_(x[i])
        return acc, x * 1

    jitted = thunder.jit(f)
    g = torch.Generator().manual_seed(3)
    for _ in range(12):
        x, y = torch.randn(4, generator=g), torch.randn(4, generator=g)
        e_in, c_in = In(x.clone(), y.clone()), In(x.clone(), y.clone())
        compare_call(jitted(*c_in.args), f(*e_in.args), c_in, e_in)
    assert thunder.compile_stats(jitted).branches_converted == 2
    assert_compiled(jitted)


def test_an_error_of_a_graph_run_as_captured_prints_nothing_to_stderr(capfd):
    """A call whose written input overlaps another runs the graph as captured, where eager's error is raised; it
    went through GraphModule.__call__ (Dynamo's graphs are lazy: their forward calls the module), which printed
    FX's "Call using an FX-traced Module" traceback to stderr first."""
    def f(a, b):
        a.mul_(b)
        return a

    jitted = thunder.jit(f)
    jitted(torch.ones(4), torch.ones(4))
    x = torch.ones(4)
    jitted(x, x)
    capfd.readouterr()
    base = torch.arange(6.0)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        jitted(base[:4], base[2:])
    assert "FX-traced Module" not in capfd.readouterr().err


def test_an_in_place_op_run_by_torch_into_a_slice_of_a_region_written_earlier_writes_that_tensor():
    """`y[1:3].sub_(y[0:2])` overlaps unevenly, so torch runs it in place (eager raises for it). After `y[1:] =
    c[:-1]`, the functionalization's peephole read `y[1:3]` as a slice of c's slice (the update's source): the write
    went into the caller's c, no error was raised and y came back unwritten (grad repro_03)."""
    def f(x, c):
        y = x * 1
        y[1:] = c[:-1]
        y[1:3].sub_(y[0:2])
        return y

    c = torch.ones(4)
    for fn in (f, thunder.jit(f)):
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            fn(torch.arange(4.0), c)
        torch.testing.assert_close(c, torch.ones(4))


def test_a_detached_copy_of_itself_written_into_a_tensor_that_requires_grad_keeps_it_requiring_grad():
    """`c += b` makes the caller's c require grad; `c.copy_(c.detach())` keeps it requiring grad in eager
    (CopyBackwards: b.grad zeros). The written value was read from c's old value -- through a detach -- so the
    functionalization did not join it to the old value (where(True, new, old)), and c and the output lost their
    autograd history (fuzz2 repro_02)."""
    def f(b, c):
        c += b
        c.copy_(c.detach())
        return c * 1

    results = []
    for fn in (f, thunder.jit(f)):
        b, c = torch.ones(2, 3, requires_grad=True), torch.ones(2, 3)
        out = fn(b, c)
        assert c.requires_grad and out.requires_grad
        out.sum().backward()
        results.append((out, c, b.grad))
    for expected, actual in zip(*results):
        torch.testing.assert_close(actual, expected)


def _addmm_into_itself(a):
    a.addmm_(a, a)
    return a


def _matmul_out_itself(a):
    torch.matmul(a, a, out=a)
    return a


def _index_copy_from_itself(a):
    a.index_copy_(0, torch.tensor([2, 1, 0]), a)
    return a


def _scatter_add_from_itself(a):
    a.scatter_add_(0, torch.zeros(3, 3, dtype=torch.long), a)
    return a


@pytest.mark.parametrize("f", [_addmm_into_itself, _matmul_out_itself, _index_copy_from_itself,
                               _scatter_add_from_itself])
def test_a_write_reading_other_elements_of_its_destination_runs_as_eagers(f):
    """An argument that is the destination itself was exempt from the overlap check (the same elements in the
    same layout are read before they are written: exact for elementwise ops only). `a.addmm_(a, a)` reads rows
    eager's kernel has written already (thunder gave the mathematical a + a @ a), and index_copy_/scatter_add_
    raise in eager (thunder raised nothing): such a write runs in place with torch (alias repro_02, repro_03)."""
    expected, actual = (outcome(lambda: fn(torch.arange(9.0).reshape(3, 3) / 10).clone(),
                                "refer to a single memory location") for fn in (f, thunder.jit(f)))
    assert_same_outcome(actual, expected)


def _copied(x, y):
    v = x * 2
    v.copy_(y)
    return v


def _assigned_view(x, y):
    v = x.clamp(max=-0.25)
    v[:] = y
    return v[0], x + 1


def _two_views_of_a_copy(x, y):
    v = torch.empty_like(x)
    v.copy_(y.t().t())
    return v, v.t()


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("fn", [_copied, _assigned_view, _two_views_of_a_copy], ids=lambda f: f.__name__[1:])
def test_an_output_written_whole_from_an_input_is_a_new_tensor(fn, requires_grad):
    """Functionalization forwards a value written whole into a new tensor (v.copy_(y) makes v y's value): the
    program returned the input y itself, or a view of it, where eager returns a new tensor, and a write to the result
    changed the caller's y (found by a random-program fuzzer). Outputs eager makes new are copied where the program
    returned an input's memory; outputs that are views of one another in eager still are."""
    x = torch.randn(2, 3, requires_grad=requires_grad)
    y = torch.zeros(2, 3)
    expected, actual = fn(x, y), thunder.jit(fn)(x, y)
    assert_same(actual, expected)
    inputs = {t.untyped_storage().data_ptr() for t in (x, y)}
    storages = [t.untyped_storage().data_ptr() for t in (actual if isinstance(actual, tuple) else (actual,))]
    assert not inputs & set(storages), "an output shares an input's memory"
    if fn is _two_views_of_a_copy:
        assert storages[0] == storages[1]
    returned_as_is = thunder.jit(lambda x, y: (y, y.t()))(x, y)
    assert returned_as_is[0] is y and returned_as_is[1].untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def _write_through_dropout(x):
    y = torch.nn.functional.dropout(x, 0.5, training=False)
    y.mul_(3)
    return y + 1


def _dropout_p0_then_write_input(x):
    y = torch.nn.functional.dropout(x, 0.0)
    x.add_(1)
    return y * 2


def _dropout_module_eval(x):
    y = _EVAL_DROPOUT(x)
    y.sub_(1)
    return y


_EVAL_DROPOUT = torch.nn.Dropout(0.5).eval()


@pytest.mark.parametrize("fn", [_write_through_dropout, _dropout_p0_then_write_input, _dropout_module_eval],
                         ids=lambda f: f.__name__[1:])
def test_dropout_that_returns_its_input_is_a_view(fn):
    """Dropout not training, with p = 0 or of an empty tensor returns its input itself (ATen's _dropout_impl): a
    write to the result is a write to the input, and a write to the input shows in the result. Dropout was not
    among the ops functionalization treats as views, and the writes were lost."""
    check(fn, lambda: (torch.randn(2, 3, generator=_GEN),))


def test_a_write_through_dropout_whose_aliasing_is_decided_at_run_time_reaches_the_input():
    """Dropout with a symbolic p (``dynamic=True`` makes a float argument one) or called as an ATen op is opaque,
    and its example value is a new tensor; at run time it returns its input for p = 0 or not training. Its result
    is treated as a possible view of its input -- writes after it run in place -- and so a write through it reaches
    the input exactly when eager's does (it was lost)."""
    def symbolic_p(x, p):
        y = torch.nn.functional.dropout(x, p, training=True)
        y.mul_(3)
        return y

    def aten_calls(x):
        y = torch.ops.aten.dropout(x, 0.5, False)
        y.add_(1)
        z = torch.ops.aten.feature_dropout.default(x, 0.0, True)
        z.mul_(2)
        return y, torch.ops.aten.alpha_dropout(x, 0.3, False) * 1

    jitted = thunder.jit(symbolic_p, dynamic=True)
    for p in (0.0, 1.0, 0.0):  # p = 1 zeroes a new tensor: deterministic both ways
        x = torch.randn(2, 3, generator=_GEN)
        expected_x = x.clone()
        expected = symbolic_p(expected_x, p)
        assert_same(jitted(x, p), expected)
        assert_same(x, expected_x)
    check(aten_calls, lambda: (torch.randn(2, 3, generator=_GEN),), compiled=False)


def test_a_write_through_dropout_into_a_leaf_that_requires_grad_raises_like_eager():
    """Eval-mode dropout returns its input; a write through its result into a leaf that requires grad raises in
    eager. Dynamo's trace does not see it reach the leaf, and thunder's program wrote the leaf silently: the
    graph's runner raises eager's error (with grad mode on), and under no_grad, or in a graph that turns grad mode
    off itself (an optimizer's step), the write is made."""
    def fn(x):
        y = torch.nn.functional.dropout(x, 0.5, training=False)
        y.mul_(2)
        return y

    def step(p, g):
        with torch.no_grad():
            p.add_(g, alpha=-0.5)
        return p * 1

    for f in (fn, thunder.jit(fn)):
        x = torch.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            f(x)
        with torch.no_grad():
            f(x)
        assert x.tolist() == [2.0, 2.0, 2.0]
    p, g = torch.ones(3, requires_grad=True), torch.ones(3)
    thunder.jit(step)(p, g)
    assert p.tolist() == [0.5, 0.5, 0.5]


def test_an_explicit_inplace_dunder_call_writes():
    """c.__iadd__(1), c.__ilshift__(d) and c.__setitem__(0, v), called explicitly (Dynamo records a method call
    whose result is unused), are imported as the operator calls c += 1, c <<= d, c[0] = v: they write (an explicit
    __iadd__ was imported as an out-of-place add, writing nothing), and raise as those do."""
    def f(c, d):
        c.__iadd__(1)
        c.__imul__(d)
        d.__setitem__(0, c.sum())
        return c * 2

    c, d = torch.zeros(3), torch.arange(3.0)
    ce, de = c.clone(), d.clone()
    assert_same(thunder.jit(f)(c, d), f(ce, de))
    assert_same(c, ce)
    assert_same(d, de)

    def shifts(c, d):
        c.__ilshift__(d)
        c.__irshift__(1)
        return c + 1

    c, d = torch.arange(3), torch.tensor([1, 2, 3])
    ce = c.clone()
    assert_same(thunder.jit(shifts)(c, d), shifts(ce, d))
    assert_same(c, ce)
    with pytest.raises(RuntimeError, match="bool tensors is not supported"):
        thunder.jit(lambda a, b: a.__isub__(b))(torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bool))


# Values that stand for an input's memory as it was, read after that memory is written (found by a break-it pass)

def _copy_then_write_source(a):
    v = torch.empty_like(a)
    v.copy_(a)
    a.zero_()
    return v


def _copy_between_inputs(cur, prev):
    total = cur.sum()
    prev.copy_(cur)
    cur.add_(1)
    return total


def _broadcast_copy_then_masked_write(a0, a1):
    a0.copy_(a1)
    t1 = a1.view(-1)
    t1[t1 > 0] = -1
    a0.add_(1)
    return a0, t1, a1


def _copy_before_an_effect(a0, a1):
    a0.copy_(a1)
    a1.mul_(a1 + 1)
    a1.add_(a0)
    t = torch.empty_like(a0).copy_(a0)
    a1.mul_(-2)
    a1[a1 > 0] = -1
    t.add_(1)
    return a0, t


def _copy_viewed_after_writes(a0, a1):
    t1 = torch.empty_like(a1).copy_(a1)
    t2 = a1.transpose(0, -1)
    t2.mul_(-2)
    a1.add_(1)
    a0.neg_()
    return t1[::2], a0, t2


@pytest.mark.parametrize("fn, make", [
    (_copy_then_write_source, lambda: (_randn(4),)),
    (_copy_between_inputs, lambda: (_randn(2, 3), torch.zeros(2, 3))),
    (_broadcast_copy_then_masked_write, lambda: (_randn(3, 4), _randn(4))),
    (_copy_before_an_effect, lambda: (_randn(3, 4), _randn(3, 4))),
    (_copy_viewed_after_writes, lambda: (_randn(2, 4), _randn(2, 4))),
], ids=lambda v: v.__name__[1:] if callable(v) and v.__name__.startswith("_") else "")
def test_a_value_of_an_input_read_after_the_input_is_written(fn, make):
    """v.copy_(a) makes v's value a's memory as it is: the copy-back into a at the end (or the store before an
    in-place effect) overwrote that memory first, and v (returned, or copied back into another input) read a's new
    values. Such a value is cloned before its memory is written."""
    with torch.no_grad():
        check(fn, make, aliasing=False)


def _contiguous_of_a_transposed_result(x):
    y = x * 2
    c = y.contiguous()
    y.zero_()
    return c


def _contiguous_of_a_transposed_result_written(x):
    y = x * 2
    c = y.contiguous()
    c.zero_()
    return y


def _transposed_back_is_a_view(x):
    y = x * 2
    c = y.t().contiguous()
    c.zero_()
    return y


def _masked_write_into_a_contiguous_copy(x):
    x.mul_(2)
    c = x.contiguous()
    c[c > 0.5] = -1
    return c.sum()


@pytest.mark.parametrize("fn", [_contiguous_of_a_transposed_result, _contiguous_of_a_transposed_result_written,
                                _transposed_back_is_a_view, _masked_write_into_a_contiguous_copy],
                         ids=lambda f: f.__name__[1:])
def test_contiguous_views_or_copies_as_eager_lays_the_result_out(fn):
    """Eager lays an elementwise result out as its input: x * 2 of a transposed x is transposed, so its contiguous()
    is a copy and its .t().contiguous() a view. Functionalization took every computed value as contiguous (the
    first two returned zeros), and a copy thunder's value made no copy of at run time (its kernels write contiguous
    outputs) took a masked write into x."""
    with torch.no_grad():
        check(fn, lambda: (_randn(4, 3).t(),), aliasing=False)


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["default", "torch"])
def test_contiguous_of_a_view_contiguous_only_in_eagers_layout_is_contiguous(executors):
    """(x * 2).t() of a transposed x is contiguous in eager, so its contiguous() returns it; thunder's kernel writes
    x * 2 contiguous, its .t() is not, and the importer had dropped the contiguous() as eager's no-op: the result
    was not contiguous (.view(-1) raised)."""
    def fn(x):
        return (x * 2).t().contiguous()

    x = _randn(5, 3).t()
    out = thunder.jit(fn, executors=executors)(x)
    torch.testing.assert_close(out, fn(x))
    assert out.is_contiguous() and out.stride() == fn(x).stride()
    out.view(-1)


def test_contiguous_in_channels_last_of_a_computed_value_is_channels_last():
    def fn(x):
        return (x * 2).contiguous(memory_format=torch.channels_last)

    x = _randn(2, 5, 3, 7).to(memory_format=torch.channels_last)
    out = thunder.jit(fn)(x)
    torch.testing.assert_close(out, fn(x))
    assert out.stride() == fn(x).stride()


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_addcmul_in_place_takes_its_value_in_the_tensors_dtype(dtype):
    """Dynamo writes x.addcmul_(a, b, value=v) as prims.fma(a * b, v, x); for an integer x eager takes v as an
    integer (0.5 -> 0), and thunder added a * b * 0.5."""
    def fn(x):
        y = x.clone()
        y.addcmul_(x, x, value=0.5)
        return y

    x = torch.tensor([1, 2, 3, -4, 5], dtype=dtype)
    assert torch.equal(thunder.jit(fn)(x), fn(x))


@pytest.mark.parametrize("overwrite", ["zero_", "fill_", "copy_ of a constant", "copy_ of a product", "setitem"])
def test_a_tensor_requiring_grad_overwritten_whole_keeps_requiring_grad(overwrite):
    """Eager keeps an overwritten tensor in the autograd graph and gives what it was a zero gradient (not None:
    weight decay skips a parameter whose .grad is None). Thunder's new value did not read the old one: the output
    did not require grad, backward through it raised, and the parameters behind it got None."""
    def f(x, w, p, v):
        y = x * p
        if overwrite == "zero_":
            y.zero_()
        elif overwrite == "fill_":
            y.fill_(2.0)
        elif overwrite == "copy_ of a constant":
            y.copy_(torch.ones(4))
        elif overwrite == "copy_ of a product":
            y.copy_(v * 2)
        else:
            y[:] = 0
        return (x * w).sum() + y.sum(), y

    def run(fn):
        torch.manual_seed(0)
        x, w, p, v = (torch.randn(4, requires_grad=i > 0) for i in range(4))
        loss, y = fn(x, w, p, v)
        assert y.requires_grad
        (loss + y.sum()).backward()
        return [loss, y, w.grad, p.grad, v.grad]

    for got, want in zip(run(thunder.jit(f)), run(f)):
        assert_same(got, want)


def test_an_overwrite_with_a_detached_tensor_leaves_its_source_without_a_gradient():
    """The written value was marked as requiring grad where it was w.detach() itself: the gradient went through the
    detach, and w.grad was zeros where eager leaves None (weight decay then moved w)."""
    def f(x, w):
        y = x * 2
        y.copy_(w.detach())
        return y.sum() + x.sum()

    grads = []
    for fn in (f, thunder.jit(f)):
        x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
        fn(x, w).backward()
        grads.append((x.grad, w.grad))
    assert grads[1][1] is None and grads[0][1] is None
    assert_same(grads[1][0], grads[0][0])


def _compare_with_gradients(fn, *shapes):
    """fn jitted against eager: outputs (values and requires_grad) and the inputs' gradients of their sum."""
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(s, generator=gen) for s in shapes]
    results = []
    for f in (fn, thunder.jit(fn)):
        args = [v.clone().requires_grad_() for v in values]
        out = f(*args)
        outs = out if isinstance(out, tuple) else (out,)
        assert all(o.requires_grad for o in outs)
        sum(o.sum() for o in outs).backward()
        results.append(([o.detach() for o in outs], [a.grad for a in args]))
    assert_same(results[1], results[0])


def _written_then_indexed(a):
    t = a * 2
    t.mul_(a)
    t[torch.tensor([0])] = 0.0  # an opaque write: the pending mul_ lands first
    return t


def _written_then_transposed(a):
    t = a * 2
    t.pow_(3)
    _ = t.mT  # an opaque getattr
    return t


def _written_in_grad_mode_then_not(a):
    t = a * 1
    t.mul_(3)
    with torch.no_grad():
        t.add_(1)
    return t


def _written_into_a_detached_tensor(a):
    t = (a * 1).detach()
    t.add_(a)
    return t


def _written_then_indexed_twice(a):
    t = a * 2
    t.mul_(a)
    t[torch.tensor([0])] = 0.0  # the effect takes mul's result as t's memory
    t.view(-1).add_(1)          # a write through a view: stored into that memory, not t's first
    t[torch.tensor([1])] = 1.0
    return t


def _written_then_indexed_with_a_view(a):
    t = a * 2
    t.mul_(a)
    v = t.view(-1)
    t[torch.tensor([0])] = 7.0
    return t, v * 1


@pytest.mark.parametrize("fn", [_written_then_indexed, _written_then_transposed, _written_in_grad_mode_then_not,
                                _written_into_a_detached_tensor, _written_then_indexed_twice,
                                _written_then_indexed_with_a_view])
def test_writes_before_an_effect_keep_their_gradients(fn):
    """A pending write stored into its tensor before an opaque op bumped the version of memory autograd had saved
    (mul's input): backward raised. Now the effect takes the written value's memory. A write into a detached
    tensor of a value requiring grad makes it require grad, as eager records it on the view."""
    _compare_with_gradients(fn, (3, 2))


def test_a_tensor_copied_into_a_new_one_is_returned_as_two_tensors():
    def fn(a):
        t = a * 2
        u = torch.ones_like(t)
        u.copy_(t)
        return t, u

    t, u = thunder.jit(fn)(torch.randn(3))
    assert t is not u and t.untyped_storage().data_ptr() != u.untyped_storage().data_ptr()
    assert_same(u, t)


def test_scatter_of_a_number_known_at_run_time():
    def fn(x, v):
        with torch.no_grad():
            return x.scatter(0, torch.tensor([0, 1]), v)

    jitted = thunder.jit(fn)
    for v in (0.5, 1.5, -2.0):
        assert_same(jitted(torch.zeros(3), v), fn(torch.zeros(3), v))


def test_a_copy_under_no_grad_leaves_its_destination_without_grad():
    """`with torch.no_grad(): ema.copy_(p)`: the copy-back into ema runs after grad mode is back on, and recorded
    the copy of p (which requires grad): the caller's ema came to require grad."""
    def fn(ema, p):
        with torch.no_grad():
            ema.copy_(p)
        return ema

    ema, p = torch.zeros(2), torch.ones(2, requires_grad=True)
    out = thunder.jit(fn)(ema, p)
    assert not ema.requires_grad and not out.requires_grad
    assert_same(ema, torch.ones(2))


def test_writes_through_a_detached_view_after_a_recorded_one_reach_its_base():
    """After `t.add_(a)` into a detached view, reads of t are the value written; the writes after it must still go
    into t's memory (they went into that value: y missed the mul_)."""
    def fn(x, a):
        y = x * 1
        t = y.detach()
        t.add_(a)
        t.mul_(2)
        t[0] = 5.0
        return y

    x, a = torch.ones(3, 2), torch.ones(3, 2, requires_grad=True)
    assert_same(thunder.jit(fn)(x, a), fn(x, a))


def test_an_op_whose_decomposition_is_views_does_not_alias_before_an_effect():
    """`x.repeat(1)` is a copy in eager; its decomposition is reshapes of x, which the torch executor runs as views
    (in a graph with symbolic sizes, where ops around it stay unfused). The opaque `relu_` of x after it then also
    changed the repeat's result."""
    def fn(a0, a1):
        t3 = a1.clone()
        t4 = a0.select(0, 1)
        t5 = t3.repeat(1)
        t3.relu_()
        return t4 / t5

    jitted = thunder.jit(fn)
    for n in (2, 3, 4):  # the second shape compiles a graph with symbolic sizes
        args = (torch.ones(n, dtype=torch.bool), torch.tensor(-0.5))
        assert_same(jitted(*args), fn(*args))


def test_a_layout_eager_copies_with_is_cloned_before_an_opaque_write():
    """The kernel writes `a0 * 1` contiguous where eager keeps a transposed layout, so `flatten()` (a copy in eager)
    returned a view at run time, and the opaque `masked_scatter_` read memory it wrote. A graph whose only writes are
    opaque ops is functionalized too (it was skipped)."""
    def fn(a0):
        t1 = a0 * 1
        t3 = t1.flatten()
        t1.t().masked_scatter_(torch.tensor(True), t3)
        return t1

    make = lambda: torch.arange(4.).view(2, 2).t()  # noqa: E731
    assert_same(thunder.jit(fn)(make()), fn(make()))


def test_an_opaque_write_through_a_view_after_a_write_through_a_transpose():
    """`x.t().mul_(2)` leaves x's value a transpose, which the opaque masked write moves into memory of its own as a
    contiguous copy; the write's view of x was still made on the transpose, so the zeros went to a temporary and x
    came back without them."""
    def fn(a, m):
        x = a * 1
        x.t().mul_(2)
        x.expand(2, 4, 6)[0][m] = 0.0
        return x

    m = torch.zeros(4, 6, dtype=torch.bool)
    m[0, :3] = True
    assert_same(thunder.jit(fn)(torch.ones(4, 6), m), fn(torch.ones(4, 6), m))


def test_an_augmented_assignment_of_a_whole_region_after_an_opaque_view():
    """`t5[0:1:2] += 3` ends with `t5[0:1:2] = <the region>`. After an opaque view (unfold) the write runs in place;
    thunder's region is t5 itself (the key takes everything), with other strides than eager's, and torch raised
    that source and destination overlap in part."""
    def fn(a1, a3):
        a1.abs_()
        t1 = a3[0::1]
        t1.unfold(1, 1, 1)
        t5 = t1[None]
        t5[0:1:2] += 3.0
        return t5 * 2

    make = lambda: (torch.ones(4), torch.arange(10.).view(5, 2))  # noqa: E731
    a, e = make(), make()
    assert_same(thunder.jit(fn)(*a), fn(*e))
    assert_same(a, e)


def test_a_written_detached_view_returned_with_its_base_keeps_its_gradient():
    """`t = y.detach(); t.add_(a); return y, t`: eager records the write on t (it requires grad, a gets a gradient).
    Returned with its base, t was made again after the call as y.detach(), without that history; the graph now
    runs with torch, which says so."""
    def fn(x, a):
        y = x * 1
        t = y.detach()
        t.add_(a)
        return y, t

    a = torch.ones(3, 2, requires_grad=True)
    _, t = thunder.jit(fn)(torch.ones(3, 2), a)
    assert t.requires_grad
    t.sum().backward()
    assert_same(a.grad, torch.ones(3, 2))


@pytest.mark.filterwarnings("ignore:Use of masked_fill_ on expanded tensors is deprecated")
@pytest.mark.parametrize("detached", [False, True])
def test_a_write_into_an_expanded_tensor_runs_as_eager_runs_it(detached):
    """masked_fill_ into an expanded view writes each shared element in eager (a deprecated write, with a
    warning). Kept in place as a copy (the write of a detached view), torch raised that elements of the written-to
    tensor share memory; lowered, the graph ran with torch. The write now runs as torch's own in-place op."""
    def fn(a):
        t = (a.detach() if detached else a * 1).expand(3, 2)
        t.masked_fill_(a > 0, -2)
        return t * 1

    make = lambda: torch.ones(1, requires_grad=True).clone()  # noqa: E731
    jitted = thunder.jit(fn)
    assert_same(jitted(make()), fn(make()))
    assert_compiled(jitted)


def test_a_detached_input_made_to_require_grad_and_written_in():
    """`t2 = a.detach().requires_grad_(); a.mul_(t2)`: in eager a then requires grad. The requires_grad_ was a flag
    in the trace only, where the torch executor ran the graph: a came back not requiring grad. Such a graph runs
    with torch."""
    def fn(a):
        t2 = a.detach().requires_grad_()
        a.mul_(t2)
        return a

    a, e = torch.tensor(2.0, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    out, expected = thunder.jit(fn)(a), fn(e)
    assert out.requires_grad and expected.requires_grad
    assert_same(out, expected)


def test_a_write_into_a_region_of_an_expanded_input():
    """`t[0:1] *= 2` of an expanded input writes the one element eager names; the copy-back of the functional
    write wrote the whole input, whose elements share memory, and torch raised."""
    def fn(t):
        t[0:1] *= 2.0
        return t * 1

    base_a, base_e = torch.tensor([-1.0]), torch.tensor([-1.0])
    assert_same(thunder.jit(fn)(base_a.expand(2)), fn(base_e.expand(2)))
    assert_same(base_a, base_e)


def test_a_subscript_write_with_index_tensors_is_lowered_and_differentiated():
    """`y[idx] = v` (Mixtral's inverse permutation, scatter-style updates) was an opaque in-place setitem, an
    effect that sent the graph's backward to torch; it is index_put now, with thunder's backward."""
    def fn(w, idx, v):
        y = w * 2
        y[idx] = v * 3
        y[idx[:1], 1] = 0.5
        return (y * y).sum()

    w, v, idx = torch.randn(5, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True), torch.tensor([3, 0, 4])
    jitted = thunder.jit(fn)
    out = jitted(w, idx, v)
    out.backward()
    we, ve = w.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
    expected = fn(we, idx, ve)
    expected.backward()
    assert_same(out, expected)
    assert_same(w.grad, we.grad)
    assert_same(v.grad, ve.grad)
    assert thunder.compile_stats(jitted).graphs[0]["backward"] == "thunder"


def test_a_subscript_write_with_index_tensors_raises_as_eager_does():
    """A value of another dtype, an index out of range: eager raises, and so does the lowered write."""
    def fn(x, idx, v):
        x = x * 1
        x[idx] = v
        return x

    x = torch.randn(5, 3)
    for idx, v in ((torch.tensor([0]), torch.randn(1, 3).double()), (torch.tensor([7]), torch.tensor(1.0))):
        with pytest.raises((RuntimeError, IndexError)):
            fn(x, idx, v)
        with pytest.raises((RuntimeError, IndexError)):
            thunder.jit(fn)(x, idx, v)


def test_a_view_made_under_no_grad_and_returned_has_no_history():
    """`with torch.no_grad(): t1 = a0[:]` returned with a0's product: eager's t1 requires grad but has no grad_fn
    (its gradient never reaches a0). Made again after the call in grad mode, it was connected to a0, and a0's
    gradient counted t1's."""
    def fn(a0):
        with torch.no_grad():
            t1 = a0[:]
        return a0 * 1, t1

    for jitted in (thunder.jit(fn), torch.compile(fn, backend="thunder")):
        leaf = torch.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
        out, t1 = jitted(leaf)
        assert t1.requires_grad and t1.grad_fn is None
        (out.sum() + 10 * t1.sum()).backward()
        assert_same(leaf.grad, torch.ones(1, 3))


def test_a_copy_of_a_broadcast_value_of_another_dtype_returns_a_dense_tensor():
    """`t = a2 / 2; t.copy_(a1)` with a 0-d a1 of another dtype returned expand(a1 cast): a stride-0 tensor, into
    which the caller's `out.add_(1)` (or the next graph's write) raised."""
    def fn(a1, a2):
        t = a2 / 2
        t.copy_(a1)
        return t

    a1, a2 = torch.tensor(1, dtype=torch.int64), torch.randn(4)
    out, expected = thunder.jit(fn)(a1, a2), fn(a1, a2)
    assert_same(out, expected)
    assert out.stride() == expected.stride()
    out.add_(1)


def test_an_opaque_view_of_a_value_thunder_lays_out_otherwise_runs_the_graph_with_torch():
    # (x * 1) of a transposed x is transposed in eager, so its .t() is contiguous and flatten() a view, which the
    # later relu_ of t reaches. thunder's kernel writes x * 1 contiguous: an opaque op on it (unflatten, at
    # shapes traced again) would copy where eager views, and miss the write. Such a graph runs with torch.
    def fn(x):
        t = (x * 1).t()
        r = t.flatten().unflatten(0, t.shape)
        t.relu_()
        return r * 1

    jitted = thunder.jit(fn)
    for n in (2, 3, 4):
        x = torch.randn(3, n).t()
        assert_same(jitted(x), fn(x))
    reasons = [g["reason"] for g in thunder.compile_stats(jitted).uncompiled]
    assert reasons and all("is a view, in eager, of a value thunder lays out otherwise" in r for r in reasons)


def test_a_write_in_grad_mode_lands_before_no_grad_begins():
    # x.sub_(w) records autograd history on x; a later write under no_grad keeps it (x's grad_fn stays), so the
    # returned x is still connected to w. The first write was pending past the grad-mode change and landed under
    # no_grad, where it recorded nothing: x.grad_fn None, and backward raised.
    def f(x, w):
        x.sub_(w)
        with torch.no_grad():
            x.add_(1)
        return x

    results = []
    for fn in (f, thunder.jit(f)):
        x, w = torch.tensor([-1.0, 1.0]), torch.tensor([-0.25, 0.75], requires_grad=True)
        out = fn(x, w)
        out.sum().backward()
        results.append((out.detach(), x.requires_grad, w.grad))
    assert_same(results[1], results[0])


def test_a_write_through_a_view_then_a_no_grad_write_keeps_what_backward_saved():
    # v.mul_(x[:2]) writes h through a view; the slice_update the pass makes for it was stored into h's memory when
    # grad mode went off, which bumped the version of the view mul's backward had saved ("modified by an inplace
    # operation"). The no_grad block now takes that value as h's memory, as for a tensor of the program's own.
    def f(w, x):
        h = w * 2
        v = h[:2]
        v.mul_(x[:2])
        with torch.no_grad():
            h[2:].zero_()
        return h

    results = []
    for fn in (f, thunder.jit(f)):
        w = torch.tensor([0.5, -1.0, 2.0, 3.0], requires_grad=True)
        x = torch.tensor([1.5, 0.25, -2.0, 1.0], requires_grad=True)
        out = fn(w, x)
        out.sum().backward()
        results.append((out.detach(), w.grad, x.grad))
    assert_same(results[1], results[0])


@pytest.mark.parametrize("write", [lambda h, w: h[:, :2].add_(w[:, :2]), lambda h, w: h.t().add_(w),
                                   lambda h, w: h.view(-1).add_(w.view(-1))], ids=["slice", "t", "flat"])
def test_a_write_through_a_view_of_a_detached_tensor_records_history_on_it(write):
    # In eager, the detached tensor is the written view's base: the write records its history there, and h then
    # requires grad (w's gradient reaches it). thunder returned a detach made again from the root, without it:
    # h.requires_grad False, and w silently got no gradient.
    def f(x, w):
        h = (x * w).detach()
        write(h, w)
        return h * 2

    results = []
    for fn in (f, thunder.jit(f)):
        x = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0], [2.0, 1.0, -0.5]])
        w = torch.tensor([[0.5, 1.5, -1.0], [2.0, -0.5, 1.0], [0.25, 3.0, 2.0]], requires_grad=True)
        out = fn(x, w)
        out.sum().backward()
        results.append((out.detach(), out.requires_grad, w.grad))
    assert_same(results[1], results[0])


def test_a_write_through_a_flattening_view_then_an_opaque_view_keeps_what_backward_saved():
    # A CLIP-style loss: logits.view(-1).mul_(scale), then logits.diagonal() (an opaque view, an effect): the write
    # was stored into logits' memory before it, bumping the version of the flat view mul's backward saved for
    # scale's gradient. The effect now takes the written value (a reshape of mul's result) as logits' memory.
    def f(x, w, s):
        h = x * w
        h.view(-1).mul_(s)
        return h + h.diagonal().sum()

    results = []
    for fn in (f, thunder.jit(f)):
        x = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0], [2.0, 1.0, -0.5]])
        w = torch.tensor([[0.5, 1.5, -1.0], [2.0, -0.5, 1.0], [0.25, 3.0, 2.0]], requires_grad=True)
        s = torch.tensor(2.0, requires_grad=True)
        out = fn(x, w, s)
        out.sum().backward()
        results.append((out.detach(), w.grad, s.grad))
    assert_same(results[1], results[0])


def test_a_tensor_written_through_its_transpose_is_returned_laid_out_as_eagers():
    # The write's inverse made y's value a transpose (column-major): y.view(-1) by the caller raised.
    def f(x):
        y = x * 2
        y.t()[0].fill_(1)
        return y

    x = torch.arange(9.0).reshape(3, 3)
    out, ref = thunder.jit(f)(x), f(x)
    assert_same(out, ref)
    assert out.stride() == ref.stride()
    assert_same(out.view(-1), ref.view(-1))


@pytest.mark.parametrize("write", [lambda h, w: h.t().mul_(w[0, 0]), lambda h, w: h.view(-1).mul_(w[0, 0])],
                         ids=["t", "flat"])
def test_a_write_through_a_full_view_then_a_no_grad_block_keeps_what_backward_saved(write):
    # The write's value (a transpose or reshape the pass made of mul's result) was stored into h's memory when
    # grad mode went off, bumping the version of the view mul's backward saved ("modified by an inplace
    # operation"); it now becomes h's memory (a transpose as a contiguous copy, laid out as h).
    def f(x, w, buf):
        h = x * w
        write(h, w)
        with torch.no_grad():
            buf.add_(1.0)
        return h

    results = []
    for fn in (f, thunder.jit(f)):
        x = torch.arange(16.0).reshape(4, 4) / 8 - 1
        w = (torch.arange(16.0).reshape(4, 4) / 5 - 1.5).requires_grad_()
        buf = torch.zeros(4)
        out = fn(x, w, buf)
        out.sum().backward()
        results.append((out.detach(), out.stride(), w.grad, buf))
    assert_same(results[1], results[0])


def test_a_no_grad_copy_of_a_view_reads_the_base_before_a_later_grad_mode_write():
    # buf.copy_(h[0]) under no_grad left buf's value a view of h; the grad-mode write of h landed (at the next
    # no_grad block) before buf's store, which then read h as written (torch raised: "a view was created in
    # no_grad mode and its base ... modified inplace with grad mode enabled").
    def f(x, w, buf):
        h = x * w
        with torch.no_grad():
            buf.copy_(h[0])
        h.t().add_(w)
        with torch.no_grad():
            y = buf * h
        return y, h

    results = []
    for fn in (f, thunder.jit(f)):
        x = torch.arange(16.0).reshape(4, 4) / 8 - 1
        w = (torch.arange(16.0).reshape(4, 4) / 5 - 1.5).requires_grad_()
        buf = torch.zeros(4)
        y, h = fn(x, w, buf)
        h.sum().backward()
        results.append((y, h.detach(), w.grad, buf))
    assert_same(results[1], results[0])


@pytest.mark.parametrize("write", [lambda h, y: h.t().mul_(y), lambda h, y: h.view(-1).mul_(y)], ids=["t", "flat"])
def test_a_written_value_another_root_reads_is_not_taken_as_memory(write):
    # c.copy_(h) after h's write leaves c's value h's written one; an opaque in-place op of h (i0_) then took that
    # value as h's memory (its transpose contiguous copy aliased it where a dim is 1) and changed c with h.
    def f(x, y):
        h = x * 2
        write(h, y)
        c = torch.zeros_like(h)
        c.copy_(h)
        h.i0_()
        return h, c

    x, y = torch.tensor([[0.5], [-1.0], [2.0]]), torch.tensor(1.5)
    assert_same(thunder.jit(f)(x, y), f(x, y))


def test_a_value_read_before_a_write_of_a_value_requiring_grad_has_no_autograd_history():
    """Dynamo's example of `t` is the one fake tensor the later `t.fill_(x.sum())` made require grad: the importer
    took `t = m.double()` as requiring grad, and with it `r = t * 1`, read before the write (eager's `r` has no
    autograd history: `r.sum().backward()` raises). A value none of whose arguments requires grad does not, where
    its memory is written in the graph; a write of a value that does marks the memory for later reads."""
    def f(x, m):
        t = m.double()
        t.mul_(2)
        r = t * 1
        t.fill_(x.sum())
        return r, t * 3

    def g(x):
        t = torch.zeros(3)
        t[0] = x.sum()
        y = t * 2  # read after the write: requires grad
        y.add_(1)
        return y

    def overwritten(x, m):  # requires grad after `add_(x)`, still after the fill (eager: x.grad zeros)
        t = m.float()
        t.add_(x)
        t.fill_(2)
        return t

    def zeroed(x, m):
        t = m.float()
        t.add_(x)
        t.zero_()
        return t * 3

    def made_like(x):  # ones_like reads none of x's values: `r` has no autograd history
        t = torch.ones_like(x)
        t.fill_(1.0)
        r = t * 3
        t.mul_(x)
        return r, t

    mask = torch.tensor([True, False, True])
    for fn, extra in ((f, (mask,)), (g, ()), (overwritten, (mask,)), (zeroed, (mask,)), (made_like, ())):
        results = []
        for call in (fn, thunder.jit(fn)):
            x = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                x.copy_(torch.arange(3.0))
            out = call(x, *extra)
            out = out if isinstance(out, tuple) else (out,)
            sum(o.sum() for o in out if o.requires_grad).backward()
            results.append(([o.requires_grad for o in out], [o.detach() for o in out], x.grad))
        assert results[1][0] == results[0][0]
        torch.testing.assert_close(results[1][1:], results[0][1:])
