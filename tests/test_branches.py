"""Data-dependent branches (thunder.frontend.branches): converted to selects when sound, left as Python otherwise.

Every case compares with eager: values, gradients, and the inputs after the call."""
import contextlib
import copy
import operator
import re

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.frontend import branches
from conftest import assert_same, assert_same_outcome, outcome


def sites(jitted):
    return sorted(jitted._thunder_state.branches.values(), key=lambda s: s.id)


def converted(jitted):
    return [s for s in sites(jitted) if s.converted and not s.reason]


def check_grads(fn, *inputs, trials=1):
    """fn jitted and eager, on clones of inputs needing grad: values and gradients equal."""
    jitted = thunder.jit(fn)
    for _ in range(trials):
        a = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        b = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        out, expected = jitted(*a), fn(*b)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        for x, y in zip(a, b):
            if y.requires_grad:
                torch.testing.assert_close(x.grad, y.grad, equal_nan=False)
    return jitted


# ---- the seed's examples ----

def some_computation(x, y):
    for i in range(x.size(0)):
        if x[i] > 0:
            y = y + x[i] * x[i]
        else:
            y = y - x[i]
    return y


class SeedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 20)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(20, 1)

    def forward(self, x):
        x = self.fc1(x)
        x = self.relu(x)
        x = self.complex_activation(x)
        x = self.fc2(x)
        return x

    def complex_activation(self, x):
        for i in range(x.shape[1]):
            if x[0, i] > 0.5:
                x[0, i] = torch.sin(x[0, i])
            else:
                x[0, i] = torch.cos(x[0, i])
        return x


def test_seed_example_1_one_graph_values_and_grads():
    jitted = thunder.jit(some_computation)
    torch.manual_seed(0)
    for _ in range(200):
        x = torch.randn(5, requires_grad=True)
        y = torch.tensor(0.0, requires_grad=True)
        xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        out, expected = jitted(x, y), some_computation(xe, ye)
        torch.testing.assert_close(out, expected)
        out.backward()
        expected.backward()
        torch.testing.assert_close(x.grad, xe.grad)
        torch.testing.assert_close(y.grad, ye.grad)
    s = jitted._thunder_state
    assert len(s.graphs) == 1 and not s.graph_breaks, thunder.summary(jitted)
    assert len(converted(jitted)) == 1
    assert "converted to a select" in thunder.summary(jitted)


def test_seed_example_2_one_graph():
    torch.manual_seed(0)
    model = SeedModel()
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    with torch.no_grad():
        for _ in range(200):
            inp = torch.randn(1, 10)
            torch.testing.assert_close(jitted(inp), reference(inp))
    assert len(jitted._thunder_state.graphs) == 1 and not jitted._thunder_state.graph_breaks, thunder.summary(jitted)
    # The user's class and instance are untouched.
    assert type(model) is SeedModel and "forward" not in model.__dict__
    assert SeedModel.complex_activation.__code__ is reference.complex_activation.__func__.__code__


def test_seed_example_2_with_grad_enabled():
    """Forward with grad enabled (eager's own backward of this model raises: its in-place writes overwrite values
    sin/cos saved for backward)."""
    torch.manual_seed(0)
    model = SeedModel()
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for _ in range(20):
        inp = torch.randn(1, 10)
        torch.testing.assert_close(jitted(inp), reference(inp))
    assert len(jitted._thunder_state.graphs) == 1


# ---- what converts ----

def test_elif_else_nested_and_methods():
    def f(x):
        if x.sum() > 1:
            y = x * 2
        elif x.sum() > 0:
            y = x * 3
            if x[0] > 0:
                y = y + 1
        else:
            y = -x
        return y

    jitted = thunder.jit(f)
    for _ in range(50):
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x), f(x))
    assert len(converted(jitted)) == 3
    assert len(jitted._thunder_state.graphs) == 1
    # The trace's source comments name the user's function, not the arm functions thunder wrote.
    comments = re.findall(r"# test_branches.py:\d+ in (\w+):", str(thunder.last_traces(jitted)[0]))
    assert comments and set(comments) == {"f"}, comments


def test_code_after_a_graph_break_is_commented_with_the_users_function():
    def g(x):
        y = x * 2
        if y.sum().item() > 0:  # .item(): Dynamo breaks the graph; the rest runs in its resume function
            y = y * 2
        return y + 1

    jitted = thunder.jit(g)
    x = torch.ones(3)
    torch.testing.assert_close(jitted(x), g(x))
    texts = [str(thunder.last_traces(jitted, graph=i)[0]) for i in range(len(jitted._thunder_state.graphs))]
    comments = re.findall(r"# test_branches.py:\d+ in (\w+):", "\n".join(texts))
    assert len(texts) >= 2 and comments and set(comments) == {"g"}, comments


def test_if_on_tensor_truthiness():
    def f(x, t):
        if t:
            x = x + 1
        return x

    jitted = thunder.jit(f)
    for v in (True, False):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x, torch.tensor(v)), f(x, torch.tensor(v)))
    assert len(jitted._thunder_state.graphs) == 1


def test_a_negated_predicate_is_converted_with_its_arms_exchanged():
    """`if not x[i] > 0:` kept Python's `not`, which calls bool() on the tensor: Dynamo broke the graph there and,
    in the seed example's loop, skipped the whole frame (every call uncompiled)."""
    def f(x, y, flag: bool):
        for i in range(x.size(0)):
            if not x[i] > 0:
                y = y - x[i]
            else:
                y = y + x[i] * x[i]
            if not not (x[i] < -1):
                y = y * 2
        if not flag:  # a Python predicate, taken as Python takes it
            y = y + 100
        return y

    jitted = thunder.jit(f)
    torch.manual_seed(0)
    for k in range(6):
        x = torch.randn(5)
        assert_same(jitted(x, torch.tensor(0.0), k % 2 == 0), f(x, torch.tensor(0.0), k % 2 == 0))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 0 and not stats.graph_breaks, thunder.summary(jitted)
    captured = [s.code for s in converted(jitted) if s.captured]
    assert captured == ["if not x[i] > 0:", "if not not x[i] < -1:"], thunder.summary(jitted)


def test_conditional_expressions_are_converted_as_ifs_are():
    """Seed example 1 with its branch written `y = a if c else b`: only `if` statements were rewritten, so Dynamo
    skipped the whole frame (every call uncompiled) and no branch was listed."""
    def f(x, y, scale: float):
        for i in range(x.size(0)):
            y = y + x[i] * x[i] if x[i] > 0 else y - x[i]
            if x[i] < -1:  # a statement whose arm holds one
                y = y * 2 if not x[i] < -1.5 else y * 3
        squares = [v * v if v > 0 else v for v in x]  # a comprehension's own scope: left alone
        return (y if scale > 1 else -y) + squares[0]  # a Python predicate, taken as Python takes it

    jitted = thunder.jit(f)
    torch.manual_seed(0)
    for k in range(6):
        x, y = torch.randn(5, requires_grad=True), torch.tensor(0.5, requires_grad=True)
        xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        out, expected = jitted(x, y, 1.0 + k % 2), f(xe, ye, 1.0 + k % 2)
        assert_same(out, expected)
        out.backward()
        expected.backward()
        assert_same((x.grad, y.grad), (xe.grad, ye.grad))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 0, thunder.summary(jitted)
    captured = [s.code for s in converted(jitted) if s.captured]
    assert captured == ["y + x[i] * x[i] if x[i] > 0 else y - x[i]", "y * 2 if not x[i] < -1.5 else y * 3",
                        "if x[i] < -1:"], thunder.summary(jitted)
    assert "y + x[i] * x[i] if x[i] > 0 else y - x[i]  converted to a select" in thunder.summary(jitted)


def test_a_conditional_expression_whose_arms_are_numbers_is_given_up():
    def f(x):
        return x * (2 if x.sum() > 0 else 3)

    jitted = thunder.jit(f)
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
        assert_same(jitted(x), f(x))
    (site,) = sites(jitted)
    assert "not both tensors" in site.reason, site


def test_python_predicate_is_specialized_as_before():
    def f(x, flag: bool):
        if flag:
            x = x + 1
        return x * 2

    jitted = thunder.jit(f)
    for flag in (True, False):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x, flag), f(x, flag))


def test_inplace_write_to_input_under_branch():
    def f(x):
        if x[0] > 0:
            x[1] = x[1] * 10
        else:
            x.add_(1)
        return x.sum()

    jitted = thunder.jit(f)
    for _ in range(30):
        x = torch.randn(4)
        a, b = x.clone(), x.clone()
        ia = a
        torch.testing.assert_close(jitted(a), f(b))
        torch.testing.assert_close(a, b)
        assert a is ia
    assert len(jitted._thunder_state.graphs) == 1


# ---- gradient traps: the arm not taken must not leak NaN/inf into gradients ----

