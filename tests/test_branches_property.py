"""Property-based tests of data-dependent branches and in-place writes (issue #11), with hypothesis.

Each example is a random program, written as Python source: nested tensor-predicated ``if``/``elif``/``else``
statements (predicates on tensor elements, sums, comparisons of elements; nesting depth at most 3), inside and
outside a short loop that Dynamo unrolls, rebinding locals and writing tensors in place (subscript assignment,
``add_``, ``mul_``, ``clamp_``, augmented assignment through slices) -- the locals, and in one property the inputs.
The source is written to a file and imported (the branch rewrite reads it with ``inspect.getsource``), then run
eagerly and through ``thunder.jit`` on several inputs (values chosen so that each predicate can go either way,
exact ties included), comparing:

- the returned values;
- the inputs after each call (programs that write their inputs), and that a returned input is the input itself;
- gradients, for inputs that require grad (programs that write only locals: eager forbids writing a leaf);
- that every ``if`` was converted and compiled (``thunder.compile_stats(j).branches_converted``): every generated
  program satisfies the conversion rules (no side effects beyond tensor writes, every name bound before the
  ``if``, arms that leave each name with one shape and dtype), and every graph is compiled, none runs as captured.

Derandomized (``derandomize=True``): every run draws the same programs, so a failure reproduces. A failing
example prints the program's source.
"""
import importlib.util
import itertools
import os
import tempfile
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

import thunder
from thunder.core.compile import CompiledGraph

from conftest import assert_same

N = 4  # the length of every tensor of the generated programs
MAX_DEPTH = 3
#: Derandomized (the same examples every run), no example database; no shrinking unless THUNDER_HYPOTHESIS_SHRINK=1
#: (a failing example prints its program; shrinking one takes minutes, each try compiling a program).
_PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("THUNDER_HYPOTHESIS_SHRINK") else [])
_SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=False, phases=_PHASES,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------

@dataclass
class Program:
    source: str
    ifs: int            # if statements in the source (an elif is one more)
    writes_inputs: bool
    returned: tuple = ()  # the names returned, in order

    def __repr__(self):
        return f"Program(ifs={self.ifs}, writes_inputs={self.writes_inputs}):\n{self.source}"


