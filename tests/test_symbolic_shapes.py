"""Graphs Dynamo captures with symbolic sizes (dynamic=None after a dimension changes, dynamic=True) are compiled,
one specialization per shape signature (thunder/frontend/specialize.py), never declined: serving over many lengths
and generation with a growing KV cache compile a handful of Dynamo graphs, with results equal to eager's."""
import pytest
import torch
from torch import nn

import thunder
from conftest import assert_same


def scaled_rows(x, y):
    z = x.sin() * 2 + y
    return z.view(x.shape[0], -1).sum(-1) / x.shape[1]  # size arithmetic in the graph: x.shape[0], x.shape[1]


def test_every_length_compiles_in_at_most_three_dynamo_graphs():
    jitted = thunder.jit(scaled_rows)
    for n in range(1, 25):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        assert_same(jitted(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(jitted)
    assert stats.dynamo_graphs <= 3 and stats.symbolic_graphs == 1, stats
    assert all(g["compiled"] for g in stats.graphs) and stats.eager_calls == 0
    specialized = [g for g in stats.graphs if g["symbolic"] is not None]
    assert specialized and all(g["shapes"] for g in specialized)
    assert "; symbolic graph 1 at shapes " in thunder.summary(jitted)


def test_a_shape_seen_again_is_a_cache_hit():
    jitted = thunder.jit(lambda x: x.exp() + 1, dynamic=True)
    for n in (3, 5, 3, 5):
        x = torch.randn(n)
        assert_same(jitted(x), x.exp() + 1)
    stats = thunder.compile_stats(jitted)
    assert (stats.dynamo_graphs, stats.symbolic_graphs, len(stats.graphs)) == (1, 1, 2)
    assert (stats.cache_misses, stats.cache_hits) == (2, 2)


def test_torch_compile_dynamic_true_is_compiled_not_declined():
    compiled = torch.compile(scaled_rows, backend="thunder", dynamic=True)
    for n in (2, 6, 9):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        assert_same(compiled(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(compiled)
    assert stats.symbolic_graphs == 1 and len(stats.graphs) == 3 and all(g["compiled"] for g in stats.graphs)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(8), nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.norm(x))) + x


def test_training_over_changing_batch_sizes_matches_eager_gradients():
    torch.manual_seed(0)
    model, reference = Block(), Block()
    reference.load_state_dict(model.state_dict())
    jitted = thunder.jit(model)
    for n in (2, 3, 5, 7):
        x = torch.randn(n, 8)
        jitted(x).square().mean().backward()
        reference(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    stats = thunder.compile_stats(jitted)
    assert stats.symbolic_graphs == 1 and all(g["backward"] == "thunder" for g in stats.graphs), stats.graphs


def test_greedy_generate_with_a_growing_kv_cache_compiles_a_few_graphs():
    pytest.importorskip("transformers")
    from thunder.testing import hf_gpt2

    torch.manual_seed(0)
    model = hf_gpt2()
    ids = torch.randint(1, 100, (1, 5))
    new = 10
    options = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(ids, **options)
        model.forward = thunder.jit(model.forward)
        tokens = model.generate(ids, **options)
    assert torch.equal(tokens, expected)
    stats = thunder.compile_stats(model.forward)
    assert stats.dynamo_graphs <= 4 and stats.calls == new and stats.eager_calls == 0, stats
    assert all(g["compiled"] for g in stats.graphs)
