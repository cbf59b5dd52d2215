"""The memory a captured graph's values share, told by Dynamo's (fake) example values: which nodes are views of
an argument or an input, which write through a view into another tensor, which outputs alias one another or an
input in eager, and how such a view is made again at run time from its base (``_replayer``). The importer
(fx_import) uses it to functionalize writes and to return outputs that alias as eager's do (OutputViews)."""
import contextlib
import operator

import torch

from thunder.frontend.fx_effects import _has_effect, _is_tensor, _may_write, _target_name
from thunder.frontend.fx_targets import _FUNCTIONS, _METHODS, _write_lowering


def _is_view(example):
    """Whether Dynamo's example value of a node is a view of another tensor."""
    return isinstance(example, torch.Tensor) and example._is_view()


def _views_an_argument(node):
    """Whether Dynamo's example value of a node is a view of one of its arguments' memory (``x.T``,
    ``x.diagonal()``); a view of memory the op made itself (``repeat_interleave`` returns a view of its own
    expanded copy) is a new value."""
    example = node.meta.get("example_value")
    return _is_view(example) and (_storage(example) is None or bool(_sharing(node, _meta_example)[2]))


def _memory_of(example):
    """The example tensor whose memory a (fake) example value uses: its base if it is a view, else itself."""
    return example._base if example._is_view() else example


def _expanded(node):
    """Whether Dynamo's example value of a node is expanded: elements of it share memory (a stride 0 over a size
    above 1, as ``x.expand(3, 2)`` has)."""
    return _expanded_example(node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None)


def _expanded_example(example):
    """Whether a (fake) example tensor is expanded (see _expanded)."""
    return isinstance(example, torch.Tensor) and any(
        isinstance(st, int) and st == 0 and not (isinstance(sz, int) and sz <= 1)
        for st, sz in zip(example.stride(), example.shape))


def _overlapping_source(node, destination):
    """The argument node of a write whose tensor shares memory with the written tensor other than element for
    element (``x[1:] = x[:-1]``, ``x.add_(x[0])``), by Dynamo's example values; None if there is none. Eager
    raises for such a write when the overlap is partial ("unsupported operation: some elements of the input
    tensor and the written-to tensor refer to a single memory location") and otherwise reads elements as it
    writes others; a functional write reads everything first. So such a write is not lowered: torch runs it."""
    example = destination.meta.get("example_value") if isinstance(destination, torch.fx.Node) else None
    if not isinstance(example, torch.Tensor):
        return None
    sources = list(node.args[1:]) + list(node.kwargs.values())
    if node.op == "call_function" and node.target is operator.setitem:
        sources = node.args[2:]
        try:
            example = example[node.args[1]]  # the region written
        except Exception:  # noqa: BLE001 -- a key the example cannot take: compare with the whole tensor
            pass
    elif isinstance(node.kwargs.get("out"), torch.fx.Node):
        sources = list(node.args) + [v for k, v in node.kwargs.items() if k != "out"]
    # An op that reads elements other than the one it writes (`a.addmm_(a, a)`, `a.index_copy_(0, i, a)`): eager
    # reads them as it writes, or raises; even where they are the same elements in the same layout.
    elementwise = _writes_elementwise(node)
    for source in _tensor_nodes(sources):
        if (source is not destination or not elementwise) and \
                _shares_memory_unevenly(example, source.meta["example_value"], same_elements=elementwise):
            return source
    return None


#: In-place ops that write each element from the elements at its own position only, though aten does not tag
#: them pointwise.
_ELEMENTWISE_UNTAGGED = frozenset({
    "copy_", "fill_", "zero_", "masked_fill_", "abs_", "copysign_", "heaviside_", "threshold_", "floor_divide_",
    "lt_", "le_", "gt_", "ge_", "eq_", "ne_", "where", "clamp", "clamp_", "clip_", "float_power_", "sgn_"})