class _Writer:
    """Draws one program's statements. Every tensor name (x, y: inputs; a, b, c: locals) has shape (N,) and dtype
    float32, so both arms of every branch leave each name as a tensor of one shape and dtype. Statements rebind a
    and b, and write c (and x and y, for programs that write their inputs) in place; ``mixed``: they also write a
    and b in place, so that a write may go through a name that one arm rebound and the other left on its tensor
    (thunder then gives that branch up: it is not converted)."""

    def __init__(self, draw, writes_inputs, mixed=False):
        self.draw, self.writes_inputs, self.mixed = draw, writes_inputs, mixed
        self.ifs = 0
        self.lines = []

    # -- expressions --
    def const(self):
        return self.draw(st.sampled_from(["0.0", "0.5", "-0.5", "1.0", "-1.0", "2.0", "0.25"]))

    def index(self, loop):
        options = [str(k) for k in range(N)] + [str(-1)]
        if loop:
            options += ["i", f"{N - 1} - i", "i + 1"]
        return self.draw(st.sampled_from(options))

    def name(self):
        return self.draw(st.sampled_from(["a", "b", "c", "x", "y"]))

    def element(self, loop):
        """A 0-dim tensor expression."""
        kind = self.draw(st.integers(0, 7))
        if kind == 6:  # (a product, not the view itself: eager refuses an in-place op on overlapping memory)
            return f"v[{self.draw(st.integers(0, N - 2))}] * {self.const()}"
        if kind == 7:
            return f"w[{self.draw(st.integers(0, 1))}, {self.draw(st.integers(0, 1))}] * {self.const()}"
        n, m = self.name(), self.name()
        if kind == 0:
            return f"{n}[{self.index(loop)}]"
        if kind == 1:
            return f"{n}.sum()"
        if kind == 2:
            return f"({n} * {m}).sum()"
        if kind == 3:
            return f"{n}[{self.index(loop)}] - {m}[{self.index(loop)}]"
        if kind == 4:
            return f"{n}.mean() * {self.const()}"
        return f"{n}.max()"

    def operand(self, loop):
        """An element as the operand of an in-place op: a new tensor, never a view of the tensor written (eager's
        result is then undefined: `y[::2].mul_(y[0])` reads y[0] while it writes it)."""
        return f"({self.element(loop)}) * 1.0"

    def vector(self, loop):
        """An expression of shape (N,)."""
        kind = self.draw(st.integers(0, 9))
        n, m = self.name(), self.name()
        c = self.const()
        return [
            f"{n} * {c} + {m}",
            f"torch.sin({n}) + {m} * {c}",
            f"torch.tanh({n} - {m})",
            f"{n} * {m} * 0.5",
            f"torch.where({n} > {c}, {n}, {m})",
            f"{n}.clamp(-1.0, 1.5) - {m}",
            f"{n} + {self.element(loop)}",
            f"{n} * torch.sigmoid({m})",
            f"({n} - {m}.mean()) * {c}",
            f"{n}.flip(0) + {c}",
        ][kind]

    def predicate(self, loop):
        kind = self.draw(st.integers(0, 5))
        op = self.draw(st.sampled_from([">", "<", ">=", "<="]))
        if kind == 0:
            return f"{self.name()}[{self.index(loop)}] {op} {self.const()}"
        if kind == 1:
            return f"{self.name()}.sum() {op} {self.const()}"
        if kind == 2:
            return f"{self.name()}[{self.index(loop)}] {op} {self.name()}[{self.index(loop)}]"
        if kind == 3:
            return f"({self.name()} > {self.const()}).any()"
        if kind == 4:
            return f"{self.element(loop)} {op} {self.const()}"
        return f"({self.name()} * {self.name()}).sum() {op} {self.const()}"

    # -- statements --
    def target(self):
        return self.draw(st.sampled_from(["c"] + ["x", "y"] * self.writes_inputs + ["a", "b"] * self.mixed))

    def write_view(self, pad, loop):
        """A write through v (base[1:]) or w (base.view(2, 2)), views of x (or, for programs that write only
        locals, of a local)."""
        kind = self.draw(st.integers(0, 6))
        if kind == 0:
            self.lines.append(f"{pad}v.add_({self.element(loop)} * {self.const()})")
        elif kind == 1:
            self.lines.append(f"{pad}v[{self.draw(st.integers(0, N - 2))}] = {self.element(loop)}")
        elif kind == 2:
            self.lines.append(f"{pad}v[:2] += {self.draw(st.sampled_from(['y', 'b']))}[2:]")
        elif kind == 3:
            self.lines.append(f"{pad}w[{self.draw(st.integers(0, 1))}] = {self.name()}[:2] * {self.const()}")
        elif kind == 4:
            self.lines.append(f"{pad}w[:, {self.draw(st.integers(0, 1))}] += {self.operand(loop)}")
        elif kind == 5:
            self.lines.append(f"{pad}w.t()[{self.draw(st.integers(0, 1))}].mul_({self.const()})")
        else:  # (bounds that are numbers: with a tensor bound, clamp_ is a graph break in Dynamo)
            self.lines.append(f"{pad}v.clamp_({self.draw(st.sampled_from(['-1.0', '0.0']))}, "
                              f"{self.draw(st.sampled_from(['0.5', '1.5']))})")

    def write(self, pad, loop):
        if self.draw(st.integers(0, 3)) == 0:
            self.write_view(pad, loop)
            return
        t = self.target()
        kind = self.draw(st.integers(0, 7))
        if kind == 0:  # element assignment
            self.lines.append(f"{pad}{t}[{self.index(loop)}] = {self.element(loop)}")
        elif kind == 1:  # a slice assigned from a slice of the same length
            length = self.draw(st.integers(1, N - 1))
            lo, src = self.draw(st.integers(0, N - length)), self.draw(st.integers(0, N - length))
            self.lines.append(f"{pad}{t}[{lo}:{lo + length}] = {self.name()}[{src}:{src + length}] * {self.const()}")
        elif kind == 2:
            self.lines.append(f"{pad}{t}.add_({self.vector(loop)})")
        elif kind == 3:
            self.lines.append(f"{pad}{t}.mul_({self.const()})")
        elif kind == 4:
            lo = self.draw(st.sampled_from(["-1.0", "-0.5", "0.0"]))
            self.lines.append(f"{pad}{t}.clamp_({lo}, {self.draw(st.sampled_from(['0.5', '1.0', '2.0']))})")
        elif kind == 5:  # augmented assignment through a slice
            length = self.draw(st.integers(1, N - 1))
            lo = self.draw(st.integers(0, N - length))
            source = self.draw(st.sampled_from([n for n in ("a", "b", "c", "x", "y") if n != t]))  # (no overlap)
            self.lines.append(f"{pad}{t}[{lo}:{lo + length}] += {source}[:{length}]")
        elif kind == 6:  # a write through a strided view
            self.lines.append(f"{pad}{t}[::2].mul_({self.operand(loop)})")
        else:  # augmented assignment of the whole tensor
            self.lines.append(f"{pad}{t} -= {self.element(loop)} * {self.const()}")

    def rebind(self, pad, loop):
        self.lines.append(f"{pad}{self.draw(st.sampled_from(['a', 'b']))} = {self.vector(loop)}")

    def statement(self, pad, depth, loop):
        kind = self.draw(st.integers(0, 9 if depth < MAX_DEPTH else 5))
        if kind <= 2:
            self.rebind(pad, loop)
        elif kind <= 5:
            self.write(pad, loop)
        else:
            self.if_statement(pad, depth, loop)

    def block(self, pad, depth, loop, at_least=1):
        for _ in range(self.draw(st.integers(at_least, 3))):
            self.statement(pad, depth, loop)

    def if_statement(self, pad, depth, loop, keyword="if"):
        self.ifs += 1
        self.lines.append(f"{pad}{keyword} {self.predicate(loop)}:")
        self.block(pad + "    ", depth + 1, loop)
        rest = self.draw(st.sampled_from(["none", "else", "elif"] if depth + 1 < MAX_DEPTH else ["none", "else"]))
        if rest == "else":
            self.lines.append(f"{pad}else:")
            self.block(pad + "    ", depth + 1, loop)
        elif rest == "elif":
            self.if_statement(pad, depth + 1, loop, keyword="elif")