@pytest.mark.parametrize("name", ["sqrt", "log", "div", "pow"])
def test_gradient_traps(name):
    def f(x):
        if x.sum() > 0:
            if name == "sqrt":
                y = x.sqrt()
            elif name == "log":
                y = x.log()
            elif name == "div":
                y = 1 / x
            else:
                y = x ** 0.5
        else:
            y = -x
        return y

    for value in (-2.0, 0.0, 3.0):
        check_grads(f, torch.full((3,), value, requires_grad=True))


def test_an_output_requires_grad_only_where_the_arm_taken_makes_it():
    """`t` requires grad where the first arm runs, not where the second does (eager: no autograd history); the
    select would require grad either way, so the branch is given up, and each call matches eager."""
    def f(a, b):
        if b.sum() > 0:
            t = torch.maximum(a, b)
        else:
            t = b * 3
        return t, a * 2

    jitted = thunder.jit(f)
    a = torch.randn(4, 5, requires_grad=True)
    for b in (-torch.ones(4, 5), torch.ones(4, 5)):
        expected, actual = f(a, b), jitted(a, b)
        assert actual[0].requires_grad == expected[0].requires_grad
        torch.testing.assert_close(actual[0], expected[0])
    sites = thunder.compile_stats(jitted).branches
    assert sites and "autograd history" in sites[0].reason, sites
    # A trace of an arm run as a frame of its own names the user's function in its source comments.
    texts = "\n".join(str(thunder.last_traces(jitted, graph=i)[-1]) for i in range(len(jitted._thunder_state.graphs)))
    assert "in _thunder_" not in texts and re.search(r"# test_branches.py:\d+ in f:", texts)


def _one_arm_saves_the_other_writes(a, t1, c):
    if t1.sum() != t1.sum():
        a = torch.maximum(t1, a)  # saves t1
    else:
        t1[0] = c[2]
        a = a * 3
    return t1, a


def _an_arm_saves_a_write_after_writes(a, t1, c):
    if a.sum() > 0:
        t = t1 * a  # saves t1
    else:
        t = a * 2
    t1.add_(c[0])
    return t1, t


@pytest.mark.parametrize("f", [_one_arm_saves_the_other_writes, _an_arm_saves_a_write_after_writes])
def test_an_input_an_arm_saves_and_a_later_write_overwrites_is_not_converted(f):
    """An arm's VJP saves `t1`; the other arm, or the code after the branch, writes it. Eager runs one arm: where
    it is not the saving one, no error. Converted, both arms run and the write's copy-back overwrote the tensor the
    arm not taken saved: the backward raised "modified by an inplace operation". Such a branch is given up."""
    jitted = thunder.jit(f)
    a0, t0, results = -torch.rand(4, 5), torch.randn(4, 5), []
    for fn in (f, jitted):
        a, t1 = a0.clone().requires_grad_(), t0.clone()
        out_t1, out = fn(a, t1, torch.arange(20.0).view(4, 5))
        out.sum().backward()
        results.append((out_t1, out, t1, a.grad))
    for expected, actual in zip(*results):
        torch.testing.assert_close(actual, expected)
    assert any("overwritten" in s.reason for s in thunder.compile_stats(jitted).branches)


def _an_arm_writes_a_saved_value(x, w):
    e = (x @ w).exp()  # exp saves its output
    if x.sum() > 0:
        e.add_(1)
    return e


def _a_write_after_the_branch_into_a_saved_value(x, w):
    e = (x @ w).exp()
    if x.sum() > 0:
        r = e * 2
    else:
        r = e * 3
    e.add_(1)
    return r + e


@pytest.mark.parametrize("f", [_an_arm_writes_a_saved_value, _a_write_after_the_branch_into_a_saved_value])
def test_a_write_into_a_saved_value_raises_in_the_backward_as_eagers_whichever_arm_runs(f):
    """Eager's backward raises "modified by an inplace operation" where the write ran: after the branch, every
    call; in one arm, only where that arm ran. The graph holds both arms: it runs on fake tensors once per way the
    branch goes; errors the same both ways are the graph's, errors that differ give the branch up (before, the
    backward ran with the gradient of the program as written, both ways)."""
    jitted = thunder.jit(f)
    w0 = torch.randn(4, 5)
    for sign in (1, -1):
        x = sign * torch.rand(3, 4)

        def grad_of(fn):
            w = w0.clone().requires_grad_()
            fn(x, w).sum().backward()
            return w.grad
        assert_same_outcome(outcome(lambda: grad_of(jitted), "modified by an inplace operation"),
                            outcome(lambda: grad_of(f), "modified by an inplace operation"))
    (site,) = thunder.compile_stats(jitted).branches
    assert site.converted == (f is _a_write_after_the_branch_into_a_saved_value)
    assert site.converted or "saved for its backward" in site.reason


def _unused_output_reaches_w_whichever_way(x, w, v):
    a = w * v  # returned, unused by the loss: the graph reaches w and v whichever way
    if x.sum() > 0:
        r = x * v
    else:
        r = x * a
    if x[0] > 0.5:
        q = r * 2
    else:
        q = r * w
    return q, a


def test_an_input_the_used_output_reaches_only_through_untaken_arms_gets_none():
    """Only `q`'s gradient is given: where the arms taken do not read w, eager's w.grad stays None (the select's
    backward would give zeros, and Adam would move w). The trace returns the conditions, and the backward reaches
    the inputs the way taken leads to (fx_import.WayReaches); given both outputs' gradients, every input."""
    f, jitted = _unused_output_reaches_w_whichever_way, thunder.jit(_unused_output_reaches_w_whichever_way)
    v0, w0 = torch.randn(3), torch.randn(3)
    for x in (torch.tensor([0.9, 0.1, 0.2]), torch.tensor([0.1, 0.1, 0.2]), -torch.rand(3),
              torch.tensor([-0.9, 0.1, 0.2])):
        for both in (False, True):
            results = []
            for fn in (f, jitted):
                w, v = w0.clone().requires_grad_(), v0.clone().requires_grad_()
                q, a = fn(x, w, v)
                (q.sum() + a.sum() if both else q.sum()).backward()
                results.append((q, a, w.grad, v.grad))
            for expected, actual in zip(*results):
                torch.testing.assert_close(actual, expected)
    assert all(site.converted for site in thunder.compile_stats(jitted).branches)


def test_an_input_an_arm_writes_into_a_tensor_read_after_the_branch_keeps_grad_none_when_not_taken():
    """`v.add_(b)` in an arm, `v` read after the branch (no select: the arm left `v` the same object): the
    reach of the graph's outputs counted the write whichever way, so b seemed reached for certain and the branch
    was converted; when not taken, eager's b.grad is None, thunder's was zeros (grad repro_01). A write in an arm
    now counts only where that arm runs."""
    def f(a, b, d):
        v = a * 2
        if d.sum() > 0:
            v.add_(b)
        return v * 1

    jitted = thunder.jit(f)
    for d in (-torch.ones(3), torch.ones(3)):
        grads = []
        for fn in (f, jitted):
            a, b = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
            fn(a, b, d).sum().backward()
            grads.append((a.grad, b.grad))
        for expected, actual in zip(*grads):
            assert (actual is None) == (expected is None)
            if expected is not None:
                torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("no_grad", [False, True])
def test_requires_grad_called_in_an_arm_gives_the_branch_up(no_grad):
    """`v.requires_grad_()` in one arm: eager's `v` requires grad only where that arm ran; a select's requires
    grad by both arms (under no_grad, by neither: grad repro_02 returned a tensor that did not)."""
    def f(a):
        with torch.no_grad() if no_grad else contextlib.nullcontext():
            if a.sum() > 0:
                v = a * 2
                v.requires_grad_()
            else:
                v = a * 3
        return v

    jitted = thunder.jit(f)
    for sign in (1, -1):
        a = sign * torch.ones(3)
        expected, actual = f(a), jitted(a)
        assert actual.requires_grad == expected.requires_grad
        torch.testing.assert_close(actual.detach(), expected.detach())
    (site,) = thunder.compile_stats(jitted).branches
    assert not site.converted and (not no_grad or "requires_grad_()" in site.reason), site.reason


def test_a_write_after_nested_branches_reaches_the_input_an_inner_arm_left():
    """`t1` is the input itself where the inner arm not rebinding it is taken; eager's `t1.mul_(2)` then writes the
    caller's tensor. The outer select's arms are a new tensor and the inner select, whose arm is the input: the check
    for writes through a select looked at the outer one's operands only, so thunder returned the input unwritten."""
    def g(a, b, t1):
        if a.sum() == 0:
            t1 = a * a
        else:
            if a.sum() > -1:
                a = t1.sum(0, keepdim=True) + t1
            else:
                t1 = b - b.mean(dim=1, keepdim=True)
        t1.mul_(2)
        return t1, a

    for a in (torch.ones(4, 5), torch.zeros(4, 5), -torch.ones(4, 5) * 3):
        results = []
        for fn in (g, thunder.jit(g)):
            t = torch.full((4, 5), 1.5)
            out, a_out = fn(a.clone(), -torch.ones(4, 5), t)
            results.append((out, a_out, t, out is t))
        (e_out, e_a, e_t, e_is), (t_out, t_a, t_t, t_is) = results
        torch.testing.assert_close(t_out, e_out)
        torch.testing.assert_close(t_a, e_a)
        torch.testing.assert_close(t_t, e_t)  # the caller's tensor, written where eager wrote it
        assert t_is == e_is