def _writes_elementwise(node):
    """Whether the write ``node`` makes each element from the elements of its arguments at that element's position
    only (``x.add_(y)``, ``x[1:] = v``): an argument sharing the destination's elements in the same layout is then
    read before it is written. Not for `addmm_`, index and scatter ops, scans, ``out=`` of products and sorts:
    unknown ops count as not."""
    if node.op == "call_function" and node.target is operator.setitem:
        return not _has_tensor_index(node.args[1])
    if node.op == "call_function" and getattr(node.target, "__module__", None) == "_operator":
        return node.target is not operator.imatmul  # (x += y, x *= y, ...)
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if not isinstance(name, str):
        return False
    if name in _ELEMENTWISE_UNTAGGED:
        return True
    packet = getattr(torch.ops.aten, name, None)
    try:
        return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())
    except Exception:  # noqa: BLE001 -- not an aten op
        return False


def _has_tensor_index(key):
    """Whether a subscript's key (an FX argument) holds a tensor: advanced indexing."""
    if isinstance(key, torch.fx.Node):
        return _is_tensor(key)
    if isinstance(key, (list, tuple)):
        return any(_has_tensor_index(k) for k in key)
    return False


def _tensor_nodes(args):
    """The nodes among (nested) FX arguments whose values are tensors."""
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _tensor_nodes(a)
        elif _is_tensor(a):
            yield a


def _shares_memory_unevenly(a, b, same_elements=True):
    """Whether tensors a and b (example values) may share memory, other than as the same elements in the same
    layout (``same_elements`` False: in any way): their storages are one and the byte ranges they span meet."""
    try:
        if a.untyped_storage()._cdata != b.untyped_storage()._cdata:
            return False
    except Exception:  # noqa: BLE001 -- no storage to compare: assume the worst
        return True
    if a.numel() == 0 or b.numel() == 0:
        return False
    if same_elements and (a.storage_offset(), a.shape, a.stride(), a.dtype) == \
            (b.storage_offset(), b.shape, b.stride(), b.dtype):
        return False

    def span(t):
        begin = t.storage_offset() * t.element_size()
        return begin, begin + (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))) * t.element_size()

    (a_begin, a_end), (b_begin, b_end) = span(a), span(b)
    return a_begin < b_end and b_begin < a_end


def _aliases_an_argument(node):
    """Whether the node makes a tensor sharing its argument's memory that Dynamo's example value does not mark as a
    view: ``x.data``, ``x.view(dtype)``, and any op whose example shares an argument's memory without being that
    argument's tensor (``torch.ops.aten.view.dtype``, a custom op declared ``(Tensor(a) x) -> Tensor(a)``,
    ``unsafe_split``: their fake results are not marked as views)."""
    if node.op == "call_function" and node.target == torch._C._autograd._get_data_attr:
        return True
    is_view = (node.op == "call_method" and node.target == "view") or (
        node.op == "call_function" and node.target is torch.Tensor.view)
    if is_view and (any(isinstance(a, torch.dtype) for a in node.args[1:]) or "dtype" in node.kwargs):
        return True
    results = node.meta.get("example_value")
    results = results if isinstance(results, (tuple, list)) else [results]  # unsafe_split's views
    arguments = [(a, _storage(_meta_example(a))) for a in _argument_nodes((node.args, node.kwargs))]
    made = [(r, _storage(r)) for r in results if isinstance(r, torch.Tensor)]
    return any(memory is not None and mine is not None and memory == mine and _meta_example(a) is not r
               for r, mine in made for a, memory in arguments)


def _sharing_users(node):
    """The nodes that use ``node``'s tensor or one sharing its memory (users sharing it, followed), ``node``'s
    included, and whether the graph returns one of them."""
    memory = _storage(node.meta.get("example_value"))
    seen, todo, returned = {node}, [node], False
    while todo:
        for user in todo.pop().users:
            returned |= user.op == "output"
            example = user.meta.get("example_value") if user.op != "output" else None
            shared = [_storage(e) for e in (example if isinstance(example, (tuple, list)) else [example])]
            if user not in seen and memory is not None and any(m is not None and m == memory for m in shared):
                seen.add(user)
                todo.append(user)
    return seen, returned