@st.composite
def programs(draw, writes_inputs, return_all=True, view_base=None, mixed=False):
    """A program. v and w are views of ``view_base``: x for programs that write their inputs, else c, a local
    no statement rebinds (``view_base="a"``: a, which branches rebind). ``return_all=False`` returns only some
    names, so that a name written in a branch may be dead after it. ``mixed``: see _Writer."""
    w = _Writer(draw, writes_inputs, mixed)
    base = view_base or ("x" if writes_inputs else "c")
    w.lines += ["def program(x, y):", "    a = x * 1.5", "    b = y - 0.5", "    c = x + y",
                f"    v = {base}[1:]", f"    w = {base}.view(2, 2)"]
    w.block("    ", 0, False, at_least=0)
    loop = draw(st.integers(0, 3))  # 0: no loop
    if loop:
        w.lines.append(f"    for i in range({loop}):")
        w.block("        ", 0, True)
    w.block("    ", 0, False, at_least=0)
    if w.ifs == 0:  # every program has a branch
        w.if_statement("    ", 0, False)
    names = ("a", "b", "c", "x", "y") if writes_inputs else ("a", "b", "c", "v * 1", "w * 1")
    if not return_all:
        names = tuple(n for n in names if draw(st.booleans())) or names[:1]
    w.lines.append(f"    return {', '.join(names)},")
    return Program("\n".join(w.lines) + "\n", w.ifs, writes_inputs, names)