@pytest.mark.parametrize("case", ["overwritten_slice", "overwritten_whole"])
def test_a_value_overwritten_in_the_taken_arm_gets_eagers_gradient(case):
    """A write overwritten in the arm taken still takes part in autograd, as in eager and as outside an arm: its
    value's backward, given zero, gives w[0] 0 / 0 = NaN at w[0] = 0 (thunder gave 0: the overwritten write was dead
    inside an arm)."""
    def f(x, w):
        y = x * w if case == "overwritten_slice" else (x * w).clone()
        if x.sum() > 0:
            if case == "overwritten_slice":
                y[0] = torch.log(w[0])
                y[0] = 2.0
            else:
                y.copy_(1 / w)
                y.fill_(3.0)
        return (y * x).sum()

    for sign in (1.0, -1.0):
        x = sign * torch.tensor([1.0, 2.0, 3.0])
        grads = []
        for fn in (f, thunder.jit(f)):
            w = torch.tensor([0.0, -1.0, 2.0], requires_grad=True)
            fn(x, w).backward()
            grads.append(w.grad)
        torch.testing.assert_close(grads[1], grads[0], equal_nan=True)
        assert grads[0].isnan().any() == (sign > 0)


def test_an_infinite_operand_of_the_arm_not_taken_leaves_no_nan_in_gradients():
    """x * w in the arm not taken, at x = -inf: its backward, given zero, gave w 0 * -inf = NaN (the arm was left
    unmasked, add/mul/sub having finite derivatives); every arm masks now, and the trained loop stays one kernel."""
    def f(x, w):
        if x.max() > 0:
            y = x * w
        else:
            y = x - w
        return y

    for x in (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-float("inf"), -1.0, -2.0])):
        check_grads(f, x, torch.ones(3, requires_grad=True))

    jitted = thunder.jit(some_computation)
    x, y = torch.randn(5, requires_grad=True), torch.tensor(0.0, requires_grad=True)
    jitted(x, y).backward()
    code = [line for line in str(thunder.last_traces(jitted)[-1]).splitlines() if not line.strip().startswith("#")]
    assert sum("= cpu_fusion" in line for line in code) == 1 and not any("detach" in line for line in code), code


def test_a_masked_write_in_an_arm_compiles_its_backward_kernel():
    """The else-arm's write y[2] = x[0], masked, made a backward kernel whose slice of a value read at no loop
    index was written at the loop's top with an enclosing block's index name (i0_r1: not declared there): g++
    failed and the graph ran uncompiled."""
    def f(x):
        y = x * 1.0
        if x[0] > 0:
            y = y * 2
        else:
            y[2] = x[0]
        return y.sum()

    jitted = thunder.jit(f)
    for first in (1.0, -2.0):
        x = torch.tensor([first, -2.0, 3.0, 0.5], requires_grad=True)
        xe = x.detach().clone().requires_grad_(True)
        assert_same(jitted(x), f(xe))
        jitted(x).backward()
        f(xe).backward()
        assert_same(x.grad, xe.grad)
    assert "UNCOMPILED" not in str(jitted), str(jitted)


# ---- soundness rules: not converted, stays correct ----

def _stays_correct(f, *args, reason):
    jitted = thunder.jit(f)
    for _ in range(3):
        a = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        b = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        torch.testing.assert_close(jitted(*a), f(*b))
        for x, y in zip(a, b):
            if isinstance(x, torch.Tensor):
                torch.testing.assert_close(x, y)
    site = sites(jitted)[0]
    assert not site.converted or site.reason, site
    assert reason in site.reason, site.reason
    return jitted


log = []


def test_side_effects_not_converted(capsys):
    def prints(x):
        if x.sum() > 0:
            print("positive")
            x = x + 1
        return x

    _stays_correct(prints, torch.ones(3), reason="print")

    def appends(x):
        if x.sum() > 0:
            log.append(1)
        return x * 2

    _stays_correct(appends, torch.ones(3), reason="append")

    class M(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                self.seen = True
            return x * 2

    m = M()
    jitted = thunder.jit(m)
    torch.testing.assert_close(jitted(torch.ones(2)), torch.ones(2) * 2)
    assert m.seen is True
    assert "attribute" in sites(jitted)[0].reason


FLAG = None


def test_an_assignment_to_a_global_or_nonlocal_name_is_not_converted():
    """A plain assignment to a name the function declares global or nonlocal was taken for a local rebinding: the
    branch was converted and the write lost."""
    global FLAG

    def sets_a_global(x):
        global FLAG
        if x.sum() > 0:
            FLAG = "positive"
            x = x * 2
        return x

    FLAG = None
    _stays_correct(sets_a_global, torch.ones(3), reason="declared global or nonlocal")
    assert FLAG == "positive"

    flag = None

    def sets_a_nonlocal(x):
        nonlocal flag
        if x.sum() > 0:
            flag = "positive"
            x = x * 2
        return x

    _stays_correct(sets_a_nonlocal, torch.ones(3), reason="declared global or nonlocal")
    assert flag == "positive"


class _PrivateScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.__scale = 3.0

    def forward(self, x):
        if x.sum() > 0:
            y = x * self.__scale
        else:
            y = x - self.__scale
        return y


def test_a_converted_method_reads_its_private_names_mangled():
    """self.__scale is self._PrivateScale__scale in the class body; the rewrite, compiled outside it, raised
    AttributeError."""
    model = _PrivateScale()
    jitted = thunder.jit(model)
    for x in (torch.rand(3), -torch.rand(3)):
        torch.testing.assert_close(jitted(x), model(x))
    assert sites(jitted)[0].converted and not thunder.compile_stats(jitted).graph_breaks


def helper(x):
    return x + 1


def test_control_flow_and_unknown_calls_not_converted():
    def returns_early(x):
        if x.sum() > 0:
            return x
        x = x + 1
        return -x

    _stays_correct(returns_early, torch.ones(3), reason="return")

    def loops(x):
        for i in range(3):
            if x[i] > 0:
                break
            x = x + 1
        return x

    jitted = thunder.jit(loops)
    x = torch.tensor([-1.0, 2.0, 3.0])
    torch.testing.assert_close(jitted(x), loops(x))
    assert "break" in sites(jitted)[0].reason

    def calls(x):
        if x.sum() > 0:
            x = helper(x)
        return x

    _stays_correct(calls, torch.ones(3), reason="not known to be pure")

    def one_sided(x):
        if x.sum() > 0:
            z = x + 1
        if x.sum() > 0:
            x = z
        return x

    _stays_correct(one_sided, torch.ones(3), reason="only one branch")

    def raises(x):
        if x.sum() > 100:
            raise ValueError("too big")
        return x

    _stays_correct(raises, torch.ones(3), reason="raise")

    def writes_file(x, path):
        if x.sum() > 0:
            open(path, "w").write("seen")
        return x * 2

    _stays_correct(writes_file, torch.ones(3), "/dev/null", reason="not known to be pure")


def test_data_dependent_while_stays_a_graph_break():
    def f(x):
        while x.norm() > 1:
            x = x / 2
        return x

    jitted = thunder.jit(f)
    x = torch.randn(5) * 10
    torch.testing.assert_close(jitted(x), f(x))


def test_branch_results_differ_in_shape_or_kind():
    def shapes(x):
        if x.sum() > 0:
            y = x[:2]
        else:
            y = x
        return y

    jitted = thunder.jit(shapes)
    for sign in (1.0, -1.0, 1.0):
        x = torch.ones(4) * sign
        torch.testing.assert_close(jitted(x), shapes(x))
    assert "different shapes" in sites(jitted)[0].reason

    def dtypes(x):
        if x.sum() > 0:
            y = x.double()
        else:
            y = x
        return y

    jitted = thunder.jit(dtypes)
    for sign in (1.0, -1.0):
        x = torch.ones(4) * sign
        out = jitted(x)
        assert out.dtype == dtypes(x).dtype
        torch.testing.assert_close(out, dtypes(x))
    assert "dtypes" in sites(jitted)[0].reason


def test_branch_results_differ_in_strides():
    """Arms leaving a name with different strides (x.t() against x * 1): code after the branch that reads the layout
    saw the traced arm's whichever was taken (is_contiguous(), stride()), and a y.view(-1) after it failed in
    Dynamo's trace of the select, leaving the function uncompiled for good. Such a branch is not converted."""
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x * 1
        return y.view(-1) if y.is_contiguous() else y.reshape(-1) + 1, y.stride()

    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, -1.0, 1.0):
        x = (torch.arange(9.0).view(3, 3) + 1) * sign
        out, expected = jitted(x), f(x)
        torch.testing.assert_close(out[0], expected[0])
        assert out[1] == expected[1]
    assert "different strides" in sites(jitted)[0].reason
    assert thunder.compile_stats(jitted).graphs


