"""Hugging Face GPT-2, Llama, BERT and ViT from small configs (random weights, no download) trained for 3 optimizer
steps through thunder and eagerly from the same weights: the loss of every step and every parameter's gradient
agree within 1e-5 relative to scale (float32), and thunder's autodiff differentiates every graph."""
import copy

import pytest
import torch

import thunder
from thunder.testing import hf_gpt2, hf_llama

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
STEPS = 3


def relative_error(actual, expected, floor=0.0):
    """max |a - e| / max |e|, the scale at least ``floor``: a gradient that is zero in exact arithmetic (the key
    projection's bias: softmax ignores a per-row constant) comes out as rounding noise (1e-12) in both."""
    return (actual - expected).abs().max().item() / max(expected.abs().max().item(), floor)


def bert():
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    return BertForMaskedLM(cfg)


def vit():
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    return ViTForImageClassification(cfg)


def text_batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, 128, (2, 16), generator=g)
    return (ids,), {"labels": ids}


def image_batch(step):
    g = torch.Generator().manual_seed(step)
    return (torch.randn(2, 3, 16, 16, generator=g),), {"labels": torch.randint(0, 10, (2,), generator=g)}


MODELS = {"gpt2": (hf_gpt2, text_batch), "llama": (hf_llama, text_batch), "bert": (bert, text_batch),
          "vit": (vit, image_batch)}


@pytest.mark.parametrize("name", list(MODELS))
def test_three_optimizer_steps_match_eager(name):
    build, batch = MODELS[name]
    torch.manual_seed(0)
    model = build().train()
    for m in model.modules():  # dropout draws different masks in eager and thunder: without it, equal losses
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    # SGD: Adam's update divides by the root of its second moment, which turns last-bit differences of tiny
    # gradients into visible differences of the weights.
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, reference)]
    for step in range(STEPS):
        args, kwargs = batch(step)
        losses = []
        for m, opt in zip((jitted, reference), optimizers):
            opt.zero_grad(set_to_none=True)
            loss = m(*args, **kwargs).loss
            loss.backward()
            losses.append(loss.detach())
        assert relative_error(losses[0], losses[1]) <= TOLERANCE, (step, losses)
        # Gradients are compared relative to their own scale, or a thousandth of the largest one, if larger.
        floor = 1e-3 * max(q.grad.abs().max().item() for q in reference.parameters() if q.grad is not None)
        for (pname, p), q in zip(model.named_parameters(), reference.parameters()):
            if q.grad is None:
                assert p.grad is None or not p.grad.any(), (step, pname)
                continue
            assert p.grad is not None, (step, pname)
            assert relative_error(p.grad, q.grad, floor) <= TOLERANCE, (step, pname)
        for opt in optimizers:
            opt.step()
    stats = thunder.compile_stats(jitted)
    assert stats.graphs and all(g["backward"] == "thunder" for g in stats.graphs), \
        [(g["index"], g["backward"]) for g in stats.graphs]