def _viewed_memory(view):
    """The memory (_storage) an opaque op that may return a view views: its first argument's; None where it is not
    known (a dropout that may return its input whatever its first argument, an argument without storage)."""
    if not view.args or not isinstance(view.args[0], torch.fx.Node) or _aliasing_decided_at_run_time(view):
        return None
    return _storage(view.args[0].meta.get("example_value"))


def _returned(node):
    """Whether the graph returns ``node``'s tensor or a view of it."""
    return _sharing_users(node)[1]


def _used_through_data(placeholders):
    """The positions of the tensor placeholders whose every use is ``x.data``, one of them written through."""
    return [i for i, (n, e) in enumerate(placeholders) if isinstance(e, torch.Tensor) and n.users and
            all(u.target is torch._C._autograd._get_data_attr for u in n.users) and
            any(_written_through(u) for u in n.users)]


def _written_through(node):
    """Whether a node of the graph writes through ``node``'s tensor or a view of it (``x.data.mul_(2)``), also by a
    write whose result shares no memory with it (``x.data[idx] = v``: setitem returns None)."""
    sharing = _sharing_users(node)[0]

    def destinations(n):
        out = n.kwargs.get("out")
        return [n, *n.args[:1], *(out if isinstance(out, (tuple, list)) else [out])]

    return any(n.op in ("call_function", "call_method") and _may_write(n) and
               any(isinstance(d, torch.fx.Node) and d in sharing for d in destinations(n))
               for n in sharing.union(*(s.users for s in sharing)))


def _aliasing_decided_at_run_time(node):
    """Whether an opaque op may return its input itself at run time though Dynamo's example value is a new tensor
    (unlike dynamo._may_return_its_input, which reads ATen's schema for a native op's name):
    dropout (ATen's ``_dropout_impl`` returns the input when not training, for p = 0 or an empty input) whose p or
    training flag is symbolic, or called as ``torch.ops.aten.dropout``, ``feature_dropout``, ``alpha_dropout``...
    (an imported dropout with constant arguments is native, an alias exactly then: functionalization's torch_views)."""
    words = [w for w in str(_target_name(node)).replace("::", ".").split(".") if "dropout" in w]
    return bool(words) and not any(w.endswith("_") for w in words)  # dropout_: in place, an effect returning x


def _assigns_region_to_itself(node):
    """Whether a node is ``x[key] = x[key]`` of a view ``x[key]`` (basic indexing), with which ``x[key] += v`` ends
    after the in-place op on the region ``x[key]``: the elements are written onto themselves. (Run as an opaque
    write, thunder's ``x[key]`` may be ``x`` itself where the key takes everything, and torch then finds the source
    and the destination overlap in part, which eager's same-strided view does not.)"""
    if node.op != "call_function" or node.target is not operator.setitem or len(node.args) != 3:
        return False
    value = node.args[2]
    while isinstance(value, torch.fx.Node) and _returned_argument(value) is not None:
        value = _returned_argument(value)
    if not (isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target is operator.getitem
            and value.args[0] is node.args[0] and _is_view(value.meta.get("example_value"))):
        return False  # (an index tensor's getitem is a copy: x[i] += 1 writes)
    try:
        return bool(value.args[1] == node.args[1])
    except Exception:  # noqa: BLE001 -- a key that does not compare as a whole
        return False


def _returned_argument(node):
    """The argument node whose tensor the node returns itself (Dynamo's example values are the same object: an
    in-place op's ``self``, ``x.float()`` of a float32 x), or None."""
    example = node.meta.get("example_value")
    if not isinstance(example, torch.Tensor) or node.op not in ("call_function", "call_method"):
        return None
    return next((a for a in node.args if isinstance(a, torch.fx.Node) and a.meta.get("example_value") is example),
                None)


def _is_contiguous_call(node):
    """Whether an FX node calls ``contiguous`` (``x.contiguous()``, ``torch.Tensor.contiguous(x)``)."""
    return _target_name(node).rsplit(".", 1)[-1] == "contiguous"


def _layout_dependent(node, argument):
    """Whether eager returns ``argument`` itself from ``node`` (``contiguous()`` of a tensor contiguous in eager)
    because of strides thunder's value may not have (_laid_out_other_than_eager)."""
    return _is_contiguous_call(node) and _laid_out_other_than_eager(argument)


