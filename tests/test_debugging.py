"""Tracebacks and pdb: trace sources are in linecache, an error raised inside a compiled graph shows the trace line
and the user's source line it came from, and thunder.jit(..., debug="pdb") steps through the execution trace."""
import io
import linecache
import sys
import traceback

import pytest
import torch

import thunder
from thunder.core import debug


def lookup(table, idx):
    return torch.nn.functional.embedding(idx, table) * 2


def scaled_sum(a, b):
    c = a * 2
    d = c + b
    return d.exp().sum()


def test_trace_functions_have_their_source_in_linecache():
    jitted = thunder.jit(scaled_sum, executors="torch")
    jitted(torch.randn(2, 3), torch.randn(2, 3))
    fn = jitted._thunder_state.graphs[0].fn
    filename = fn.__code__.co_filename
    assert filename.startswith("<thunder trace release")
    lines = linecache.getlines(filename)
    assert lines and "".join(lines) == str(thunder.last_traces(jitted)[-1])
    linecache.checkcache()  # as traceback printing does: the entry stays
    assert linecache.getlines(filename) == lines


def test_an_error_inside_a_compiled_graph_shows_the_trace_line_and_the_user_line():
    jitted = thunder.jit(lookup)
    table = torch.randn(4, 3)
    jitted(table, torch.tensor([1, 2]))  # compiles
    with pytest.raises(IndexError) as info:
        jitted(table, torch.tensor([1, 7]))  # the same graph, an index out of range: raised while the trace runs
    text = "".join(traceback.format_exception(info.value))
    assert 'File "<thunder trace release' in text and "torch.nn.functional.embedding(" in text, text
    (note,) = [n for n in info.value.__notes__ if n.startswith("thunder: raised at line")]
    assert "ltorch.embedding(t" in note  # the trace line
    assert "from your code at test_debugging.py:" in note and "in lookup: return torch.nn.functional.embedding(idx, " \
        "table) * 2" in note  # the user's line next to it


def test_an_error_through_torch_compile_is_annotated_too():
    compiled = torch.compile(lookup, backend="thunder")
    table = torch.randn(4, 3)
    compiled(table, torch.tensor([0]))
    with pytest.raises(IndexError) as info:
        compiled(table, torch.tensor([9]))
    assert any("from your code at test_debugging.py:" in n for n in info.value.__notes__)


def test_user_source_of_a_trace_line():
    jitted = thunder.jit(scaled_sum, executors="torch")
    jitted(torch.randn(2, 3), torch.randn(2, 3))
    filename = jitted._thunder_state.graphs[0].fn.__code__.co_filename
    lines = linecache.getlines(filename)
    add = next(i for i, l in enumerate(lines, 1) if l.lstrip().startswith("t") and "torch.add(" in l)
    assert debug.user_source_of(filename, add).endswith("in scaled_sum: d = c + b")
    assert debug.user_source_of(filename, 1) == ""  # above the function: no source


def run_under_pdb(jitted, args, commands):
    """Calls jitted(*args) with pdb reading ``commands`` (one per line); returns (result, what pdb printed)."""
    stdin, stdout = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO("\n".join(commands) + "\n"), io.StringIO()
    try:
        out = jitted(*args)
        return out, sys.stdout.getvalue()
    finally:
        sys.stdin, sys.stdout = stdin, stdout


def test_debug_pdb_steps_through_the_execution_trace_op_by_op():
    jitted = thunder.jit(scaled_sum, executors="torch", debug="pdb")  # torch only: each op its own line
    a, b = torch.ones(2, 3), torch.ones(2, 3)
    out, printed = run_under_pdb(jitted, (a, b), ["n", "n", "p t2", "l", "c"])
    assert torch.allclose(out, scaled_sum(a, b))
    assert "<thunder trace release" in printed and "computation()" in printed  # stopped in the trace
    assert "tensor([[2., 2., 2.]," in printed  # p t2: the value after two steps (a * 2)
    assert "torch.exp(" in printed  # l: lists the trace's lines
    out, printed = run_under_pdb(jitted, (a, b), ["c"])  # every call stops again
    assert "computation()" in printed and torch.allclose(out, scaled_sum(a, b))


def test_debug_pdb_steps_through_the_backward_trace_too():
    jitted = thunder.jit(scaled_sum, executors="torch", debug="pdb")
    a = torch.ones(2, 3, requires_grad=True)
    out, printed = run_under_pdb(jitted, (a, torch.ones(2, 3)), ["c"])
    _, printed = run_under_pdb(out.backward, (), ["c"])
    assert "<thunder trace backward release" in printed
    assert torch.allclose(a.grad, torch.full((2, 3), 2 * torch.exp(torch.tensor(3.0)).item()))


@pytest.mark.parametrize("commands", [["q"], []])  # q, or the end of the debugger's input (a run under CI)
def test_quitting_the_debugger_raises_bdbquit_as_at_a_breakpoint(commands):
    """Pdb.runcall returns None when the debugger is quit; thunder took that for the trace's outputs and failed
    with a TypeError of its own."""
    import bdb

    jitted = thunder.jit(scaled_sum, executors="torch", debug="pdb")
    with pytest.raises(bdb.BdbQuit, match="the debugger was quit"):
        run_under_pdb(jitted, (torch.ones(2, 3), torch.ones(2, 3)), commands)


@pytest.mark.parametrize("value,error", [(True, TypeError), ("gdb", ValueError), (1, TypeError)])
def test_debug_option_is_checked(value, error):
    with pytest.raises(error, match="debug"):
        thunder.jit(scaled_sum, debug=value)
