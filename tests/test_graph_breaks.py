"""Graph breaks: data-dependent Python control flow splits the program; the
break is reported (reason and the user's source line) and results still equal
eager."""
import inspect

import pytest
import torch
import torch.nn as nn

import thunder
from conftest import assert_same, check_program


def branchy(x):
    y = x * 2
    if x.sum() > 0:
        return y + 1  # an early return (code follows the `if`): thunder.jit does not convert this branch
    y = y - 1
    return y


BRANCH_LINE = inspect.getsource(branchy).splitlines()[2].strip()  # "if x.sum() > 0:"


def test_data_dependent_if_breaks_the_graph_and_is_reported():
    jitted = thunder.jit(branchy)
    pos, neg = torch.ones(3), -torch.ones(3)
    assert_same(jitted(pos), branchy(pos))
    assert_same(jitted(neg), branchy(neg))
    stats = thunder.compile_stats(jitted)
    assert len(stats.graph_breaks) >= 1
    report = thunder.summary(jitted)
    assert "graph breaks (1):" in report
    assert BRANCH_LINE in report
    assert __file__.rsplit("/", 1)[-1] in report
    line = next(l for l in report.splitlines() if BRANCH_LINE in l and ":" in l)
    # The reason follows the location.
    assert "data-dependent" in line.lower() or "branch" in line.lower(), line
    br = stats.graph_breaks[0]
    assert br.reason and br.location.endswith(str(inspect.getsourcelines(branchy)[1] + 2))


def test_graph_break_pieces_are_compiled_by_thunder():
    jitted = thunder.jit(branchy)
    jitted(torch.ones(3))
    jitted(-torch.ones(3))
    stats = thunder.compile_stats(jitted)
    # Before the branch, and each side of it.
    assert len(stats.graphs) == 3 and all(g["compiled"] for g in stats.graphs)
    # Both sides of the branch are each called once, the prefix twice.
    assert sorted(g["calls"] for g in stats.graphs) == [1, 1, 2]
    # Calling again with the same inputs hits the caches.
    jitted(torch.ones(3))
    assert thunder.compile_stats(jitted).cache_hits == 1


def test_loop_branch_results_and_gradients_equal_eager():
    """The seed's loop: its branch is converted to a select (tests/test_branches.py), so no graph breaks."""
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    xe = x.detach().clone().requires_grad_()

    def loop(x):
        y = torch.zeros((), dtype=x.dtype)
        for i in range(x.shape[0]):
            if x[i] > 0:
                y = y + x[i] * x[i]
            else:
                y = y - x[i]
        return y

    jitted = thunder.jit(loop)
    out, expected = jitted(x), loop(xe)
    assert_same(out, expected)
    out.backward()
    expected.backward()
    assert_same(x.grad, xe.grad)
    stats = thunder.compile_stats(jitted)
    assert not stats.graph_breaks and stats.branches_converted == 1


def test_graph_break_inside_a_loop_results_and_gradients_equal_eager():
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    xe = x.detach().clone().requires_grad_()

    def loop(x):
        y = torch.zeros((), dtype=x.dtype)
        for i in range(x.shape[0]):
            if x[i] > 0:
                y = y + x[i] * x[i]
                continue  # not converted: a graph break, as before
            y = y - x[i]
        return y

    jitted = thunder.jit(loop)
    out, expected = jitted(x), loop(xe)
    assert_same(out, expected)
    out.backward()
    expected.backward()
    assert_same(x.grad, xe.grad)
    stats = thunder.compile_stats(jitted)
    assert stats.graph_breaks and stats.branches_left == 1 and "continue" in stats.branches[0].reason


def test_item_and_print_inside_a_module():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            if h.mean().item() > 0.0:
                h = torch.relu(h)
            return h * 2

    torch.manual_seed(0)
    m = M()
    jitted = thunder.jit(m)
    for _ in range(3):
        x = torch.randn(2, 4)
        assert_same(jitted(x), m(x))
    report = thunder.summary(jitted)
    assert "graph breaks (" in report and "h.mean().item()" in report


def test_program_without_breaks_reports_none():
    jitted = check_program(lambda x: x.cos() * 2, torch.randn(3))
    assert "graph breaks: none" in thunder.summary(jitted)
    assert thunder.compile_stats(jitted).graph_breaks == []


def test_every_piece_of_a_broken_program_round_trips():
    for x in (torch.randn(4).abs(), -torch.randn(4).abs()):
        jitted = check_program(branchy, x)
        assert len(thunder.compile_stats(jitted).graphs) == 2


def test_transformers_once_logging_is_left_out_not_a_graph_break(caplog):
    # Dynamo cannot trace logging.Logger methods; transformers' once-per-process helpers are left out of the traced
    # code (thunder/frontend/skipped_logging.py), and thunder says so at INFO.
    import logging

    transformers_logging = pytest.importorskip("transformers.utils.logging")
    from thunder.frontend import skipped_logging

    warn = transformers_logging.get_logger("thunder.tests.once")

    class Warns(nn.Module):
        def forward(self, x):
            y = x.sin()
            warn.warning_once("thunder test: configured without a loss type")
            return y * 2

    model = Warns()
    jitted = thunder.jit(model)
    x = torch.randn(4)
    skipped_logging._said.clear()
    with caplog.at_level(logging.INFO, logger="thunder"):
        assert_same(jitted(x), model(x))
    stats = thunder.compile_stats(jitted)
    assert stats.graph_breaks == [] and len(stats.graphs) == 1 and stats.graphs[0]["compiled"], stats
    assert "logging.Logger.warning_once (transformers') is left out of the traced code" in caplog.text
    assert not any(isinstance(e, skipped_logging._Skipped) for e in torch._dynamo.config.ignore_logging_functions)