def test_a_failed_trace_after_a_converted_branch_gives_it_up(monkeypatch):
    """Dynamo's trace of the code after a converted branch fails where the select differs from the arm eager takes
    in what that code reads (here the strides, with _merge's check of them taken out): the failure was raised as
    the function's own, it ran eagerly, and every later call failed the same way (never compiled). The branches
    the trace went through are given up, and the next call compiles."""
    merge = branches._merge

    def without_stride_check(cond, a, b, site, name):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype:
            return branches._branch_select(cond, a, b)
        return merge(cond, a, b, site, name)

    monkeypatch.setattr(branches, "_merge", without_stride_check)

    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x * 1
        return y.view(-1)

    jitted = thunder.jit(f)
    for _ in range(3):
        x = -(torch.arange(9.0).view(3, 3) + 1)
        torch.testing.assert_close(jitted(x), f(x))
    assert "the code after it failed" in sites(jitted)[0].reason
    assert thunder.compile_stats(jitted).graphs


def test_an_arm_updating_batch_norm_statistics_is_not_converted():
    """A BatchNorm in train mode in one arm: both arms run, and its running statistics were updated on every call
    (native_batch_norm writes them without its schema saying so). Such a branch is not converted; the statistics
    are eager's."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x):
            if x.sum() > 0:
                h = self.bn(x)
            else:
                h = x * 2
            return h

    torch.manual_seed(0)
    eager = M().requires_grad_(False)
    mine = copy.deepcopy(eager)
    jitted = thunder.jit(mine)
    for shift in (-3.0, 3.0, -3.0, -3.0):
        x = torch.randn(8, 4) + shift
        torch.testing.assert_close(jitted(x), eager(x))
        for name, value in eager.state_dict().items():
            torch.testing.assert_close(mine.state_dict()[name], value, msg=name)
    assert "running statistics" in sites(jitted)[0].reason


def test_an_arm_calling_a_module_with_forward_hooks_is_not_converted():
    """A hook on a module an arm calls ran for both arms (Dynamo inlines it and replays its effects after the
    graph): a hook recording activations recorded the arm not taken, twice per call."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            if x.mean() > 0:
                h = self.lin(x)
            else:
                h = self.lin(x * 3)
            return h

    torch.manual_seed(0)
    eager = M()
    mine = copy.deepcopy(eager)
    seen = {"eager": [], "mine": []}
    eager.lin.register_forward_hook(lambda m, i, o: seen["eager"].append(o.detach().clone()))
    mine.lin.register_forward_hook(lambda m, i, o: seen["mine"].append(o.detach().clone()))
    jitted = thunder.jit(mine)
    for sign in (1.0, -1.0, 1.0):
        x = (torch.rand(3, 4) + 0.1) * sign
        torch.testing.assert_close(jitted(x), eager(x))
    assert len(seen["mine"]) == len(seen["eager"]) == 3
    for a, b in zip(seen["mine"], seen["eager"]):
        torch.testing.assert_close(a, b)
    assert sites(jitted) and "forward hooks" in sites(jitted)[0].reason

    # A hook registered after thunder.jit (the function is rewritten then), before the first call: seen when traced.
    later = copy.deepcopy(eager)
    jitted = thunder.jit(later)
    later.lin.register_forward_hook(lambda m, i, o: seen["later"].append(o.detach().clone()))
    seen["later"] = []
    for sign in (1.0, -1.0, 1.0):
        x = (torch.rand(3, 4) + 0.1) * sign
        torch.testing.assert_close(jitted(x), eager(x))
    assert len(seen["later"]) == 3
    assert "forward hooks" in sites(jitted)[0].reason


def _setitem_local(x):
    d = {"a": x}
    if x.sum() > 0:
        d["a"] = x * 2
    return d["a"]


def _setitem_argument(x, out):
    if x.sum() > 0:
        out["y"] = x * 2
    else:
        out["y"] = x * 3
    return x + 1


def _extends_a_list(x):
    parts = [x]
    if x.sum() > 0:
        parts += [x * 2]
    return sum(parts)


def _counts_in_a_list(x):
    count = [0]
    if x.sum() > 0:
        count[0] += 1
    return x * (count[0] + 1)


_GLOBAL_DICT = {}


def _writes_a_global_dict(x):
    if x.sum() > 0:
        _GLOBAL_DICT["y"] = x
    return x * 2


def _setitem_by_dunder(x, out):
    if x.sum() > 0:
        out.__setitem__("y", x * 2)  # Tensor has __setitem__ too: the call's receiver is not known to be a tensor
    return x + 1


def _setitem_by_operator(x, out):
    if x.sum() > 0:
        operator.setitem(out, "y", x * 2)
    return x + 1


def _setitem_as_a_loop_target(x, out):
    if x.sum() > 0:
        for out["y"] in [x * 2]:
            pass
    return x + 1


def _setitem_as_a_comprehension_target(x, out):
    if x.sum() > 0:
        y = [v for out["y"] in [x * 2] for v in [out["y"]]][0]
    else:
        y = x
    return y + 1


_WRITERS_BY_OTHER_ROUTES = [_setitem_by_dunder, _setitem_by_operator, _setitem_as_a_loop_target,
                            _setitem_as_a_comprehension_target]


@pytest.mark.parametrize("f", [_setitem_local, _setitem_argument, _extends_a_list, _counts_in_a_list,
                               _writes_a_global_dict] + _WRITERS_BY_OTHER_ROUTES)
def test_an_arm_writing_into_a_python_container_is_not_converted(f):
    """Converted, both arms run: a write into a dict or a list (`d[k] = v`, `lst += [...]`) would be made whichever
    arm the predicate takes, where a tensor's would be selected. _thunder_if refuses the conversion where the
    object written into is not a tensor, with the reason; every call equals eager, containers included."""
    jitted = thunder.jit(f)
    for x in (torch.tensor([1.0, 2.0]), torch.tensor([-1.0, -2.0]), torch.tensor([3.0, -1.0])):
        _GLOBAL_DICT.clear()
        mine, theirs = {}, {}
        takes_dict = f is _setitem_argument or f in _WRITERS_BY_OTHER_ROUTES
        out = jitted(x, mine) if takes_dict else jitted(x)
        seen = dict(_GLOBAL_DICT)
        _GLOBAL_DICT.clear()
        expected = f(x, theirs) if takes_dict else f(x)
        torch.testing.assert_close(out, expected)
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
        assert seen.keys() == _GLOBAL_DICT.keys()
    assert not converted(jitted) and sites(jitted)[0].reason
    if f not in _WRITERS_BY_OTHER_ROUTES:
        assert "not a tensor" in sites(jitted)[0].reason


def test_a_container_written_in_an_arm_that_may_be_unbound_before_is_not_converted():
    def f(x, n):
        for i in range(n):
            parts = [x]
        if x.sum() > 0:
            parts[0] = x * 2
        return parts[0]

    jitted = thunder.jit(f)
    x = torch.tensor([-1.0, 2.0])
    torch.testing.assert_close(jitted(x, 1), f(x, 1))
    assert "may not be bound" in sites(jitted)[0].reason


def test_untaken_arm_that_would_raise():
    def shape_error(x, w):
        if x.sum() > 100:
            y = x @ w  # shapes do not match: eager raises only if taken
        else:
            y = x * 2
        return y

    jitted = thunder.jit(shape_error)
    for _ in range(3):
        x, w = torch.randn(3), torch.randn(7, 2)
        torch.testing.assert_close(jitted(x, w), shape_error(x, w))
    assert sites(jitted)[0].reason

    def index_error(x, idx):
        if x.sum() > 100:
            y = x[idx]  # idx out of range: eager raises only if taken
        else:
            y = x[:2]
        return y

    jitted = thunder.jit(index_error)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x, torch.tensor([5, 6])), index_error(x, torch.tensor([5, 6])))
    assert sites(jitted)[0].reason


@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss", "binary_cross_entropy", "inv", "cholesky", "one_hot",
                                "matrix_power", "svd", "nuclear_norm", "norm_nuc", "histc"])