def _laid_out_other_than_eager(argument):
    """Whether thunder's value of the FX node ``argument`` may have strides eager's has not: it is a view of a value
    eager lays out other than contiguously (``(x * 2).t()`` of a transposed ``x``), which thunder's kernels write
    contiguous. Followed back through the views to the value they view: a graph input (its strides are the guarded
    ones), an earlier ``contiguous()`` or a computed value contiguous in eager (thunder's is contiguous too, so the
    same views give the same strides) are safe."""
    while argument.op != "placeholder" and not _is_contiguous_call(argument):
        _, _, sharing, _ = _sharing(argument, _meta_example)
        if not sharing:  # a computed value
            example = argument.meta.get("example_value")
            return not (isinstance(example, torch.Tensor) and example.is_contiguous())
        argument = sharing[0]
    return False


def _storage(example):
    """What identifies the memory a (fake) tensor lives in: views of one tensor share it; None for a non-tensor."""
    if not isinstance(example, torch.Tensor):
        return None
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        return StorageWeakRef(example.untyped_storage())
    except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
        return None


def _storages(examples):
    """The set of the memories (_storage) of ``examples`` that have one. (StorageWeakRef's == reads the other's
    cdata: a set holding None could compare one with it.)"""
    return {m for m in map(_storage, examples) if m is not None}


class _NotReplayable(Exception):
    pass


def _argument_nodes(args):
    """Every node among (nested) FX arguments, tensors and numbers alike."""
    nodes = []
    torch.fx.node.map_arg(args, nodes.append)
    return nodes


def _meta_example(node):
    """Dynamo's example value of a node (``_sharing``'s ``example_of`` where no other values stand for them)."""
    return node.meta.get("example_value")


def _sharing(node, example_of):
    """(call, index, sharing, arguments): the call that makes ``node``'s value -- the node itself, or for one result
    of a multi-output view op (``split``, ``unbind``) that op, with the result's index -- its tensor arguments,
    and those of them whose memory the value shares."""
    call, pick = node, None
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and \
            isinstance(example_of(node.args[0]), (tuple, list)):
        call, pick = node.args[0], node.args[1]
    memory = _storage(example_of(node))
    args = list(dict.fromkeys(_argument_nodes((call.args, call.kwargs))))
    # Only tensors share memory (a number's placeholder, a SymFloat, has none: StorageWeakRef cannot compare to it).
    stored = [(a, _storage(example_of(a))) for a in args] if memory is not None else []
    return call, pick, [a for a, m in stored if m is not None and m == memory], args


def _view_root(node, example_of):
    """The node that makes the memory ``node``'s value is a view of (or the value itself: an in-place op or
    ``x.contiguous()`` returns its argument): followed back through the arguments that share memory with it."""
    while node.op in ("call_function", "call_method"):
        _, _, sharing, _ = _sharing(node, example_of)
        if not sharing:
            break
        same = [a for a in sharing if example_of(a) is example_of(node)]
        node = (same or sharing)[0]
    return node


