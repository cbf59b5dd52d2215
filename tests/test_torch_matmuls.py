"""The torch executor's float32 CPU matmuls (prims.matmul, ltorch.linear, ltorch.addmm) go through oneDNN where
torch's BLAS is slower (thunder/executors/torchex.py says when): same results as torch's within float32
rounding, in every operand layout the training steps use, and torch's own ops wherever autograd records."""
import pytest
import torch

from thunder.executors import torchex
from thunder.executors.torchex import ltorch, prims

# The tests install the oneDNN product themselves: the executor uses it only on CPUs with AVX-512.
_ONEDNN = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
pytestmark = pytest.mark.skipif(_ONEDNN is None, reason="torch without oneDNN")


@pytest.fixture
def onednn(monkeypatch):
    """The executor's oneDNN product, installed whatever this CPU has; the list of its calls."""
    calls = []
    monkeypatch.setattr(torchex, "_ONEDNN_LINEAR", lambda *args: calls.append(1) or _ONEDNN.default(*args))
    monkeypatch.setattr(torchex, "_onednn_shapes", set())
    return calls


def _close(out, expected):
    scale = expected.abs().max().item()
    assert out.shape == expected.shape and out.dtype == expected.dtype
    assert (out - expected).abs().max().item() <= 1e-5 * scale


def _layouts(rows, cols):
    """The matrix as row-major, column-major (a transposed view) and a row-major slice with an offset."""
    wide = torch.randn(rows, cols + 3)
    return [torch.randn(rows, cols), torch.randn(cols, rows).mT, wide[:, 3:]]


@pytest.mark.parametrize("a_layout", range(3))
@pytest.mark.parametrize("b_layout", range(3))
def test_matmul_in_every_layout(onednn, a_layout, b_layout):
    calls = onednn
    a, b = _layouts(192, 128)[a_layout], _layouts(128, 160)[b_layout]
    _close(prims.matmul(a, b), torch.matmul(a.double(), b.double()).float())
    dense = {0, 1}
    assert len(calls) == (a_layout in dense and b_layout in dense)  # a strided slice is left to torch


def test_batched_rows_linear_and_addmm(onednn):
    x, w, bias = torch.randn(8, 64, 256), torch.randn(688, 256), torch.randn(688)
    _close(prims.matmul(x, w.mT), torch.matmul(x, w.mT))
    _close(ltorch.linear(x, w), torch.nn.functional.linear(x, w))
    _close(ltorch.linear(x, w, bias), torch.nn.functional.linear(x, w, bias))
    m, k = torch.randn(512, 256), torch.randn(256, 768)
    b = torch.randn(768)
    _close(ltorch.addmm(b, m, k), torch.addmm(b, m, k))
    # Scaled or with a matrix for input: torch's addmm.
    _close(ltorch.addmm(b, m, k, beta=0.5, alpha=2), torch.addmm(b, m, k, beta=0.5, alpha=2))
    full = torch.randn(512, 768)
    _close(ltorch.addmm(full, m, k), torch.addmm(full, m, k))
    assert len(onednn) == 4  # the batched rows' product, both linears and the bias-vector addmm


@pytest.mark.parametrize("case", ["small", "vector", "float64", "recording", "batched_b", "empty"])
def test_left_to_torch(monkeypatch, case):
    monkeypatch.setattr(torchex, "_ONEDNN_LINEAR", lambda *args: pytest.fail("should have run torch's matmul"))
    a, b = torch.randn(512, 256), torch.randn(256, 768)
    if case == "small":
        a, b = torch.randn(64, 64), torch.randn(64, 64)
    elif case == "vector":
        a = torch.randn(1, 256)
    elif case == "float64":
        a, b = a.double(), b.double()
    elif case == "recording":
        b.requires_grad_()
    elif case == "batched_b":
        a, b = torch.randn(4, 128, 256), torch.randn(4, 256, 768)
    elif case == "empty":
        a, b = torch.randn(512, 0), torch.randn(0, 768)
    out = prims.matmul(a, b)
    if out.numel():
        _close(out, torch.matmul(a, b))
    if case == "recording":  # the product stays differentiable by torch's autograd (create_graph reruns)
        out.sum().backward()
        assert b.grad is not None


def test_onednn_serves_a_bounded_number_of_shapes(onednn, monkeypatch):
    """oneDNN keeps a primitive per product shape (0.65-0.9 MB each): a graph with symbolic sizes called at 200
    lengths made a 2-layer GPT-2 grow by ~2.5 MB a length. The first _ONEDNN_MAX_SHAPES shapes take oneDNN, later
    ones torch's product; the shapes it took keep taking it."""
    monkeypatch.setattr(torchex, "_ONEDNN_MAX_SHAPES", 3)
    w = torch.randn(384, 128)
    for rows in (100, 200, 300, 400, 500, 100, 300):
        x = torch.randn(rows, 128)
        _close(ltorch.linear(x, w), torch.nn.functional.linear(x, w))
    assert len(onednn) == 5  # 100, 200, 300, then 100 and 300 again; 400 and 500 went to torch
    assert torchex._onednn_shapes == {(100, 128, 384), (200, 128, 384), (300, 128, 384)}
