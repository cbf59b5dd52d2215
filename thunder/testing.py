"""Helpers shared by the tests, the main job and the benchmarks: small real
models with random weights, and comparisons against eager PyTorch."""
import copy

import torch


def tolerance(dtype):
    """(rtol, atol) for comparing a compiled result with eager, by dtype."""
    return {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float32: (1.3e-6, 1e-5),
            torch.float64: (1e-7, 1e-7)}.get(dtype, (0, 0))


def hf_gpt2(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, **config):
    """A Hugging Face GPT-2 LM with random weights (no download), in eval mode; ``config`` sets other fields of its
    GPT2Config (``resid_pdrop=0.1``, ...)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab_size, n_positions=n_positions,
                     bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM", **config)
    return GPT2LMHeadModel(cfg).eval()


def hf_llama(layers=2, hidden=64, heads=4, kv_heads=2, vocab_size=128, intermediate=128):
    """A Hugging Face Llama LM with random weights (no download), grouped-query attention, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      hidden_size=hidden, intermediate_size=intermediate, vocab_size=vocab_size,
                      max_position_embeddings=64, bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM")
    return LlamaForCausalLM(cfg).eval()


def max_relative_error(actual, expected):
    """max |a - e| / max(|e|): the error relative to the tensor's scale."""
    scale = expected.abs().max().item() or 1.0
    return (actual - expected).abs().max().item() / scale


def compare_lm(model, jit, input_ids, atol=1e-5):
    """Runs a causal LM eagerly and through ``jit`` (forward and backward of the LM loss).

    Returns (logits error, {parameter name: gradient error}), errors relative to
    scale; the caller decides what to accept (the issue asks for <= ``atol``).
    """
    reference = copy.deepcopy(model)
    compiled = jit(model)
    out = compiled(input_ids, labels=input_ids)
    expected = reference(input_ids, labels=input_ids)
    out.loss.backward()
    expected.loss.backward()
    grads = {}
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        if q.grad is None:
            continue
        grads[name] = float("inf") if p.grad is None else max_relative_error(p.grad, q.grad)
    return max_relative_error(out.logits, expected.logits), grads, compiled
