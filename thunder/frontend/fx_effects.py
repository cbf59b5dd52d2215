"""What an FX node of a captured graph does besides computing its value: whether it writes into an argument
(an in-place method or operator, ``out=``, ``inplace=True``, or a write its schema does not declare) and whether it
draws random numbers. Told by the target's name and schema, or by running the call once on fake tensors
(``_probe``). The importer (fx_import) keeps such nodes where they are -- passes neither move nor remove them --
and lowers the writes it can express (fx_targets._write_lowering)."""
import inspect
import operator
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from thunder.frontend import branches


#: In-place operators (``x += y`` is ``operator.iadd(x, y)``) and the out-of-place operator each writes back.
_INPLACE_OPERATORS = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                      operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
                      operator.imod: operator.mod, operator.ipow: operator.pow, operator.iand: operator.and_,
                      operator.ior: operator.or_, operator.ixor: operator.xor}


# Opaque ops that may mutate an argument or draw random numbers: passes leave them in place.
_RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "poisson", "uniform", "exponential",
                 "cauchy", "geometric", "log_normal", "random", "seed")


_MUTATING_OPERATORS = branches._OPERATOR_INPLACE | {operator.setitem, operator.delitem}


def _has_effect(node, name):
    """Whether an opaque node may change something besides its result: it mutates an argument (in-place
    methods, ``out=``, ``inplace=True`` however passed, augmented assignment, an op whose schema writes to an
    argument, a torch function that dispatches such an op on one: F.embedding with ``max_norm``), draws random
    numbers, or returns nothing that is used -- a call made for what it does, not for its value
    (``torch._C._set_grad_enabled(False)``, ``torch._assert``)."""
    if _may_write(node, name) or (node.meta.get("example_value") is None and not node.users):
        return True
    return _draws_random(node, name.rsplit(".", 1)[-1])


def _may_write(node, name=None, probe=True):
    """Whether a call (named ``name``; default: its target's name) may write into a tensor: an in-place call (a
    method or function ending in ``_``, ``out=``, ``inplace=True``, an operator of augmented assignment or
    subscript assignment -- every write the importer lowers among them), an op whose schema, or (``probe``) run on
    fake tensors, writes an argument. Unlike _has_effect, not random draws or calls made for what they do besides
    writing (grad mode, asserts)."""
    short = (_target_name(node) if name is None else name).rsplit(".", 1)[-1]
    return ((node.op == "call_function" and node.target in _MUTATING_OPERATORS) or
            (short.endswith("_") and not short.endswith("__") and node.target not in branches._OPERATORS_NOT_IN_PLACE)
            or "out" in node.kwargs or _inplace_argument(node) or
            (node.op == "call_function" and _schema_writes(node.target)) or (probe and _probed(node)[1]))


def _draws_random(node, name):
    """Whether a call draws random numbers: its name says so (_RANDOM_WORDS), or, run once on fake tensors of its
    arguments' sizes, it dispatches an aten op tagged ``nondeterministic_seeded`` (``F.rrelu`` in training,
    ``F.gumbel_softmax``, ``torch._standard_gamma`` of a Gamma's ``rsample``); an aten op by its tags. A call
    that is not torch's, or cannot run so (a size known only at run time, an op fake tensors do not take), is
    judged by its name alone."""
    if any(word in name.lower() for word in _RANDOM_WORDS):
        return True
    if isinstance(node.target, torch._ops.OpOverload):
        return _seeded(node.target, node.args, node.kwargs)
    return _probed(node)[0]


def _seeded(op, args, kwargs):
    """Whether a call of the aten op ``op`` draws random numbers: it is tagged ``nondeterministic_seeded``, unless
    what it draws is a dropout its ``dropout_p`` argument, a constant 0, turns off (the fused attention kernels, which
    sent every training graph holding an opaque attention to torch's autograd)."""
    if torch.Tag.nondeterministic_seeded not in op.tags:
        return False
    for k, a in enumerate(op._schema.arguments):
        if a.name == "dropout_p":
            p = args[k] if k < len(args) else kwargs.get(a.name, a.default_value)
            return not (isinstance(p, (int, float)) and p == 0)
    return True


def _probed(node):
    """(whether it draws random numbers, whether it writes into an argument, whether it writes into one where its
    schema does not say so) of a call of torch's own, found by running it once on fake tensors (_probe; cached in
    node.meta); (False, False, False) for another call, or one that cannot run so. Only torch's own functions and
    tensor methods run: a function of the user's Dynamo put in the graph (allow_in_graph) may do things besides
    computing, which a second run would repeat."""
    from thunder.executors.torchex import defined_by_torch
    torchs = node.op == "call_method" and hasattr(torch.Tensor, node.target) or \
        node.op == "call_function" and defined_by_torch(node.target)
    if not torchs:
        return False, False, False
    if "thunder_probe" not in node.meta:
        try:
            node.meta["thunder_probe"] = _probe(node)
        except Exception:  # noqa: BLE001 -- anything the call raises on fake tensors: judged by its name
            node.meta["thunder_probe"] = (False, False, False)
    return node.meta["thunder_probe"]


