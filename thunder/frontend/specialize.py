"""Graphs with symbolic shapes: their shape signatures, and the per-shape re-trace where no symbolic trace exists.

With ``dynamic=None`` (static first, dynamic once a dimension changes) or ``dynamic=True``, Dynamo hands the
backend a graph whose sizes are symbols (``torch.SymInt``): its inputs include the sizes (``s0``), tensors have
symbolic shapes, and size arithmetic is in the graph (``x.size(1) * 2``). Dynamo's guards decide which calls the
graph serves. thunder imports such a graph once with symbolic sizes (``fx_import.import_graph(...,
symbolic=True)``), runs the passes on it once, and lowers it per concrete *shape signature* (:func:`signature`:
every tensor argument's shape and strides, every number argument's value) with the sizes bound. Where that import
is impossible (a size that is not a polynomial in the size inputs, ``s0 // 2``), :func:`specialize` makes a static
copy of the graph for each signature instead: it propagates metadata for the concrete arguments and replaces every
symbolic number in it by its value.
"""
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

_SYMBOLIC_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _is_symbolic(value) -> bool:
    if isinstance(value, _SYMBOLIC_NUMBERS):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    if isinstance(value, (list, tuple)):
        return any(_is_symbolic(v) for v in value)
    return False


def has_symbolic_shapes(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether Dynamo captured gm with symbolic sizes: a symbolic number among its inputs, an input tensor with a
    symbolic size or stride, or a value computed with a symbolic size (``x[: int(a)]`` of a float ``a`` Dynamo
    passes as a 0-d tensor, ``x[: n.item()]``: static inputs, a size read at run time)."""
    examples = [n.meta.get("example_value") for n in gm.graph.nodes if n.op != "output"]
    return any(_is_symbolic(v) for v in (*examples, *example_inputs))


def free_inputs(gm: torch.fx.GraphModule) -> list:
    """The positions of gm's inputs whose sizes are symbols: size inputs, and tensors with a symbolic size or
    stride. Dynamo's guards fix everything else of every input (dtypes, devices, the other tensors' shapes)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(placeholders) if _is_symbolic(n.meta.get("example_value"))]