_values = st.sampled_from([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 0.25, 1.5, -3.0, 0.75])
vectors = st.lists(_values, min_size=N, max_size=N)
#: Three calls' inputs: (x, y) each; the second and third also flip the signs, so predicates go both ways.
input_sets = st.lists(st.tuples(vectors, vectors), min_size=1, max_size=2)


# ---------------------------------------------------------------------------------------------
# Loading and comparing
# ---------------------------------------------------------------------------------------------

_DIR = tempfile.TemporaryDirectory(prefix="thunder_branch_programs_")
_counter = itertools.count()


def load(program):
    """Writes the program's source to a file and imports it (inspect.getsource must find it); its function."""
    name = f"generated_program_{os.getpid()}_{next(_counter)}"
    path = os.path.join(_DIR.name, name + ".py")
    with open(path, "w") as f:
        f.write("import torch\n\n\n" + program.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.program


def calls(sets):
    """The inputs of each call: each drawn set, then the same with signs flipped."""
    out = []
    for xs, ys in sets:
        x, y = torch.tensor(xs), torch.tensor(ys)
        out += [(x, y), (-x, y.flip(0)), (x.flip(0), -y)]
    return out


def assert_all_converted_and_compiled(jitted, program):
    stats = thunder.compile_stats(jitted)
    left = [str(s) for s in stats.branches if not (s.converted and not s.reason)]
    assert stats.branches_converted == program.ifs, \
        f"{stats.branches_converted} of {program.ifs} ifs converted; left: {left}\n{jitted}"
    uncompiled = [g["reason"] for g in stats.graphs if not g["compiled"]]
    assert not uncompiled, f"graphs run uncompiled: {uncompiled}"
    assert not stats.graph_breaks, f"graph breaks: {[str(b) for b in stats.graph_breaks]}"
    assert all(isinstance(g, CompiledGraph) for g in jitted._thunder_state.graphs)


TOL = dict(rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The properties
# ---------------------------------------------------------------------------------------------

def check_writes(program, sets, executors=None, all_converted=True):
    """The program (which may write its inputs) jitted against eager on each call's inputs: values, the inputs
    after the call, and a returned input is the input object itself; then that every if was converted and every
    graph compiled (``all_converted=False``: only that no graph runs uncompiled)."""
    note(program.source)
    torch._dynamo.reset()
    fn = load(program)
    jitted = thunder.jit(fn, executors=executors)
    for k, (x, y) in enumerate(calls(sets)):
        e_x, e_y, c_x, c_y = x.clone(), y.clone(), x.clone(), y.clone()
        expected = fn(e_x, e_y)
        note(f"call {k}: x={x.tolist()} y={y.tolist()}")
        actual = jitted(c_x, c_y)
        assert_same(actual, expected, **TOL, path=f"call {k}")
        assert_same([c_x, c_y], [e_x, e_y], **TOL, path=f"inputs after call {k}")
        for n, out in zip(program.returned, actual):
            if n in ("x", "y"):
                assert out is {"x": c_x, "y": c_y}[n], f"returned {n} is not the input itself"
    if all_converted:
        assert_all_converted_and_compiled(jitted, program)
    else:
        _assert_compiled_and_count(jitted, program)


def _assert_compiled_and_count(jitted, program):
    """No graph runs uncompiled; how many ifs were converted is a hypothesis event."""
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs), [g["reason"] for g in stats.graphs if not g["compiled"]]
    event(f"{stats.branches_converted} of {program.ifs} ifs converted" if stats.branches_converted < program.ifs
          else "every if converted")


def check_grads(program, sets, executors=None, all_converted=True):
    """The program (which writes only locals) on inputs that require grad: values and gradients equal eager's.
    (Where eager's backward raises -- an in-place op overwrote a value autograd saved -- only values.)
    ``all_converted=False``: only that no graph runs uncompiled (see check_writes)."""
    note(program.source)
    torch._dynamo.reset()
    fn = load(program)
    jitted = thunder.jit(fn, executors=executors)
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0])
    for k, (x, y) in enumerate(calls(sets)):
        e_in = [x.clone().requires_grad_(), y.clone().requires_grad_()]
        c_in = [x.clone().requires_grad_(), y.clone().requires_grad_()]
        expected = fn(*e_in)
        note(f"call {k}: x={x.tolist()} y={y.tolist()}")
        actual = jitted(*c_in)
        assert_same(actual, expected, **TOL, path=f"call {k}")
        assert [t.requires_grad for t in actual] == [t.requires_grad for t in expected]
        e_loss = sum((t.flatten() * weights[:t.numel()]).sum() for t in expected if t.requires_grad)
        if not isinstance(e_loss, torch.Tensor):
            continue
        try:
            e_grads = torch.autograd.grad(e_loss, e_in, allow_unused=True)
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e), e
            event("eager's backward raises: values only")
            continue
        event("gradients compared")
        c_loss = sum((t.flatten() * weights[:t.numel()]).sum() for t in actual if t.requires_grad)
        c_grads = torch.autograd.grad(c_loss, c_in, allow_unused=True)
        for n, (a, e) in enumerate(zip(c_grads, e_grads)):
            a = torch.zeros(N) if a is None else a
            e = torch.zeros(N) if e is None else e
            assert_same(a, e, **TOL, path=f"call {k}: gradient of input {n}")
    if all_converted:
        assert_all_converted_and_compiled(jitted, program)
    else:
        _assert_compiled_and_count(jitted, program)


