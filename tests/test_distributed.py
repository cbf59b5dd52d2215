"""Jitted modules under DDP and FSDP2 (``fully_shard``): 2 processes on localhost with the gloo backend, 3 training
steps each, gradients and parameters equal to a single-process eager reference.

Both run in one spawn (starting processes and importing torch is most of the time), each rank saving what it saw;
the tests compare it with the reference.
"""
import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import thunder

WORLD = 2
STEPS = 3
BATCH = 4  # per rank


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 4))


def _data(step):
    """The whole batch of one step (every rank's part): inputs and targets."""
    generator = torch.Generator().manual_seed(100 + step)
    return torch.randn(WORLD * BATCH, 8, generator=generator), torch.randn(WORLD * BATCH, 4, generator=generator)


def _train(model, rank, world, full_grad):
    """STEPS steps of SGD on this rank's part of each batch; returns (per step the gradients by parameter name,
    the parameters after the last step). ``full_grad`` turns a (sharded) gradient or parameter into a full tensor."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for step in range(STEPS):
        x, y = _data(step)
        part = slice(rank * BATCH, (rank + 1) * BATCH) if world > 1 else slice(None)
        loss = nn.functional.mse_loss(model(x[part]), y[part])
        loss.backward()
        grads.append({_name(n): full_grad(p.grad).detach().clone() for n, p in model.named_parameters()})
        optimizer.step()
        optimizer.zero_grad()
    return grads, {_name(n): full_grad(p).detach().clone() for n, p in model.named_parameters()}


def _name(parameter_name):
    return parameter_name.removeprefix("module.")  # DDP's


def _worker(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from torch.distributed.fsdp import fully_shard
        from torch.nn.parallel import DistributedDataParallel

        torch.set_num_threads(1)
        results = {}
        ddp = DistributedDataParallel(thunder.jit(_model()))
        results["ddp"] = _train(ddp, rank, world, lambda t: t)
        results["ddp_compiled"] = len(thunder.compile_stats(ddp.module).graphs)

        model = _model()
        for i in (0, 2, 4):  # each linear layer jitted, then sharded: fully_shard(thunder.jit(layer))
            model[i] = fully_shard(thunder.jit(model[i]))
        fully_shard(model)
        results["fsdp2"] = _train(model, rank, world, lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t)
        results["fsdp2_compiled"] = sum(len(thunder.compile_stats(model[i]).graphs) for i in (0, 2, 4))
        results["fsdp2_class"] = type(model[0]).__name__
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """What each of the 2 ranks saw, and the eager single-process reference."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out_dir = str(tmp_path_factory.mktemp("distributed"))
    mp.spawn(_worker, args=(WORLD, _free_port(), out_dir), nprocs=WORLD, join=True)
    saved = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(WORLD)]
    reference = _train(copy.deepcopy(_model()), 0, 1, lambda t: t)
    return saved, reference


def _assert_matches(name, saved, reference):
    ref_grads, ref_params = reference
    for rank, results in enumerate(saved):
        grads, params = results[name]
        for step in range(STEPS):
            for n, g in ref_grads[step].items():
                torch.testing.assert_close(grads[step][n], g, rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"{name} rank {rank} step {step} grad {n}: {m}")
        for n, p in ref_params.items():
            torch.testing.assert_close(params[n], p, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{name} rank {rank} param {n}: {m}")


def test_ddp_of_a_jitted_module_trains_like_eager(ranks):
    saved, reference = ranks
    _assert_matches("ddp", saved, reference)
    assert all(r["ddp_compiled"] >= 1 for r in saved), "thunder compiled the module's graph"


def test_fully_shard_of_jitted_layers_trains_like_eager(ranks):
    saved, reference = ranks
    _assert_matches("fsdp2", saved, reference)
    assert all(r["fsdp2_compiled"] >= 3 for r in saved), "thunder compiled each layer's graph"
    assert all(r["fsdp2_class"] == "FSDPThunderModule" for r in saved)  # the wrapper's class changed, not the layer's
