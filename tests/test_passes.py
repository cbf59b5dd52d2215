"""The passes visibly change traces built to need them: DCE removes unused
computations, CSE merges repeated ones, constant folding turns computations on
constants into ``_constants[i]``; and none of them touches what it must not
(in-place ops, random numbers)."""
import torch
import torch.nn.functional as F

import thunder
from conftest import assert_same, check_program


def code_lines(view):
    """The statements of a trace's computation (no comments, no imports, no blank lines)."""
    body = str(view).split("def computation", 1)[1]
    return [l.strip() for l in body.splitlines()[1:] if l.strip() and not l.strip().startswith("#")]


def around(jitted, pass_name):
    """(trace before the pass, trace after it) from last_traces."""
    traces = thunder.last_traces(jitted)
    for i, view in enumerate(traces):
        if view.name == pass_name:
            return traces[i - 1], view
    raise AssertionError(f"no trace from pass {pass_name!r} in {[t.name for t in traces]}")


def count(lines, needle):
    return sum(needle in l for l in lines)


def test_dce_removes_unused_computation():
    def fn(x, y):
        unused = torch.sin(y) * 3  # noqa: F841
        also_unused = torch.cos(x).sum()  # noqa: F841
        return x + 1

    jitted = check_program(fn, torch.randn(3), torch.randn(3))
    before, after = around(jitted, "dce")
    assert count(code_lines(before), "sin(") == 1 and count(code_lines(before), "cos(") == 1
    assert count(code_lines(after), "sin(") == 0 and count(code_lines(after), "cos(") == 0
    assert count(code_lines(after), "add(") == 1
    assert len(after.symbols) < len(before.symbols)
    assert "Dead-code elimination" in after.provenance
    assert str(after).startswith("# " + after.provenance.splitlines()[0])
    # Nothing of the dead code reaches the later traces.
    for view in thunder.last_traces(jitted)[[t.name for t in thunder.last_traces(jitted)].index("dce"):]:
        assert "sin" not in "\n".join(code_lines(view))


def test_without_dce_the_dead_code_stays():
    def fn(x, y):
        unused = torch.sin(y)  # noqa: F841
        return x + 1

    jitted = thunder.jit(fn, passes=("cse", "constant_folding", "claim"))
    x, y = torch.randn(3), torch.randn(3)
    assert_same(jitted(x, y), fn(x, y))
    assert [t.name for t in thunder.last_traces(jitted)[1:]] == ["cse", "constant_folding", "claim"]
    assert count(code_lines(thunder.last_traces(jitted)[-1]), "sin(") == 1


def test_cse_merges_repeated_exp():
    def fn(x):
        return torch.exp(x) + torch.exp(x) * torch.exp(x)

    jitted = check_program(fn, torch.randn(4))
    before, after = around(jitted, "cse")
    assert count(code_lines(before), "exp(") == 3
    assert count(code_lines(after), "exp(") == 1
    assert "Common-subexpression elimination" in after.provenance
    assert count(code_lines(around(jitted, "dce")[1]), "exp(") == 1


def test_cse_merges_equal_ops_with_equal_arguments_only():
    def fn(x):
        a = F.softmax(x, -1) + F.softmax(x, -1)   # same: merged
        b = F.softmax(x, 0)                       # other argument: kept
        c = x.sum(0) * x.sum(1).sum()             # other dims: kept
        return a, b, c

    jitted = check_program(fn, torch.randn(3, 3))
    before, after = around(jitted, "cse")
    assert count(code_lines(before), "softmax(") == 3
    assert count(code_lines(after), "softmax(") == 2
    assert count(code_lines(after), "sum(") == 3