@settings(max_examples=300, **_SETTINGS)
@given(program=programs(writes_inputs=True), sets=input_sets)
def test_branches_with_writes_to_inputs_and_locals(program, sets):
    """Writes to the inputs, to locals and through views of the inputs, under converted branches; the torch
    executor (the functionalized trace as torch ops; the default executors: the next test)."""
    check_writes(program, sets, executors="torch")


@settings(max_examples=100, **_SETTINGS)
@given(program=programs(writes_inputs=True, mixed=True), sets=input_sets)
def test_branches_with_writes_through_names_branches_rebind(program, sets):
    """In-place writes also through the names branches rebind (a site where a write goes through a name one arm
    rebound and the other did not is given up, and runs as Python): values and inputs as eager's. (The graph breaks of
    given-up sites make aliased calls, which run the graph with branches.run_exactly.)"""
    check_writes(program, sets, executors="torch", all_converted=False)


@settings(max_examples=40, **_SETTINGS)
@given(program=programs(writes_inputs=True), sets=input_sets)
def test_branches_with_writes_default_executors(program, sets):
    """The same programs under the default executors (the CPU fusion executor first)."""
    check_writes(program, sets)


@settings(max_examples=100, **_SETTINGS)
@given(program=programs(writes_inputs=False), sets=input_sets)
def test_branches_values_and_gradients(program, sets):
    """Inputs that require grad; the programs write only locals (and views of them): values and gradients."""
    check_grads(program, sets)


@settings(max_examples=40, **_SETTINGS)
@given(program=programs(writes_inputs=True, return_all=False), sets=input_sets)
def test_branches_with_names_dead_after_the_if(program, sets):
    """Programs returning only some of their names: a name a branch writes may be dead after it."""
    check_writes(program, sets, executors="torch")


@settings(max_examples=40, **_SETTINGS)
@given(program=programs(writes_inputs=False, view_base="a"), sets=input_sets)
def test_branches_rebinding_a_name_whose_tensor_has_views(program, sets):
    """v and w view a; branches rebind a. A site after which a write through v or w would not be seen through a
    (a select, a new tensor) is given up, and runs as Python: values and gradients as eager's."""
    check_grads(program, sets, executors="torch", all_converted=False)