def _replayer(node, root, inputs, example_of):
    """``replay(base, args)``: ``node``'s value made again at run time from ``base``, the value of ``root`` (the node
    that makes the memory it views), by the view ops that made it in the graph; ``args`` are the graph's inputs
    (the other arguments of a view op, ``x.reshape_as(y)``, may be inputs). _NotReplayable if that cannot be done,
    among others for a detached view that requires grad (Dynamo's example value, after the graph ran): a write
    made it so (``t = y.detach(); t.add_(a)``), which eager records on it; a replayed detach has no history."""
    while True:
        if node is root:
            return lambda base, args: base
        if node in inputs:
            k = inputs[node]
            return lambda base, args: args[k]
        if node.op not in ("call_function", "call_method"):
            raise _NotReplayable(f"{node.name} is a {node.op}")
        call, pick, sharing, args = _sharing(node, example_of)
        same = [a for a in sharing if example_of(a) is example_of(node)]
        if not same or pick is not None:
            break
        node = same[0]  # returns its argument (an in-place op): the argument's value
    if not sharing:
        raise _NotReplayable(f"{_target_name(node)} ({node.name}) makes the memory another output views")
    name = _METHODS.get(call.target) if call.op == "call_method" else _FUNCTIONS.get(call.target)
    if name == "detach" and getattr(example_of(call), "requires_grad", False):
        raise _NotReplayable(f"{call.name}, a detached view, is written with a value that requires grad")
    if _write_lowering(call) is not None or _has_effect(call, _target_name(call)):
        raise _NotReplayable(f"{_target_name(call)} ({call.name}) writes or has effects")
    others = [a for a in args if a not in sharing and a not in inputs]
    if others:
        raise _NotReplayable(f"{_target_name(call)} ({call.name}) reads {others[0].name}, a value the graph computes")
    parts = {a: _replayer(a, root, inputs, example_of) for a in args}
    target, op = call.target, call.op
    # A view made with grad mode off of a tensor that requires grad: it requires grad but has no history (eager
    # does not connect it to its base), so it is made again with grad mode off too.
    example = example_of(call)
    unrecorded = isinstance(example, torch.Tensor) and example._is_view() and example.requires_grad and \
        example.grad_fn is None

    def replay(base, args):
        values = {a: part(base, args) for a, part in parts.items()}
        call_args = torch.fx.node.map_arg(call.args, values.__getitem__)
        call_kwargs = torch.fx.node.map_arg(call.kwargs, values.__getitem__)
        with torch.no_grad() if unrecorded else contextlib.nullcontext():
            if op == "call_method":
                out = getattr(call_args[0], target)(*call_args[1:], **call_kwargs)
            else:
                out = target(*call_args, **call_kwargs)
        return out if pick is None else out[pick]
    return replay


def _view_of_intermediate(node, inputs, example_of):
    """(root, replay) where ``node``, an output, is a view that requires grad of a tensor the graph computes and
    returns in no other output (``return (x * w)[1:]``), or None (also where the view cannot be made again). The
    program returns the base and the view is made again after the call, as eager's: an output of an
    autograd.Function that is a view made inside it may not be written in place ("Output 0 of _TrainingProgram is
    a view and is being modified inplace"), where eager's view of an intermediate may."""
    example = example_of(node)
    if not getattr(example, "requires_grad", False):
        return None
    root = _view_root(node, example_of)
    if root is node or root in inputs or example_of(root) is example or _laid_out_other_than_eager(root):
        return None  # (a base eager lays out otherwise, `(x.t() * w.t()).t().view(-1)`: thunder's is contiguous)
    try:
        return root, _replayer(node, root, inputs, example_of)
    except _NotReplayable:
        return None


def _input_itself(node):
    """The node whose tensor ``node``'s is, following ops that return their argument itself (``x.float()`` of a
    float32 ``x``, in-place ops: _returned_argument)."""
    while isinstance(node, torch.fx.Node) and node.op in ("call_function", "call_method"):
        same = _returned_argument(node)
        if same is None:
            break
        node = same
    return node


def _fresh_outputs(outputs, placeholders):
    """The positions of the outputs that are tensors sharing no memory with any input in eager."""
    examples = dict(placeholders)
    input_storages = {_storage(e) for e in examples.values()} - {None}
    return [i for i, node in enumerate(outputs) if isinstance(node, torch.fx.Node) and node not in examples and
            isinstance(node.meta.get("example_value"), torch.Tensor) and
            _storage(node.meta["example_value"]) not in input_storages and not _from_possible_alias(node)]


def _from_possible_alias(node):
    """Whether a node's tensor is, or is a view of, or was written in place through, the result of an op that may
    return its input at run time (_aliasing_decided_at_run_time): its example value's memory is new, eager's may
    not be."""
    while isinstance(node, torch.fx.Node) and node.op in ("call_function", "call_method"):
        if _aliasing_decided_at_run_time(node):
            return True
        example = node.meta.get("example_value")
        node = _returned_argument(node) or (node.args[0] if _is_view(example) and node.args else None)
    return False
