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


def check_as_accurate_as_eager(steps, grad_dtype):
    """``steps``: {"thunder" | "eager" | "f32": (module, run)}, ``run()`` one forward (returning the loss) of that
    module. The thunder step's loss and gradients must be as close to the float32 step's as eager's are; each
    gradient of dtype ``grad_dtype``. Returns nothing; asserts."""
    losses = {}
    for key, (_, run) in steps.items():
        loss = run()
        loss.backward()
        losses[key] = loss.float().item()
    assert abs(losses["thunder"] - losses["f32"]) <= 2 * abs(losses["eager"] - losses["f32"]) + 1e-2 * abs(losses["f32"])
    model, eager, f32 = (steps[k][0] for k in ("thunder", "eager", "f32"))
    floor = 1e-3 * max(q.grad.abs().max().item() for q in f32.parameters())
    errors = {"thunder": [], "eager": []}
    for (pname, p), e, r in zip(model.named_parameters(), eager.parameters(), f32.parameters()):
        assert p.grad is not None and p.grad.dtype == grad_dtype, pname
        errors["thunder"].append(relative_error(p.grad.float(), r.grad, floor))
        errors["eager"].append(relative_error(e.grad.float(), r.grad, floor))
        assert errors["thunder"][-1] <= 3 * errors["eager"][-1] + 2e-2, (pname, errors["thunder"][-1], errors["eager"][-1])
    mean = {k: sum(v) / len(v) for k, v in errors.items()}
    assert mean["thunder"] <= 1.5 * mean["eager"] + 1e-2, mean


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_bfloat16_step_is_as_accurate_as_eager(name):
    """A bfloat16 training step of GPT-2 and Llama, differentiated by thunder (half-precision graphs are no longer
    held back for torch's autograd), against float32: its loss and gradients are as close to those of float32
    (the same weights, upcast) as eager's bfloat16 step is. bfloat16 gradients are themselves noisy (GPT-2's: up
    to about 90% of their scale, eager's and thunder's alike), so each is compared with eager's error."""
    build, batch = MODELS[name]
    torch.manual_seed(0)
    model = build().train().to(torch.bfloat16)
    eager, f32 = copy.deepcopy(model), copy.deepcopy(model).float()
    jitted = thunder.jit(model)
    args, kwargs = batch(0)
    check_as_accurate_as_eager({key: (module, lambda call=call: call(*args, **kwargs).loss) for key, module, call in
                                (("thunder", model, jitted), ("eager", eager, eager), ("f32", f32, f32))},
                               torch.bfloat16)
    stats = thunder.compile_stats(jitted)
    assert stats.graphs and all(g["backward"] == "thunder" for g in stats.graphs), \
        [(g["index"], g["backward"]) for g in stats.graphs]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_step_under_autocast_is_differentiated_by_thunder(name):
    """float32 GPT-2 and Llama called inside `with torch.autocast("cpu", dtype=torch.bfloat16)`: the ops are written
    as autocast's casts (Llama's rotary embedding turns autocast off inside the region; the few opaque ops run under
    the region's state) and thunder differentiates every graph. Loss and gradients are as close to a float32 step's
    as eager's autocast step is (bfloat16 gradients are noisy: see the test above)."""
    build, batch = MODELS[name]
    torch.manual_seed(0)
    model = build().train()
    eager, f32 = copy.deepcopy(model), copy.deepcopy(model)
    jitted = thunder.jit(model)
    args, kwargs = batch(0)

    def under_autocast(call):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return call(*args, **kwargs).loss
    check_as_accurate_as_eager({"thunder": (model, lambda: under_autocast(jitted)),
                                "eager": (eager, lambda: under_autocast(eager)),
                                "f32": (f32, lambda: f32(*args, **kwargs).loss)}, torch.float32)
    stats = thunder.compile_stats(jitted)
    assert stats.graphs and all(g["backward"] == "thunder" for g in stats.graphs), \
        [(g["index"], g["backward"]) for g in stats.graphs]


def test_an_output_written_over_a_viewed_product_can_be_modified_in_place():
    # The forward's last kernel writes over (x @ w).view(...): the program's output is not a view, so the user may
    # modify it in place before backward, as in eager -- also in the next graph, after a graph break.
    def f(x, w):
        return (x @ w).view(2, 4, 12) * 2 + 1

    def g(x, w):
        h = torch.tanh(x).view(2, 4, 16) + (x @ w).view(2, 4, 16)
        print("a graph break")
        h += 1
        return h.sum()

    for fn, width in ((f, 12), (g, 16)):
        x = torch.randn(8, 16)
        w = torch.randn(16, width, requires_grad=True)
        w_eager = w.detach().clone().requires_grad_()
        y, e = thunder.jit(fn)(x, w), fn(x, w_eager)
        if y.dim():
            assert not y._is_view()
            y.mul_(3)
            e.mul_(3)
        y.sum().backward()
        e.sum().backward()
        torch.testing.assert_close(w.grad, w_eager.grad)