# ---------------------------------------------------------------------------------------------
# Minimal cases of what the properties found
# ---------------------------------------------------------------------------------------------

def _compare_calls(fn, inputs, executors=None):
    jitted = thunder.jit(fn, executors=executors)
    for args in inputs:
        e_args, c_args = [a.clone() for a in args], [a.clone() for a in args]
        expected = fn(*e_args)
        actual = jitted(*c_args)
        assert_same(actual, expected)
        assert_same(c_args, e_args, path="inputs after the call")
    return jitted


def test_augmented_assignment_in_an_arm_to_a_name_dead_after_the_if():
    def f(buf, x):
        if x.sum() > 0:
            buf += x
        return x * 2

    _compare_calls(f, [(torch.zeros(3), torch.ones(3)), (torch.zeros(3), -torch.ones(3))])


def test_augmented_assignment_in_an_arm_to_a_name_read_after_the_if():
    def f(buf, x):
        if x.sum() > 0:
            buf += x
        else:
            buf -= 1
        return buf * 2

    jitted = _compare_calls(f, [(torch.zeros(3), torch.ones(3)), (torch.zeros(3), -torch.ones(3))])
    assert thunder.compile_stats(jitted).branches_converted == 1


def test_fusion_of_writes_through_transposed_views_under_nested_branches():
    def f(x, y):
        b = y - 0.5
        c = x + y
        w = x.view(2, 2)
        a = x + y[2]
        for i in range(3):
            if c.sum() >= -1.0:
                pass
            elif (c > 0.0).any():
                if a.sum() < 2.0:
                    c -= b.mean()
                    w.t()[0].mul_(-1.0)
                w.t()[1].mul_(1.0)
        return c

    jitted = _compare_calls(f, [(torch.tensor([-0.5, -3.0, -3.0, -0.5]), torch.tensor([0.75, 0.5, -2.0, 0.0]))])
    assert_all_converted_and_compiled(jitted, Program("", 3, True))


def test_fusion_with_a_write_under_a_branch():
    def f(x, y):
        a = x * 1.5
        b = y * 3
        if x[0] > 0.0:
            b = x * 2
            y[1:2] = a[:1]
        return b

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.ones(4), torch.ones(4))])
    assert all(g["compiled"] for g in thunder.compile_stats(jitted).graphs)


def test_aliased_inputs_and_an_augmented_assignment_in_the_arm_not_taken():
    def f(a, b):
        if b.sum() > 0:
            a -= 1
        return a * 2

    for sign in (-1.0, 1.0):  # the first call: the arm is not taken, then taken
        torch._dynamo.reset()
        jitted = thunder.jit(f)
        base, e_base = torch.full((4,), sign), torch.full((4,), sign)
        assert_same(jitted(base, base[1:3]), f(e_base, e_base[1:3]))
        assert_same(base, e_base)


def test_views_of_an_input_across_a_graph_break_under_branches():
    def f(x, y):
        v = x[1:]
        w = x.view(2, 2)
        v.clamp_(-1.0, x.sum())  # a tensor bound: Dynamo breaks the graph here
        if x[2] > 0.5:
            w[0] = y[:2] * -0.5
            if x.sum() <= 2.0:
                y -= w[0, 0]
        return x, y

    _compare_calls(f, [(torch.tensor([0.0, 0.0, 1.5, 2.0]), torch.tensor([-2.0, -2.0, -1.0, 1.0])),
                       (torch.tensor([0.0, 3.0, 0.0, 2.0]), torch.tensor([-2.0, 2.0, -1.0, 1.0]))])


def test_write_through_a_view_after_a_branch_that_may_rebind_its_base():
    def f(x, y):
        a = x * 1.0
        v = a[1:]
        if y.sum() > 0:
            a = y * 2
        v.add_(1)
        return a

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])
    assert "writes a tensor that one arm leaves a name aliasing" in _given_up(jitted)[0]