def test_an_arm_with_an_op_that_checks_its_values_is_not_converted(op):
    """An out-of-range target, a probability outside [0, 1], a singular matrix, an SVD of NaN: these ops raise, so
    in the arm not taken they would raise where eager returns the other arm's value. Such an arm is not converted."""
    def f(x, t, m):
        if x.sum() > 100:
            if op == "cross_entropy":
                y = torch.nn.functional.cross_entropy(x.reshape(1, 3), t)
            elif op == "nll_loss":
                y = torch.nn.functional.nll_loss(x.reshape(1, 3), t)
            elif op == "binary_cross_entropy":
                y = torch.nn.functional.binary_cross_entropy(x.sigmoid(), x * 5)
            elif op == "inv":
                y = torch.linalg.inv(m).sum()
            elif op == "cholesky":
                y = torch.linalg.cholesky(m).sum()
            elif op == "matrix_power":
                y = torch.matrix_power(m, -1).sum()
            elif op == "svd":
                y = torch.svd(m / m.sum()).S.sum()  # 0 / 0: an SVD of NaN does not converge
            elif op == "nuclear_norm":
                y = torch.linalg.matrix_norm(m / m.sum(), "nuc") + torch.nuclear_norm(m / m.sum())
            elif op == "norm_nuc":
                y = (m / m.sum()).norm(p="nuc")
            elif op == "histc":
                y = torch.histc(x / (x * 0), bins=3).sum()
            else:
                y = torch.nn.functional.one_hot(t, 2).sum().to(x.dtype)
        else:
            y = x.sum() * 0
        return y

    jitted = thunder.jit(f)
    x, t, m = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([7]), torch.zeros(2, 2)
    for _ in range(2):
        torch.testing.assert_close(jitted(x, t, m), f(x, t, m))
    assert "checks its arguments' values" in next(s for s in sites(jitted) if "x.sum()" in s.code).reason


def test_an_integer_division_by_a_tensor_in_an_arm_is_not_converted():
    # Both arms run: 100 // x[0] raises on a zero divisor even where the arm is not taken (eager guards it).
    def guarded(x):
        if x[0] != 0:
            y = 100 // x[0]
        else:
            y = x[0] * 0
        return y

    def by_a_number(x):  # x // 2 cannot raise: converted
        if x[0] > 0:
            y = x // 2
        else:
            y = x % 3
        return y

    jitted = thunder.jit(guarded)
    for x in (torch.tensor([0]), torch.tensor([7]), torch.tensor([0], dtype=torch.int32)):
        torch.testing.assert_close(jitted(x), guarded(x))
    assert "divides integers by a tensor" in sites(jitted)[0].reason
    jitted = thunder.jit(by_a_number)
    for x in (torch.tensor([5, -4]), torch.tensor([-5, 4])):
        torch.testing.assert_close(jitted(x), by_a_number(x))
    assert sites(jitted)[0].converted and not sites(jitted)[0].reason


def test_an_and_or_predicate_is_left_as_python_with_its_reason():
    def f(x):
        y = x.sum() * 0
        for i in range(x.size(0)):
            if x[i] > 0 and x[i] < 1:
                y = y + x[i]
            else:
                y = y - x[i]
        return y

    jitted = thunder.jit(f)
    x = torch.tensor([0.5, -1.0, 2.0])
    torch.testing.assert_close(jitted(x), f(x))
    site = sites(jitted)[0]
    assert not site.converted and "`and`/`or`" in site.reason


def test_split_by_graph_break_runs_eagerly_and_is_given_up():
    def f(x):
        if x.sum() > 0:
            y = x * x.sum().item()  # .item() is a graph break inside the branch
        else:
            y = x
        return y

    jitted = thunder.jit(f)
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x), f(x))
    assert sites(jitted)[0].reason


def test_torch_cond_is_compiled():
    def f(x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))

    jitted = thunder.jit(f)
    for _ in range(10):
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x), f(x))
    assert len(jitted._thunder_state.graphs) == 1
    assert all(not isinstance(g, thunder.frontend.dynamo.EagerGraph) for g in jitted._thunder_state.graphs), thunder.summary(jitted)


def test_user_function_untouched():
    code = some_computation.__code__
    thunder.jit(some_computation)(torch.randn(3), torch.tensor(0.0))
    assert some_computation.__code__ is code
    x = torch.randn(3)
    assert isinstance(some_computation(x, torch.tensor(0.0)), torch.Tensor)


def test_rewrite_keeps_closures_and_defaults():
    scale = 3.0

    def f(x, bias=1.0):
        if x.sum() > 0:
            x = x * scale + bias
        return x

    r = branches.rewrite(f, {})
    assert r.converted == 1
    x = torch.ones(2)
    torch.testing.assert_close(r.fn(x), f(x))


def test_inputs_aliasing_a_written_input_run_as_eager():
    def f(a, b):
        a.add_(1)
        return b * 2

    jitted = thunder.jit(f)
    base = torch.zeros(4)
    base_e = torch.zeros(4)
    out = jitted(base, base[:2])  # b is a view of a
    expected = f(base_e, base_e[:2])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(base, base_e)


def test_write_through_a_name_one_branch_aliases():
    def f(x):
        if x.sum() > 0:
            z = x
        else:
            z = torch.zeros_like(x)
        z[0] = 5
        return z * 1

    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, 1.0, -1.0):
        a = torch.ones(3) * sign
        b = a.clone()
        torch.testing.assert_close(jitted(a), f(b))
        torch.testing.assert_close(a, b)
    assert "aliasing" in sites(jitted)[0].reason



def _inplace_aug(a, b):
    if b.sum() > 0:
        a -= 1
    return a * 2


def _inplace_method(a, b):
    if b.sum() > 0:
        a = a.add_(1)
    return a * 2


def _inplace_function(a, b):
    if b.sum() > 0:
        a = torch.relu_(a)
    return a * 2


def _inplace_out(a, b):
    if b.sum() > 0:
        a = torch.add(a, b.sum(), out=a)
    return a * 2


def _inplace_keyword(a, b):
    if b.sum() > 0:
        a = torch.nn.functional.relu(a, inplace=True)
    return a * 2


@pytest.mark.parametrize("f", [_inplace_aug, _inplace_method, _inplace_function, _inplace_out, _inplace_keyword])
def test_aliased_call_reads_an_inplace_result_of_the_arm_not_taken(f):
    """An in-place op in one arm leaves the name on its tensor (no select); a call whose inputs alias runs one arm
    (branches.run_exactly), and code after the branch reads the tensor as it is, written or not. The bookkeeping of
    that run does not give the branch up."""
    for sign in (-1.0, 1.0):  # first call: the arm not taken, then taken
        torch._dynamo.reset()
        jitted = thunder.jit(f)
        for _ in range(2):
            base, e_base = torch.full((4,), sign), torch.full((4,), sign)
            torch.testing.assert_close(jitted(base, base[1:3]), f(e_base, e_base[1:3]))
            torch.testing.assert_close(base, e_base)
        stats = thunder.compile_stats(jitted)
        assert stats.branches_converted == 1 and not stats.graph_breaks, thunder.summary(jitted)
        assert thunder.compiled_graphs(jitted)[0].aliased_calls == 2


def test_names_an_arm_reads_before_binding_are_passed_in():
    """An arm that reads a name before binding it (`buf += x`, `y = y + 1`) gets it as a parameter, whether or not
    code after the `if` reads it."""
    def augmented(buf, x):
        if x.sum() > 0:
            buf += x
        return x * 2

    def read_then_assign(x):
        y = x + 1
        if x.sum() > 0:
            y = y * 2
            x[0] = y[0]
        return x

    def nested(buf, x):
        if x.sum() > 0:
            if x[0] > 0:
                buf += x
        return x * 2

    for f, n in ((augmented, 2), (read_then_assign, 1), (nested, 2)):
        jitted = thunder.jit(f)
        for sign in (1.0, -1.0, 1.0):
            args = [torch.full((3,), sign) for _ in range(n)]
            e_args = [a.clone() for a in args]
            torch.testing.assert_close(jitted(*args), f(*e_args))
            for a, e in zip(args, e_args):
                torch.testing.assert_close(a, e)
        assert all(s.converted and not s.reason for s in sites(jitted)), [str(s) for s in sites(jitted)]


def test_a_name_read_before_binding_and_maybe_unbound_is_not_converted():
    def f(x, flag: bool):
        if flag:
            buf = x * 0
        if x.sum() > 0:
            buf += x
        return x * 2

    jitted = thunder.jit(f)
    torch.testing.assert_close(jitted(torch.ones(3), True), f(torch.ones(3), True))
    site = [s for s in sites(jitted) if "x.sum()" in s.code][0]
    assert not site.converted and "read before it is assigned" in site.reason


def test_augmented_assignment_after_the_if_reads_the_selected_name():
    """`y += 1` after the `if` reads y: the arms return it (otherwise the write would go to y's tensor before the
    `if`, the input, also when the arm that rebinds y was taken)."""
    def f(x):
        y = x
        if x.sum() > 0:
            y = x * 2
        y += 1
        return x * 1

    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, 1.0, -1.0):
        a, b = torch.full((3,), sign), torch.full((3,), sign)
        torch.testing.assert_close(jitted(a), f(b))
        torch.testing.assert_close(a, b)


# ---- `if` statements whose arms both end with `return`, at the end of the function ----

def _returns_if_else(x, y):
    if x.sum() > 0:
        z = x.sqrt() * y
        return z + 1
    else:
        return -x * y


