"""Hugging Face transformers GPT-2 and Llama (small configs, random weights):
logits and every parameter's gradient agree with eager within 1e-5 relative to
scale, in float32."""
import pytest
import torch

import thunder
from conftest import PRIMS_ONLY, check_program
from thunder.testing import compare_lm, hf_gpt2, hf_llama

pytest.importorskip("transformers")

TOLERANCE = 1e-5


@pytest.mark.parametrize("build", [hf_gpt2, hf_llama], ids=["gpt2", "llama"])
def test_logits_and_gradients_match_eager(build):
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 128, (2, 16))
    logits_err, grad_errs, jitted = compare_lm(model, thunder.jit, ids)
    assert logits_err <= TOLERANCE, f"logits relative error {logits_err:.2e}"
    assert len(grad_errs) == len(list(model.parameters())), "every parameter should get a gradient"
    worst = max(grad_errs, key=grad_errs.get)
    assert grad_errs[worst] <= TOLERANCE, f"gradient of {worst}: relative error {grad_errs[worst]:.2e}"

    stats = thunder.compile_stats(jitted)
    assert stats.graphs and all(g["compiled"] for g in stats.graphs), thunder.summary(jitted)
    report = thunder.summary(jitted)
    assert "executors" in report
    # The model's attention, norms and MLP ran as native ops: the imported trace holds torch-level ops.
    imported = "\n".join(str(thunder.last_traces(jitted, i)[0]) for i in range(len(stats.graphs)))
    for op in ("ltorch.linear(", "ltorch.scaled_dot_product_attention(", "ltorch.cross_entropy("):
        assert op in imported, op


def test_llama_uses_grouped_query_attention_natively():
    torch.manual_seed(0)
    model = hf_llama()
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    ids = torch.randint(0, 128, (1, 8))
    jitted = thunder.jit(model)
    with torch.no_grad():
        out = jitted(ids).logits
        expected = model(ids).logits
    scale = expected.abs().max().item()
    assert (out - expected).abs().max().item() / scale <= TOLERANCE
    traces = [str(g.traces[0]) for g in jitted._thunder_state.graphs if hasattr(g, "traces")]
    assert any("ltorch.scaled_dot_product_attention(" in t for t in traces), "attention fell back to opaque"
    for g in jitted._thunder_state.graphs:
        for node, target, reason in getattr(g, "fallbacks", []):
            assert "scaled_dot_product_attention" not in node, reason


@pytest.mark.parametrize("executors", [None, [PRIMS_ONLY]], ids=["default", "prims_only"])
@pytest.mark.parametrize("build", [hf_gpt2, hf_llama], ids=["gpt2", "llama"])
def test_every_trace_of_the_models_round_trips(build, executors):
    """The models' traces (every pass, every graph) print as programs that reproduce the graph; with only prims,
    the decompositions of the models' ops match eager."""
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 128, (2, 16))
    check_program(model, ids, executors=executors, labels=ids, use_cache=False, rtol=1e-5, atol=1e-5)


def test_the_twelve_layers_of_gpt2_jitted_one_by_one_all_compile():
    """Every jitted layer compiles its own copy of the block's forward: Dynamo's limits are per wrapper, not per
    class (layers 9-12 used to run eagerly)."""
    torch.manual_seed(0)
    model = hf_gpt2(n_layer=12, n_embd=32)
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        expected = model(ids).logits
        for i, block in enumerate(model.transformer.h):
            model.transformer.h[i] = thunder.jit(block)
        out = model(ids).logits
    assert (out - expected).abs().max().item() / expected.abs().max().item() <= TOLERANCE
    for i, layer in enumerate(model.transformer.h):
        stats = thunder.compile_stats(layer)
        assert stats.graphs and all(g["compiled"] for g in stats.graphs), f"layer {i}: {layer}"
        assert (stats.eager_calls, stats.dynamo_stopped) == (0, ""), f"layer {i}: {layer}"


def test_a_model_whose_forward_transformers_decorates_runs_through_thunder_jit():
    """transformers 5 decorates BertModel.forward (defaults merged from the config, outputs captured): the branch
    rewrite took the inner function and dropped the wrappers, so thunder.jit(model)(ids) raised "missing 8
    required positional arguments"."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        expected = model(ids).last_hidden_state
        actual = thunder.jit(model)(ids).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_a_model_with_gradient_checkpointing_enabled_compiles_and_matches_eager():
    # transformers' gradient checkpointing calls requires_grad_() on the input embeddings' output (a forward hook):
    # every graph ran uncompiled, taken for a torch.func transform.
    torch.manual_seed(0)
    model = hf_llama()
    model.gradient_checkpointing_enable()
    model.train()
    logits_err, grad_errs, jitted = compare_lm(model, thunder.jit, torch.randint(0, 128, (2, 16)))
    assert logits_err <= TOLERANCE and max(grad_errs.values()) <= TOLERANCE
    stats = thunder.compile_stats(jitted)
    assert stats.graphs and all(g["compiled"] and g["backward"] == "thunder" for g in stats.graphs), stats.graphs
