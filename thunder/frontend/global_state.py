"""Global-state calls Dynamo records inside a graph: grad mode, inference mode, autocast.

A ``with torch.no_grad():`` block in a captured function becomes two nodes,
``torch._C._set_grad_enabled(False)`` and ``torch._C._set_grad_enabled(True)``,
around the ops it encloses; ``torch.autocast`` and ``torch.inference_mode``
become an *enter* node, whose result is the context object, and an *exit* node
that takes it. These calls change how every later op runs (whether it records
autograd history, which dtype it computes in), so the importer makes them
effects: never removed, merged or moved, and barriers that no pass moves an op
across.

A trace has no values for Python objects, so an enter call's context object
cannot be a proxy. It is kept here instead, on a per-thread stack: a trace calls
``global_state.enter_autocast(...)`` and later ``global_state.exit_autocast()``,
which pops the object its enter pushed (a graph's enters and exits nest as the
``with`` blocks they come from). If the graph raises in between, :func:`restoring`
leaves the regions it entered and restores grad mode, as leaving a ``with`` block
by an exception does in eager.
"""
import threading

import torch
import torch.amp.autocast_mode
import torch.autograd.grad_mode

_local = threading.local()


def _stack():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _leave():
    exit_fn, context = _stack().pop()
    exit_fn(context)


def enter_autocast(*args):
    """``torch.amp.autocast_mode._enter_autocast(device_type, dtype, enabled, cache_enabled)``, keeping its mode."""
    _stack().append((torch.amp.autocast_mode._exit_autocast, torch.amp.autocast_mode._enter_autocast(*args)))


def exit_autocast():
    """Leaves the autocast region of the matching :func:`enter_autocast`."""
    _leave()


def enter_inference_mode(*args):
    """``torch.autograd.grad_mode._enter_inference_mode(mode)``, keeping its context."""
    _stack().append((torch.autograd.grad_mode._exit_inference_mode,
                     torch.autograd.grad_mode._enter_inference_mode(*args)))


def exit_inference_mode():
    """Leaves the inference-mode region of the matching :func:`enter_inference_mode`."""
    _leave()


def restoring(fn):
    """``fn`` (a compiled graph that sets global state), made to undo what it set if it raises: it leaves the
    autocast and inference-mode regions it entered, innermost first, and restores grad mode and forward-mode
    grad mode as they were when it was called. Eager does the same when an exception leaves ``with`` blocks."""
    def call(*args):
        stack = _stack()
        depth, grad, fwd_grad = len(stack), torch.is_grad_enabled(), torch._C._is_fwd_grad_enabled()
        try:
            return fn(*args)
        except BaseException:
            while len(stack) > depth:
                _leave()
            torch._C._set_grad_enabled(grad)
            torch._C._set_fwd_grad_enabled(fwd_grad)
            raise
    return call


#: FX targets that set global state, by the callee a trace prints for them ("global_state." names resolve to this
#: module in every trace's namespace). Exit calls drop their argument, the enter's context object.
CALLEES = {
    torch._C._set_grad_enabled: "torch._C._set_grad_enabled",
    torch._C._set_fwd_grad_enabled: "torch._C._set_fwd_grad_enabled",
    torch._C._set_deterministic_algorithms: "torch._C._set_deterministic_algorithms",
    torch.amp.autocast_mode._enter_autocast: "global_state.enter_autocast",
    torch.amp.autocast_mode._exit_autocast: "global_state.exit_autocast",
    torch.autograd.grad_mode._enter_inference_mode: "global_state.enter_inference_mode",
    torch.autograd.grad_mode._exit_inference_mode: "global_state.exit_inference_mode",
}
EXITS = tuple(target for target, callee in CALLEES.items() if callee.startswith("global_state.exit_"))