def _returns_then_final_return(x, y):
    z = x * y
    if x.sum() > 0:
        return z.log()
    return z * 2


def _returns_elif_chain(x, y):
    if x.sum() > 1:
        return x.sqrt()
    elif x[0] > 0:
        return (x * y).log()
    return y - x


def _returns_nested(x, y):
    if x.sum() > 0:
        if y.sum() > 0:
            return x / y
        return x * y
    else:
        return -x


def _returns_tuple(x, y):
    if x.sum() > 0:
        return x.sqrt(), y
    return -x, y * 2


class _ReturnsModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        if h.sum() > 0:
            return h.relu()
        return h.tanh()


@pytest.mark.parametrize("f", [_returns_if_else, _returns_then_final_return, _returns_elif_chain, _returns_nested,
                               _returns_tuple])
def test_returns_in_both_arms_at_the_end_are_converted(f):
    """The return values are selected like the names the arms bind: values and gradients as eager's (the arm not
    taken contributes no NaN: sqrt, log and division of negative or zero values), one graph, no graph break. Where
    an arm does not read y, eager leaves y's .grad None when that arm is taken: in training such a branch is given
    up (see test_arms_differentiating_different_parameters_are_not_converted_in_training); without grad it is
    converted."""
    jitted = thunder.jit(f)
    for xs, ys in (([1.0, 2.0, 3.0], [1.0, 0.5, 2.0]), ([-1.0, -2.0, 0.5], [0.0, 1.0, -1.0]),
                   ([0.5, -2.0, 1.0], [2.0, -1.0, 1.0]), ([-0.5, 0.1, 0.2], [2.0, 1.0, 1.0])):
        a = [torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=True)]
        b = [t.detach().clone().requires_grad_() for t in a]
        out, expected = jitted(*a), f(*b)
        torch.testing.assert_close(out, expected)
        total = sum(o.sum() for o in out) if isinstance(out, tuple) else out.sum()
        e_total = sum(o.sum() for o in expected) if isinstance(expected, tuple) else expected.sum()
        total.backward()
        e_total.backward()
        for t, e in zip(a, b):
            assert (t.grad is None) == (e.grad is None)
            if e.grad is not None:
                torch.testing.assert_close(t.grad, e.grad, equal_nan=True)
    if f in (_returns_elif_chain, _returns_nested):
        assert any("only through one arm" in (s.reason or "") for s in sites(jitted))
        jitted = thunder.jit(f)
        with torch.no_grad():
            torch.testing.assert_close(jitted(torch.tensor([1.0, 2.0, 3.0]), torch.ones(3)),
                                       f(torch.tensor([1.0, 2.0, 3.0]), torch.ones(3)))
    stats = thunder.compile_stats(jitted)
    assert stats.branches_converted == len(sites(jitted)) >= 1 and stats.branches_left == 0, thunder.summary(jitted)
    assert not stats.graph_breaks and len(stats.graphs) == 1, thunder.summary(jitted)
    assert "converted to a select" in thunder.summary(jitted)


def test_returns_in_a_module_forward_and_with_writes():
    m, ref = _ReturnsModule(), _ReturnsModule()
    ref.load_state_dict(m.state_dict())
    jitted = thunder.jit(m)
    for sign in (1.0, -1.0, 1.0):
        x = torch.full((2, 3), sign)
        torch.testing.assert_close(jitted(x), ref(x))
    assert thunder.compile_stats(jitted).branches_converted == 1

    def writes(x, y):
        if x.sum() > 0:
            y.add_(1)
            return x * y
        else:
            y.mul_(2)
            return x - y

    jitted = thunder.jit(writes)
    for sign in (1.0, -1.0, 1.0):
        a, b = [torch.full((3,), sign), torch.ones(3)], [torch.full((3,), sign), torch.ones(3)]
        torch.testing.assert_close(jitted(*a), writes(*b))
        torch.testing.assert_close(a, b)
    stats = thunder.compile_stats(jitted)
    assert stats.branches_converted == 1 and not stats.graph_breaks, thunder.summary(jitted)


def _keeps_or_scales(x, y):
    for i in range(x.size(0)):  # nested selects: y stays the input itself where no x[i] is positive
        if x[i] > 0:
            y = y * x[i]
    return y, x * 2


def _returns_inputs_swapped(x, y):
    if x.sum() > 0:
        return y, x
    return x, y


def _returns_input_or_new(x):
    if x.sum() > 0:
        return x
    return x + 1


def _returns_input_as_float(x, y):
    if x.sum() > 0:
        y = x.float()  # x itself for a float32 x
    else:
        y = x * 2
    return y


@pytest.mark.parametrize("f", [_keeps_or_scales, _returns_inputs_swapped, _returns_input_or_new,
                               _returns_input_as_float])
def test_a_selected_output_is_the_input_itself_where_eager_returns_it(f):
    """A converted branch whose arm leaves a name (or the return value) an input itself: eager returns that input,
    the same tensor (a later write to the result reaches the caller's), and the select was a new tensor. The trace
    returns the branch conditions too and the output is the input where they lead to it -- values, identities and
    gradients as eager's, one graph, the branch converted."""
    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, 1.0, -1.0):
        a = [torch.tensor([sign, 2 * sign, 3 * sign], requires_grad=True), torch.ones(3, requires_grad=True)]
        b = [t.detach().clone().requires_grad_() for t in a]
        args = a[:f.__code__.co_argcount]
        out, expected = jitted(*args), f(*b[:len(args)])
        out, expected = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
        torch.testing.assert_close(out, expected)
        assert [[o is t for t in a] for o in out] == [[e is t for t in b] for e in expected], sign
        sum(o.sum() for o in out).backward()
        sum(e.sum() for e in expected).backward()
        for t, e in zip(args, b):
            torch.testing.assert_close(t.grad, e.grad)
    stats = thunder.compile_stats(jitted)
    assert stats.branches_converted >= 1 and stats.branches_left == 0 and len(stats.graphs) == 1, thunder.summary(jitted)


def _leaves_a_view(x):
    if x.sum() > 0:
        y = x.view(3)
    else:
        y = x * 2
    return y


def _returns_a_view_of_the_selected(x):
    if x.sum() > 0:
        y = x
    else:
        y = x * 2
    return y[1:]


def _returns_two_views_of_the_selected(x):
    if x.sum() > 0:
        y = x
    else:
        y = x * 2
    return y[1:], y[:2]  # one group of output views, made again from the select's value (OutputViews)


@pytest.mark.parametrize("f", [_leaves_a_view, _returns_a_view_of_the_selected, _returns_two_views_of_the_selected])
def test_a_selected_view_of_an_input_is_a_view_of_it(f):
    """An arm leaving a view of an input, or a returned view of a name an arm leaves on an input: eager's result
    is a view of the input, made again at run time from it where the conditions lead there (SelectedInput's
    "view" and "over" choices): a write through the result reaches the input exactly when eager's does."""
    jitted = thunder.jit(f)
    for sign in (1.0, -1.0, 1.0):
        results = []
        for run in (f, jitted):
            x = torch.full((3,), sign)
            outs = run(x)
            outs = outs if isinstance(outs, tuple) else (outs,)
            outs[0][0] = 100.0
            results.append((x.tolist(), [o.tolist() for o in outs],
                            [o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for o in outs]))
        assert results[0] == results[1], (sign, results)
    stats = thunder.compile_stats(jitted)
    assert stats.branches_converted == 1 and len(stats.graphs) == 1, thunder.summary(jitted)


def test_a_selected_input_follows_the_condition_as_it_was_when_the_branch_began():
    """The condition a graph returns to pick a selected input is a copy made where the branch begins: a condition
    written after the branch (an `initialized` flag set on the first call) picked the other arm's result."""
    def f(x, flag):
        if flag:
            y = x
        else:
            y = x * 2
        flag.logical_not_()
        return y

    jitted = thunder.jit(f)
    for value in (False, True, False):
        x, flag = torch.ones(3), torch.tensor(value)
        out = jitted(x, flag)
        assert (out is x) == value and out.tolist() == ([1.0] * 3 if value else [2.0] * 3)
        assert flag.item() == (not value)
    assert thunder.compile_stats(jitted).branches_converted == 1


def test_a_condition_dynamo_breaks_in_is_listed_as_left():
    # `.item()` breaks the graph before the branch: the arm runs as Python control flow. The site was neither
    # converted nor left (both counts 0), and the summary did not list it.
    def f(x):
        if x.sum().item() > 0:
            return x + 1
        return x - 1

    jitted = thunder.jit(f)
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(jitted(x), f(x))
    stats = thunder.compile_stats(jitted)
    # The sites compile_stats lists say so too, before anything printed them.
    (site,) = stats.branches
    assert "Dynamo broke the graph in its condition" in site.broke_in_condition and "left as a graph break" in str(site)
    assert stats.branches_converted == 0 and stats.branches_left == 1, thunder.summary(jitted)
    assert "Dynamo broke the graph in its condition" in sites(jitted)[0].broke_in_condition
    assert "left as a graph break: Dynamo broke the graph in its condition" in str(jitted)