def sizing_values(gm: torch.fx.GraphModule) -> list:
    """The positions of gm's inputs whose value, read with ``.item()``, a size of the graph is computed from
    (``x[: int(a)]``, ``torch.arange(a)`` of a float ``a`` Dynamo passes as a 0-d tensor): a specialization fixes
    that size, so their values join the signature. An integer read this way counts even where only arithmetic
    reads it (an unbacked ``SymInt`` is a size to Dynamo)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    read = {}  # symbol of a value read with .item() -> the input it was read from
    for position, n in enumerate(placeholders):
        for user in n.users:
            value = user.meta.get("example_value")
            if user.op == "call_method" and user.target == "item" and isinstance(value, _SYMBOLIC_NUMBERS):
                read.update(dict.fromkeys(value.node.expr.free_symbols, position))
    if not read:
        return []
    sizing = set()
    for n in gm.graph.nodes:
        for value in torch.utils._pytree.tree_leaves(n.meta.get("example_value")):
            if isinstance(value, torch.SymInt):
                sizes = [value]
            elif isinstance(value, torch.Tensor):
                sizes = [d for d in (*value.shape, *value.stride(), value.storage_offset()) if isinstance(d, torch.SymInt)]
            else:
                continue
            sizing.update(read[sym] for d in sizes for sym in d.node.expr.free_symbols if sym in read)
    return sorted(sizing)


def signature(args, free, sizing=()) -> tuple:
    """The key of the specialization that serves ``args``: the shape and strides of each tensor, and the value of
    each number, at the positions ``free`` (:func:`free_inputs`); the value of each 0-d tensor at the positions
    ``sizing`` (:func:`sizing_values`)."""
    key = tuple((a.shape, a.stride()) if isinstance(a, torch.Tensor) else a for a in map(args.__getitem__, free))
    return key + tuple(args[i].item() for i in sizing) if sizing else key


def describe(gm: torch.fx.GraphModule, args) -> str:
    """The sizes of a specialization, as printed: the value of each size input Dynamo made ("s0=5, s1=4", the
    names the graph's code uses); the shapes of the tensors with symbolic sizes if it made none."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sizes = [f"{n.name}={a}" for n, a in zip(placeholders, args) if isinstance(n.meta.get("example_value"), torch.SymInt)]
    if sizes:
        return ", ".join(sizes)
    return ", ".join(f"{n.name}: {tuple(a.shape)}" for n, a in zip(placeholders, args)
                     if isinstance(a, torch.Tensor) and _is_symbolic(n.meta.get("example_value")))


class _Propagate(torch.fx.Interpreter):
    """Runs the graph on fake tensors of the concrete arguments, recording each node's value as its
    ``example_value`` (what the importer reads). A number read from an input tensor (``scale.item()``: Dynamo
    passes a float that changed between calls as a 0-d tensor) takes its value from the real argument, and it
    and the numbers computed from it are ``data``: values of this call, not of its shapes."""

    def __init__(self, gm, items):
        super().__init__(gm)
        self.items = items  # input node -> its argument's .item(), for the inputs the graph calls .item() on
        self.data = set()

    def run_node(self, n):
        if n.op == "call_method" and n.target == "item" and n.args and n.args[0] in self.items:
            value = self.items[n.args[0]]
        else:
            value = super().run_node(n)
        reads = n.all_input_nodes
        if n.op == "call_method" and n.target == "item" or any(r in self.data for r in reads):
            self.data.add(n)
        n.meta["example_value"] = value
        return value


def _has_effect(node):
    """Whether a node's call changes state besides returning its value (``torch.vmap``'s
    ``_vmap_increment_nesting(s0, ...)`` returns the new level as an int): kept even where nothing reads it."""
    module = getattr(node.target, "__module__", None) or ""
    return node.op == "call_function" and (node.is_impure() or module.startswith(("torch._functorch",
                                                                                    "torch._C._functorch")))


def _literal(value):
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    return value


def specialize(gm: torch.fx.GraphModule, args) -> torch.fx.GraphModule:
    """A copy of gm for these concrete arguments: every node's ``example_value`` is recomputed from them (on fake
    tensors, so nothing runs), and every node that computes a number from sizes (a size, or arithmetic on sizes)
    is replaced by its value in the nodes that read it; numbers read from tensors stay computed at run time.
    Number inputs stay inputs (the calling convention is gm's) and are read by nothing. gm is left unchanged.

    Args:
        gm: a graph Dynamo captured with symbolic sizes.
        args: the values of its inputs for one call: tensors and Python numbers.
    Returns:
        A GraphModule with gm's inputs and outputs whose metadata are static.
    Raises:
        Whatever running gm's ops on fake tensors raises (the caller runs gm as captured instead).
    """
    graph = torch.fx.Graph()
    copies = {}
    out = graph.graph_copy(gm.graph, copies)
    graph.output(out)
    copy = torch.fx.GraphModule(gm, graph)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]
    items = {n: a.item() for n, a in zip(copy.graph.find_nodes(op="placeholder"), args)
             if any(u.op == "call_method" and u.target == "item" for u in n.users)}
    propagate = _Propagate(copy, items)
    # Ops that set grad mode or autocast run here too: whatever they set is undone on the way out.
    with mode, torch.autograd.grad_mode.set_grad_enabled(torch.is_grad_enabled()):
        propagate.run(*fake)
    for node in list(copy.graph.nodes):
        value = node.meta.get("example_value")
        if node.op in ("output", "get_attr") or node in propagate.data or _has_effect(node) or \
                not isinstance(value, (int, float, bool, *_SYMBOLIC_NUMBERS)):
            continue
        literal = _literal(value)
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda n: literal if n is node else n)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: literal if n is node else n)
        if node.op != "placeholder" and not node.users:
            copy.graph.erase_node(node)
    copy.recompile()
    return copy