def _given_up(jitted):
    return [s.reason for s in thunder.compile_stats(jitted).branches if s.reason]


def test_write_through_a_name_both_arms_leave_on_earlier_tensors():
    def f(x, y):
        z = x
        if y.sum() > 0:
            z = y
        z.add_(1)  # eager: writes x or y
        return x, y

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])
    assert "writes through a name" in _given_up(jitted)[0]


def test_write_through_a_view_of_a_selected_name():
    def f(x, y):
        z = x
        if y.sum() > 0:
            z = y * 2
        z[1:].add_(1)  # eager: writes x when the branch is not taken
        return x

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])
    assert "writes through a name" in _given_up(jitted)[0]


def test_write_through_one_of_two_names_an_arm_binds_to_one_tensor():
    def f(x, y):
        if y.sum() > 0:
            a = y * 2
            b = a
        else:
            a = y * 3
            b = y * 4
        a.add_(1)  # eager: b sees it when the first arm was taken
        return b

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])
    assert "writes through a name" in _given_up(jitted)[0]


def test_write_through_a_selected_name_whose_earlier_tensor_is_not_read_again():
    """Nothing reads the tensor the name was bound to before the branch: the select is exact, the site converted."""
    def f(x, y):
        a = x * 1.0
        if y.sum() > 0:
            a = y * 2
        a[1:].add_(1)
        return a

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])
    assert thunder.compile_stats(jitted).branches_converted == 1 and not _given_up(jitted)


def test_a_view_of_the_tensor_a_branch_may_rebind_written_after_a_graph_break():
    """The write is in the next graph: the graph of the branch returns the select and the view, which eager
    returns aliased when the arm that keeps the tensor is taken; the site is given up."""
    def f(x, y):
        a = x * 1.0
        v = a[1:]
        if y.sum() > 0:
            a = y * 2
        torch._dynamo.graph_break()
        v.add_(1)
        return a

    jitted = _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])
    assert "both live after the graph" in _given_up(jitted)[0]


def test_write_through_a_name_that_a_branch_may_rebind():
    def f(x, y):
        z = x
        if y.sum() > 0:
            z = y * 2
        z.add_(1)  # eager: writes x when the branch is not taken
        return x

    _compare_calls(f, [(torch.zeros(4), torch.ones(4)), (torch.zeros(4), -torch.ones(4))])


def test_views_of_a_local_written_before_and_after_a_graph_break():
    def f(x):
        a = x * 1.0
        v = a[1:]
        v.add_(1)
        torch._dynamo.graph_break()
        v.add_(10)
        return a

    _compare_calls(f, [(torch.zeros(4),)])


def test_views_of_a_local_across_a_graph_break_without_a_write_before():
    def f(x):
        a = x * 1.0
        v = a[1:]
        a.add_(1)
        torch._dynamo.graph_break()
        v.add_(10)
        return a

    _compare_calls(f, [(torch.zeros(4),)])


# ---------------------------------------------------------------------------------------------
# The generator itself
# ---------------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, derandomize=True)
@given(program=programs(writes_inputs=True))
def test_generated_programs_follow_the_conversion_rules(program):
    """Every generated program parses, counts its ifs right, nests at most MAX_DEPTH, and every if is one the
    static rules accept (thunder.frontend.branches.rewrite converts them all)."""
    import ast

    from thunder.frontend import branches

    tree = ast.parse(program.source)
    ifs = [n for n in ast.walk(tree) if isinstance(n, ast.If)]
    assert len(ifs) == program.ifs

    def depth(node, d=0):
        inner = [depth(c, d + isinstance(c, ast.If)) for c in ast.iter_child_nodes(node)]
        return max([d] + inner)

    assert depth(tree) <= MAX_DEPTH
    fn = load(program)
    sites = {}
    rewritten = branches.rewrite(fn, sites)
    assert rewritten.converted == program.ifs, [str(s) for s in sites.values()]
    assert all(s.converted and not s.reason for s in sites.values())