def test_returns_not_converted():
    def shapes_differ(x):
        if x.sum() > 0:
            return x[:2]
        return x

    jitted = thunder.jit(shapes_differ)
    for sign in (1.0, -1.0, 1.0):
        x = torch.ones(4) * sign
        torch.testing.assert_close(jitted(x), shapes_differ(x))
    assert "return value with different shapes" in sites(jitted)[0].reason, sites(jitted)[0]
    stats = thunder.compile_stats(jitted)
    assert stats.branches_converted == 0 and stats.branches_left == 1, thunder.summary(jitted)

    def python_values_differ(x):
        if x.sum() > 0:
            return 1
        return 2

    jitted = thunder.jit(python_values_differ)
    for sign in (1.0, -1.0, 1.0):
        assert jitted(torch.ones(4) * sign) == python_values_differ(torch.ones(4) * sign)
    assert "return value as values that are not both tensors" in sites(jitted)[0].reason, sites(jitted)[0]

    def not_at_the_end(x):
        for i in range(2):
            if x[i] > 0:
                return x * i
            else:
                return -x
        return x

    _stays_correct(not_at_the_end, torch.ones(3), reason="return")

    def falls_off_the_end(x):
        if x.sum() > 0:
            return x * 2

    _stays_correct(falls_off_the_end, torch.ones(3), reason="return")

    def return_before_the_end_of_an_arm(x):
        if x.sum() > 0:
            for i in range(2):
                if x[i] > 0:
                    return x
            return -x
        return x * 2

    jitted = _stays_correct(return_before_the_end_of_an_arm, torch.ones(3), reason="return")
    assert all(s.reason for s in sites(jitted))

    def impure_arm(x):
        if x.sum() > 0:
            print("positive")
            return x
        return -x

    _stays_correct(impure_arm, torch.ones(3), reason="print")

    def elif_arm_falls_through(x):
        if x.sum() > 0:
            return x
        elif x[0] > 0:
            x = x + 1
        return -x

    jitted = thunder.jit(elif_arm_falls_through)
    for xs in ([1.0, 1.0, 1.0], [1.0, -5.0, 1.0], [-1.0, -5.0, 1.0]):
        torch.testing.assert_close(jitted(torch.tensor(xs)), elif_arm_falls_through(torch.tensor(xs)))
    outer = [s for s in sites(jitted) if "x.sum()" in s.code][0]
    assert not outer.converted and "return" in outer.reason, outer

    def code_after_an_early_return(x, y):
        if x.sum() > 0:
            return x
        y = y * 2
        return x - y

    _stays_correct(code_after_an_early_return, torch.ones(3), torch.ones(3), reason="return")


def _times10(f):
    import functools

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs) * 10
    return wrapper


def _module_with_decorated_forward(decorator):
    """A module whose class's forward is decorated (as transformers decorates its models' forward)."""
    class DecoratedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.scale = None

        @decorator
        def forward(self, x):
            y = self.lin(x)
            if self.scale is not None:
                y = y * self.scale
            if y.sum() > 0:
                y = y + 1
            return y

    return DecoratedForward()


class _CallableWrapper:
    """A decorator that keeps the function as an attribute, not in a closure cell: its wrapper cannot be remade."""

    def __init__(self, f):
        import functools

        functools.update_wrapper(self, f)
        self.f = f

    def __call__(self, *args, **kwargs):
        return self.f(*args, **kwargs) * 10

    def __get__(self, instance, owner):
        import functools

        return self if instance is None else functools.partial(self, instance)


@pytest.mark.parametrize("decorator", [torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), _times10,
                                       _CallableWrapper], ids=["no_grad", "autocast", "wraps", "callable_object"])
def test_a_decorated_function_keeps_its_wrapper_and_its_branches_are_converted(decorator):
    """A decorated function's source is its inner function's (inspect follows __wrapped__): rewriting it in the
    wrapper's place dropped the wrapper -- grad mode, autocast, a result's conversion, the wrapper's defaults
    (transformers' decorated forwards then raised "missing required positional arguments"). The inner function is
    rewritten and the wrapper remade around it; a wrapper that does not hold it in a closure cell stays as it is,
    its branches Python."""
    torch.manual_seed(0)
    model = _module_with_decorated_forward(decorator)
    jitted = thunder.jit(model)
    for sign in (1, -1):
        with torch.no_grad():
            model.lin.bias.fill_(sign * 5.0)
        x = torch.randn(3, 4)
        expected = model(x)
        actual = jitted(x)
        assert actual.dtype == expected.dtype and actual.requires_grad == expected.requires_grad
        torch.testing.assert_close(actual, expected)

    @decorator
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    jitted_f = thunder.jit(f)
    for x in (torch.ones(3, requires_grad=True), -torch.ones(3, requires_grad=True)):
        actual, expected = jitted_f(x), f(x)
        assert actual.dtype == expected.dtype and actual.requires_grad == expected.requires_grad
        torch.testing.assert_close(actual, expected)
    closure_based = decorator is not _CallableWrapper
    for j in (jitted, jitted_f):
        stats = thunder.compile_stats(j)
        assert (stats.branches_converted > 0) == closure_based and (not stats.graph_breaks) == closure_based, \
            thunder.summary(j)


def test_arms_differentiating_different_parameters_are_not_converted_in_training():
    """Converted, both arms are differentiated: the parameters of the arm not taken would get zero gradients where
    eager leaves their .grad None (Adam's momentum and AdamW's decay would then move them in thunder only). In
    training such a branch is given up, with the reason; without grad it is converted."""
    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)

        def forward(self, x):
            h = self.a(x)
            if h.sum() > 0:
                y = self.b(h)
            else:
                y = self.c(h)
            return y

    torch.manual_seed(0)
    model = Router()
    ref = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for _ in range(3):
        x = torch.randn(2, 3)
        for m, call in ((model, jitted), (ref, ref)):
            m.zero_grad(set_to_none=True)
            call(x).sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad)
    assert "only through one arm" in sites(jitted)[0].reason
    inference = thunder.jit(copy.deepcopy(ref))
    with torch.no_grad():
        x = torch.randn(2, 3)
        torch.testing.assert_close(inference(x), ref(x))
    assert converted(inference)


def _two_names_from_one_arm(m, x):
    if x.sum() > 0:
        y = m.b(x)
        z = y * 2
    else:
        y = m.c(x)
        z = y * 3
    return y + z


def _predicate_reads_the_parameter(m, x):
    if m.w.sum() > 0:  # the condition is not differentiated: w reaches the output through the arm only
        y = x * m.w
    else:
        y = x + 1
    return y


def _other_arm_reads_it_detached(m, x):
    if x.sum() > 0:
        y = x * m.w
    else:
        y = x * m.w.detach() + (m.w > 0) + m.w.argmax()
    return y


def _nested(m, x):
    if x.sum() > 0:
        if x[0, 0] > 0:
            y = m.b(x)
        else:
            y = m.c(x)
    else:
        y = m.b(x) + m.c(x)
    return y


def _in_a_loop(m, x):
    h = x
    for i in range(2):
        if h.sum() > 0:
            h = h * m.w
        else:
            h = h + m.v
    return h


def _swapped(m, x):
    y, z = m.b(x), m.c(x)
    if x.sum() > 0:
        y, z = z, y  # each parameter reaches an output whichever way it goes: converted
    return y * 2 + z.sin()


@pytest.mark.parametrize("f", [_two_names_from_one_arm, _predicate_reads_the_parameter, _other_arm_reads_it_detached,
                               _nested, _in_a_loop, _swapped])
def test_a_parameter_reached_through_one_arm_only_keeps_eager_gradients(f):
    """Whichever way the branches go, each parameter's .grad is None exactly where eager's is (the branch is given
    up where some way would leave one unreached, with the reason); a condition, a detached or integer read does
    not count as reaching it; an input the outputs read under opposite conditions is reached either way."""
    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.b, self.c = nn.Linear(3, 3), nn.Linear(3, 3)
            self.w, self.v = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))

    M = type("M", (Base,), {"forward": f})  # the branch is in forward itself, where thunder.jit converts it
    torch.manual_seed(0)
    model = M().double()
    ref = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for sign in (-1.0, 1.0, -1.0):
        x = (sign * torch.rand(2, 3, dtype=torch.float64)).requires_grad_()
        for m, call in ((model, jitted), (ref, ref)):
            m.zero_grad(set_to_none=True)
            call(x).sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), (name, sign)
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad)
    if f is _swapped:
        assert converted(jitted)
    else:
        assert any("only through one arm" in (s.reason or "") for s in sites(jitted)), thunder.summary(jitted)