def test_cse_does_not_merge_random_ops():
    def fn(x):
        return torch.rand(3) + torch.rand(3) + x, F.dropout(x, 0.5, True) - F.dropout(x, 0.5, True)

    jitted = thunder.jit(fn)
    x = torch.ones(3)
    torch.manual_seed(0)
    out = jitted(x)
    torch.manual_seed(0)
    expected = fn(x)
    assert_same(out[0], expected[0])  # the two rand draws come first, in both
    # Dropout draws its mask with thunder's functional RNG: equal to eager's in distribution only. Each of the two
    # keeps an element as 2 or drops it to 0, so their difference is -2, 0 or 2 everywhere.
    assert all(v in (-2.0, 0.0, 2.0) for v in out[1].tolist()), out[1]
    before, after = around(jitted, "cse")
    assert count(code_lines(after), "rand(") == 2
    assert count(code_lines(after), "dropout(") == 2
    final = code_lines(around(jitted, "dce")[1])
    assert count(final, "rand(") == 2 and count(final, "dropout(") == 2


def test_constant_folding_makes_constants():
    def fn(x):
        return x + torch.ones(3) * 2

    jitted = check_program(fn, torch.randn(2, 3))
    before, after = around(jitted, "constant_folding")
    assert not any("_constants[" in l for l in code_lines(before))
    assert any("_constants[" in l for l in code_lines(after))
    assert count(code_lines(after), "ones(") == 0 and count(code_lines(after), "mul(") == 0
    assert "Constant folding" in after.provenance
    final = code_lines(around(jitted, "dce")[1])
    assert any("_constants[" in l for l in final) and count(final, "ones(") == 0


def test_constant_folding_of_numbers_and_chains():
    def fn(x):
        k = torch.arange(4) * 2 + 1
        m = torch.full((4,), 3.0).exp().sum()
        return x * k + m

    jitted = check_program(fn, torch.randn(4))
    _, after = around(jitted, "constant_folding")
    lines = code_lines(after)
    assert count(lines, "arange(") == 0 and count(lines, "full(") == 0 and count(lines, "exp(") == 0
    assert count(code_lines(around(jitted, "dce")[1]), "_constants[") >= 1


def test_constant_folding_leaves_random_and_inputs_alone():
    def fn(x):
        noise = torch.rand(3)          # random: never folded
        return x * 2 + noise

    jitted = thunder.jit(fn)
    x = torch.ones(3)
    torch.manual_seed(1)
    out = jitted(x)
    torch.manual_seed(1)
    assert_same(out, fn(x))
    _, after = around(jitted, "constant_folding")
    assert count(code_lines(after), "rand(") == 1
    # A second call draws new numbers: the random op was not frozen into a constant.
    assert not torch.equal(jitted(x), out)


def test_dce_keeps_in_place_ops_whose_results_are_unused():
    def fn(x, buf):
        buf.add_(1)      # result unused, but it writes buf
        return x * 2

    x, buf = torch.randn(3), torch.zeros(3)
    jitted = check_program(fn, x, buf)
    _, after = around(jitted, "dce")
    # functionalization made the write a copy-back of the out-of-place add into buf: DCE keeps it
    assert count(code_lines(after), "prims.copy_to(") == 1 and count(code_lines(after), "add(") == 1
    jitted(x, buf)
    assert_same(buf, torch.ones(3))


def test_passes_together_shrink_the_trace():
    def fn(x, y):
        a = torch.exp(x) + torch.exp(x)
        dead = torch.tanh(y)  # noqa: F841
        return a + torch.ones(3) * 2

    jitted = check_program(fn, torch.randn(3), torch.randn(3))
    traces = thunder.last_traces(jitted)
    imported, final = code_lines(traces[0]), code_lines(around(jitted, "dce")[1])
    assert len(final) < len(imported)
    assert count(final, "exp(") == 1 and count(final, "tanh(") == 0 and count(final, "ones(") == 0


def test_pass_seconds_cover_every_pass():
    jitted = check_program(lambda x: x.exp().exp(), torch.randn(2))
    stats = thunder.compile_stats(jitted)
    names = [t.name for t in thunder.last_traces(jitted)[1:]]
    assert list(stats.graphs[0]["pass_seconds"]) == names
    assert all(s >= 0 for s in stats.graphs[0]["pass_seconds"].values())