#: aten ops that write into arguments their schemas do not mark as written: op -> the written tensors, from the
#: call's arguments. native_batch_norm (and cuDNN's and MIOpen's, which take the same arguments) in training
#: updates running_mean and running_var (F.batch_norm of a BatchNorm module in train mode, F.instance_norm with
#: running statistics).
_UNDECLARED_WRITES = {
    op: lambda args, kwargs: args[3:5] if args[5] else ()
    for op in (torch.ops.aten.native_batch_norm.default, torch.ops.aten.cudnn_batch_norm.default,
               torch.ops.aten.miopen_batch_norm.default)
}


class _DispatchProbe(TorchDispatchMode):
    """Records whether an aten op tagged ``nondeterministic_seeded`` (one that draws from a generator) ran, whether
    one wrote into one of ``inputs`` or a view of it (``embedding_renorm_`` of F.embedding's weight, with
    ``max_norm``), and whether one wrote into one without its schema saying so (_UNDECLARED_WRITES)."""

    def __init__(self, inputs):
        super().__init__()
        self.inputs, self.seeded, self.writes_input, self.writes_undeclared = inputs, False, False, False

    def _an_input(self, tensors):
        return any(isinstance(w, torch.Tensor) and torch._C._is_alias_of(w, i) for w in tensors for i in self.inputs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seeded = self.seeded or _seeded(func, args, kwargs or {})
        undeclared = _UNDECLARED_WRITES.get(func)
        if undeclared is not None and self._an_input(undeclared(args, kwargs or {})):
            self.writes_undeclared = True
        if not self.writes_input:
            kwargs = kwargs or {}
            for k, a in enumerate(func._schema.arguments):
                value = args[k] if k < len(args) else kwargs.get(a.name)
                written = value if isinstance(value, (list, tuple)) else [value]  # Tensor(a!)[]: a list
                if a.alias_info is not None and a.alias_info.is_write and self._an_input(written):
                    self.writes_input = True
        return func(*args, **(kwargs or {}))


def _probe(node):
    """Runs the call of ``node`` on fake tensors of its arguments' sizes (the hints of symbolic ones), strides and
    dtypes: (whether it dispatched an op that draws random numbers, whether one wrote into an argument, whether one
    wrote into an argument its schema does not mark as written)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fake(value):
        if isinstance(value, torch.Tensor):
            return torch.empty_strided([_hint(d) for d in value.shape], [_hint(d) for d in value.stride()],
                                       dtype=value.dtype, device=value.device, requires_grad=value.requires_grad)
        return _hint(value)

    def fake_argument(a):
        # (A node's example may hold symbolic sizes in a tuple -- ``h.size()[:-1] + (4, 2)`` -- each hinted: run with
        # Dynamo's symbols, the op would add guards to its shape environment, pinning them to this call's sizes.)
        value = a.meta["example_value"] if isinstance(a, torch.fx.Node) else a
        return torch.utils._pytree.tree_map(fake, value)

    with FakeTensorMode():
        args = torch.fx.node.map_aggregate(node.args, fake_argument)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, fake_argument)
        inputs = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        fn = node.target if node.op == "call_function" else getattr(args[0], node.target)
        args = args if node.op == "call_function" else args[1:]
        with _DispatchProbe(inputs) as probe, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user saw the op's warnings from their own call (or Dynamo's trace)
            fn(*args, **kwargs)
    return probe.seeded, probe.writes_input, probe.writes_undeclared


def _hint(d):
    """A size or number: its value in the example Dynamo traced (raises where it has none); anything else as it is."""
    if isinstance(d, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = d.node.hint
        if hint is None:
            raise ValueError(f"{d} has no example value")
        return hint
    return d


def _inplace_argument(node):
    """Whether the call passes ``inplace=True``, by keyword or by position (``F.leaky_relu(x, 0.1, True)``)."""
    if node.kwargs.get("inplace") is True:
        return True
    if node.op != "call_function" or not any(a is True for a in node.args):
        return False
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):  # no signature (a builtin), or the call does not bind: decide by the name
        return False
    return bound.arguments.get("inplace") is True


def _schema_writes(target):
    """Whether an aten or custom op (``torch.ops.aten.add_.Tensor``, a ``torch.library.custom_op`` with
    ``mutates_args``) writes to an argument, by its schema; for an overload packet, whether any overload does."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    if isinstance(target, torch._ops.OpOverloadPacket):
        return any(getattr(target, o)._schema.is_mutable for o in target.overloads())
    return False


def _is_tensor(a):
    """Whether an FX argument is a node whose value is a tensor."""
    return isinstance(a, torch.fx.Node) and isinstance(a.meta.get("example_value"), torch.Tensor)


def _target_name(node):
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__qualname__", None) or getattr(t, "__name__", repr(t))