def test_a_branch_given_up_while_traced_is_reported_after_that_call():
    """The call whose trace gives a branch up runs its frame eagerly; print(jitted) and compile_stats report the
    branch as left (with the reason) from that call on, not only once the next call breaks the graph there."""
    def f(x, w):
        if x.sum() > 0:
            y = x * w
        else:
            y = x + 1
        return y

    jitted = thunder.jit(f)
    jitted(torch.rand(3), torch.rand(3, requires_grad=True)).sum().backward()
    stats = thunder.compile_stats(jitted)
    assert stats.branches_left == 1 and stats.branches_converted == 0
    assert "only through one arm" in thunder.summary(jitted)


def test_an_arm_writing_a_value_that_requires_grad_into_an_input_is_given_up():
    """`if ...: c.add_(v)` with v requiring grad: converted, the write is selected, so the caller's c would be joined
    to v (requires_grad, a grad_fn) and v would get zeros whichever arm is taken; eager leaves c as it was and
    v.grad None when the arm is not taken. Given up, with the reason."""
    def f(x, w, v, c):
        if x.sum() > 0:
            c.add_(v)
        return x * w

    jitted = thunder.jit(f)
    for sign in (-1.0, 1.0, -1.0):
        results = []
        for call in (jitted, f):
            torch.manual_seed(0)
            x, w, v = sign * torch.rand(3), torch.rand(3, requires_grad=True), torch.rand(3, requires_grad=True)
            c = torch.zeros(3)
            out = call(x, w, v, c)
            (out.sum() + (c.sum() if c.requires_grad else 0)).backward()
            results.append((c.requires_grad, c.detach().clone(), v.grad, w.grad))
        (mine_rg, mine_c, mine_v, mine_w), (rg, c, v, w) = results
        assert mine_rg == rg and (mine_v is None) == (v is None)
        torch.testing.assert_close(mine_c, c)
        torch.testing.assert_close(mine_w, w)
    assert "writes into an input" in sites(jitted)[0].reason


def test_an_arm_writing_a_value_that_requires_grad_into_a_value_made_under_no_grad_is_given_up():
    """t is made under no_grad from w; the untaken arm copies w into it. Converted, the select joined t to w
    (WhereBackward) and backward gave w zeros; eager's t has no autograd history, and backward through it raises."""
    def f(w):
        with torch.no_grad():
            t = w * 2
        if (t > 1).any():
            t.clamp_(-2, 2)
        else:
            t.copy_(w)
        return t

    jitted = thunder.jit(f)
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    out, expected = jitted(w), f(w)
    assert_same(out, expected)
    assert not out.requires_grad and out.grad_fn is None
    assert "requires grad into a tensor that does not" in sites(jitted)[0].reason


def test_a_function_whose_file_changed_since_it_was_loaded_keeps_its_branches(tmp_path, monkeypatch):
    """The rewrite reads the source from the file: edited after the import, thunder compiled the new text while
    the loaded code (eager's) is the old one."""
    import importlib

    path = tmp_path / "edited_after_import.py"
    path.write_text("def f(x):\n    if x.sum() > 0:\n        y = x * 2\n    else:\n        y = x * 3\n    return y\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_after_import")
    path.write_text("def f(x):\n    if x.sum() > 0:\n        y = x * 200\n    else:\n        y = x * 3\n    return y\n")
    x = torch.ones(3)
    torch.testing.assert_close(thunder.jit(module.f)(x), x * 2)


def test_a_graph_run_exactly_with_symbolic_sizes_skips_the_untaken_arms_size_calls():
    """With dynamic=True, Dynamo records an unused `size()` of each arm's value after a converted branch; where a
    later branch sends the graph to run_exactly (an arm indexing with a tensor), the size of the untaken arm's
    value was evaluated: "Node size_1 referenced nonexistent value"."""
    def fn(a0):
        if a0.sum() > 0:
            t7 = a0 * 2
        else:
            t7 = a0 * 3
        t9 = t7.view(a0.shape[0], 8)
        if t9.amax() > -1:
            torch.take_along_dim(t9, torch.tensor([[5, 2, 1]]), 1)
        return t9

    x = torch.arange(16.0).view(2, 4, 2)
    assert_same(thunder.jit(fn, dynamic=True)(x), fn(x))


def test_a_branch_writing_an_input_that_requires_grad_stays_python():
    """`if (a2 > -1).any(): a2 *= a1`, not taken: converted, the copy-back wrote a2 anyway and bumped its version,
    and backward through square (which saved a2) raised. Such a branch stays Python control flow."""
    def fn(a1, a2):
        t8 = a2.square()
        if (a2 > -1).any():
            a2 *= a1
        return t8

    leaf = torch.tensor(-2.0, dtype=torch.float64, requires_grad=True)
    out = thunder.jit(fn)(torch.tensor(2.0), leaf * 1)
    out.backward()
    assert_same(leaf.grad, torch.tensor(-4.0, dtype=torch.float64))


def _writes_in_nested_arms(x, y):
    if x.sum() > 0:
        x.add_(1)
        if y.sum() > 0:
            y.mul_(2)
    else:
        y.sub_(1)
    return x * 2 + y


def test_an_input_written_only_in_untaken_arms_is_not_written():
    """The copy-back of an input (one that does not require grad) written in a converted arm runs only where that
    arm is taken: eager's untaken arm bumps no version, and a caller's tensor that saved the input for backward
    (`w * x`) then backpropagates (where an arm wrote it, eager's backward raises, and so does thunder's). Every
    combination of the nested arms, against eager."""
    jitted = thunder.jit(_writes_in_nested_arms)
    for sx in (3.0, -3.0):
        for sy in (3.0, -3.0):
            results, xs, ys = [], torch.rand(4) + sx, torch.rand(4) + sy
            for fn in (_writes_in_nested_arms, jitted):
                x, y = xs.clone(), ys.clone()
                w = torch.ones(4, requires_grad=True)
                saved = w * x + w * y  # mul saved x and y
                versions = x._version, y._version
                out = fn(x, y)
                try:
                    (saved.sum() + out.detach().sum()).backward()
                except RuntimeError as e:
                    assert "modified by an inplace operation" in str(e)
                results.append((out, x, y, w.grad, x._version - versions[0], y._version - versions[1]))
            (*values, vx, vy), (*got, gx, gy) = results
            for a, b in zip(values, got):
                assert_same(b, a)
            assert (gx, gy) == (vx, vy)
    assert len(converted(jitted)) == 2


def _untaken_arm_reads_what_a_write_joined(x0, x1):
    v1 = x0 * 1
    v2 = v1 * 0.5
    v1.add_(x1)
    if x0.sum() > -100:  # always taken
        v5 = v2.sin()
    else:
        v5 = v1 * 2  # only this arm reaches x1, through the write before the branch
    return v5


def test_an_input_only_the_untaken_arm_reaches_through_an_earlier_write_keeps_grad_none():
    """The check that both arms reach the same inputs walked the FX graph's inputs: `v1 * 2` read v1's node, not
    what `v1.add_(x1)` wrote into it, so x1 looked unreached, the branch was converted, and x1.grad was zeros where
    eager leaves it None."""
    jitted = thunder.jit(_untaken_arm_reads_what_a_write_joined)
    for fn in (_untaken_arm_reads_what_a_write_joined, jitted):
        x0, x1 = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
        fn(x0, x1).sum().backward()
        assert x1.grad is None and x0.grad is not None


def test_run_exactly_computes_a_number_the_untaken_arm_made_for_both_arms():
    """Dynamo places `s.item()` of a float argument (dynamic=True) where its first use is: in the arm not taken,
    whose nodes run_exactly skips; the taken arm's `t9 + s` then read a value never computed ("Node t9 referenced
    nonexistent value item"). A non-contiguous `out=` write makes the graph run exactly (fuzz seed 2276)."""
    def f(a1, s, a3):
        t9 = a1 * 2
        torch.add(a3, a3, out=a3)
        if a1.sum() > 5:
            a1.masked_fill_(a1 > 0, s)
        else:
            t9 = t9 + s
        t9[0] = 0.5
        return a3, t9

    def inputs():
        return torch.tensor([0.375, 0.25, 1.5]), 1.5, torch.ones(6, 5, 3, dtype=torch.int64)[::2]

    assert_same(thunder.jit(f, dynamic=True)(*inputs()), f(*inputs()))


def test_run_exactly_leaves_the_untaken_arms_own_arithmetic_alone():
    """Only a number the taken arm reads is computed from the untaken arm: `1 / s` there raised ZeroDivisionError
    for s == 0.0 where eager takes the other arm (a float8 cast makes the graph run with torch, exactly)."""
    def f(x, s):
        y = x * 2
        if y.sum() > 0:
            z = y * (1 / s)
        else:
            z = y + 1
        return z + x.to(torch.float8_e4m3fn).float()

    jitted = thunder.jit(f, dynamic=True)
    x = torch.randn(4, 4).abs()
    for s in (1.0, 2.0):
        assert_same(jitted(x, s), f(x, s))
    assert_same(jitted(-x, 0.0), f(-x, 0.0))
