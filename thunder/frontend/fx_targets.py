"""Which FX call targets are native ops, and how their arguments map to the op's parameters: the importer's
tables (``_FUNCTIONS``: callable -> ltorch op name, ``_METHODS``: Tensor method -> op name, ``_ADAPTERS``: (kind,
op) -> an adapter rewriting the call's arguments), the spellings of an op other than ``torch.<name>``,
``F.<name>`` or ``torch.special.<name>`` (methods taking *varargs, aliases, creation ops' keyword arguments that do
not change the result), and how an in-place write is computed out of place (``_write_lowering``)."""
import inspect
import operator

import torch
import torch.nn.functional as F

from thunder import _core
from thunder.core import dtypes
from thunder.frontend.fx_effects import _INPLACE_OPERATORS, _RANDOM_WORDS, _inplace_argument, _is_tensor


def _is_size(a):
    """Whether an imported argument is one size: an int, or a symbolic one (a _core.Dim)."""
    return isinstance(a, (int, _core.Dim)) and not isinstance(a, bool)


def _pack_varargs(args, kwargs):
    """x.view(2, 3) -> x.view((2, 3)): methods that take a shape as *args (x.reshape(n) with a symbolic n too)."""
    if len(args) > 2 or (len(args) == 2 and _is_size(args[1])):
        return [args[0], tuple(args[1:])], kwargs
    return list(args), kwargs


def _view_dtype(args, kwargs):
    """The dtype of ``x.view(dtype)`` (a reinterpreting view), or None for ``x.view(shape)``."""
    if len(args) == 2 and isinstance(args[1], _core.DType) and not kwargs:
        return args[1]
    if len(args) == 1 and set(kwargs) == {"dtype"}:
        return kwargs["dtype"]
    return None


def _view_adapter(args, kwargs):
    """x.view(2, 3) -> ltorch.view(x, (2, 3)); x.view(x.dtype) -> ltorch.view_as(x, x), which the functionalization
    takes as a view of x (as eager's, it shares x's memory). A view as another dtype is not native."""
    dtype = _view_dtype(args, kwargs)
    if dtype is None:
        return _pack_varargs(args, kwargs)
    if dtype != args[0].dtype_hint:
        raise _core.NotNative("a view as another dtype")
    return "view_as", [args[0], args[0]], {}


def _pack_size(args, kwargs):
    """torch.zeros(2, 3) -> torch.zeros((2, 3))."""
    if args and all(_is_size(a) for a in args):
        return [tuple(args)], kwargs
    return list(args), kwargs


def _where_method(args, kwargs):
    """x.where(condition, other) -> where(condition, x, other): the method's tensor is the one chosen where the
    condition holds, not the condition (the op's first argument)."""
    args, kwargs = list(args), dict(kwargs)
    condition = args[1] if len(args) > 1 else kwargs.pop("condition")
    other = args[2] if len(args) > 2 else kwargs.pop("other")
    return [condition, args[0], other], kwargs


def _drop_stacklevel(args, kwargs):
    """F.softmax(x, dim, _stacklevel, dtype): the third parameter is not the dtype."""
    kwargs = {k: v for k, v in kwargs.items() if k != "_stacklevel"}
    args = list(args)
    if len(args) >= 3:
        if len(args) == 4:
            kwargs["dtype"] = args[3]
        args = args[:2]
    return args, kwargs


def _to_dtype_only(args, kwargs):
    """x.to(dtype) and x.to(device, dtype) with the tensor's own device -> ltorch.to(x, dtype)."""
    x, rest = args[0], list(args[1:])
    kwargs = dict(kwargs)
    for k, default in (("non_blocking", False), ("copy", False)):
        if kwargs.get(k, default) != default:
            raise _core.NotNative(f"to with {k}")
        kwargs.pop(k, None)
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    for a in rest:
        if isinstance(a, _core.DType):
            dtype = a
        elif isinstance(a, (str, torch.device)):
            device = a
        else:
            raise _core.NotNative("to with a tensor or memory_format argument")
    if kwargs:
        raise _core.NotNative(f"to with {sorted(kwargs)}")
    if device is not None and dtypes.device_str(device) != x.device_hint:
        raise _core.NotNative("to another device")
    return [x, dtype if dtype is not None else x.dtype_hint], {}


class _TensorArg:
    """A tensor proxy in an argument list, with the device Dynamo recorded (used by adapters)."""

    def __init__(self, proxy, dtype, device):
        self.proxy, self.dtype_hint, self.device_hint = proxy, dtype, device


def _write_lowering(node):
    """For a node that writes a tensor in place: (the destination FX node, compute), where
    ``compute(importer, dst_proxy)`` emits the out-of-place computation and returns (write target, value);
    None for any other node."""
    args, kwargs = list(node.args), dict(node.kwargs)
    target = node.target
    if node.op == "call_method" and isinstance(node.target, str):
        name = node.target
        if not name.endswith("_") or name.endswith("__") or not args:
            return None
        base = name[:-1]
        if base in ("copy", "fill", "zero"):
            keyword = {"copy": "src", "fill": "value"}.get(base)
            if base == "zero":
                value = 0
            elif len(args) > 1:
                value = args[1]
            elif keyword in kwargs:
                value = kwargs[keyword]
            else:
                return None
            if set(kwargs) - {keyword, "non_blocking"} or kwargs.get("non_blocking"):
                return None
            return args[0], lambda imp, dst: (dst, imp._unwrap(imp._arg(value)))
        native = _METHODS.get(base)
        if native is None or any(w in base for w in _RANDOM_WORDS):
            return None
        return args[0], _castable(lambda imp, dst: (dst, imp._native_value("method", base, native, args, kwargs)))
    elif node.op != "call_function":
        return None
    if target is operator.setitem and len(args) == 3:
        return args[0], lambda imp, dst: imp._setitem(args[0], dst, args[1], args[2])
    if target in _INPLACE_OPERATORS and args and _is_tensor(args[0]):
        native = _FUNCTIONS.get(_INPLACE_OPERATORS[target])
        if native is None:
            return None
        return args[0], _castable(lambda imp, dst: (dst, imp._native_value("function", native, native, args, kwargs)))
    native = _FUNCTIONS.get(target)
    if native is None:
        name = getattr(target, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and getattr(torch, name, None) is target and args:
            base = _FUNCTIONS.get(getattr(torch, name[:-1], None))
            if base is None or any(w in base for w in _RANDOM_WORDS):
                return None
            return args[0], _castable(lambda imp, dst: (dst, imp._native_value("function", base, base, args, kwargs)))
        return None
    if isinstance(kwargs.get("out"), torch.fx.Node):
        out = kwargs.pop("out")
        return out, _castable(lambda imp, dst: (dst, imp._native_value("function", native, native, args, kwargs)))
    if _inplace_argument(node) and args:
        kwargs.pop("inplace", None)
        trimmed = args
        try:
            bound = inspect.signature(target).bind(*args, **dict(node.kwargs))
            if "inplace" in bound.arguments:
                bound.arguments["inplace"] = False
                trimmed, kwargs = list(bound.args), dict(bound.kwargs)
        except (TypeError, ValueError):
            return None
        return args[0], lambda imp, dst: (dst, imp._native_value("function", native, native, trimmed, kwargs))
    return None


def _castable(compute):
    """A write's ``compute`` that also checks that the op's result dtype can be written into the destination's by
    torch's rule (``torch.can_cast``: no float into an integer, no complex into a real, nothing but bool into a
    bool): eager raises "result type Float can't be cast to the desired output type Long" for ``int_x.mul_(2.5)``,
    ``int_x *= 2.5`` or ``out=`` an int tensor, and Dynamo's fake tensors do not all check it. Raises NotNative
    (the write is left to torch, which raises) where it cannot."""
    def checked(imp, dst):
        target, value = compute(imp, dst)
        if isinstance(value, _core.Proxy):
            have, want = imp.builder.meta(value)[0], imp.builder.meta(dst)[0]
            if "number" not in (have, want) and not torch.can_cast(dtypes.to_torch(have), dtypes.to_torch(want)):
                raise _core.NotNative(f"result type {have} cannot be cast to the written tensor's {want}")
        return target, value
    return checked




def _literal_text(v):
    return v.text if isinstance(v, _core.Literal) else None


# Keyword arguments whose default value changes nothing about a result's values, dtype or shape.
_HARMLESS = {"layout": ("torch.strided",), "pin_memory": (False,), "requires_grad": (False,),
             "memory_format": ("torch.preserve_format", "torch.contiguous_format"), "out": (None,),
             "non_blocking": (False,)}


def _strip_harmless(kwargs, keep=()):
    out = {}
    for k, v in kwargs.items():
        if k in _HARMLESS and k not in keep:
            text = _literal_text(v)
            if (text if text is not None else v) in _HARMLESS[k] or v is None:
                continue
            raise _core.NotNative(f"{k}={text or v!r}")
        out[k] = v
    return out


def _creation(pack_from):
    """torch.empty(2, 3, dtype=...) / x.new_zeros(2, 3): size given as *varargs from position pack_from."""
    def adapt(args, kwargs):
        args = list(args)
        rest = args[pack_from:]
        if len(rest) > 1 or (len(rest) == 1 and isinstance(rest[0], int)):
            args = args[:pack_from] + [tuple(rest)]
        return args, _strip_harmless(kwargs)
    return adapt


def _like(args, kwargs):
    return list(args), _strip_harmless(kwargs)


def _pack_all(args, kwargs):
    """torch.broadcast_tensors(a, b) -> broadcast_tensors([a, b])."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return [list(args[0])], kwargs
    return [list(args)], kwargs


def _atleast(args, kwargs):
    if len(args) > 1:
        return [tuple(args)], kwargs
    return list(args), kwargs


def _cast_method(dtype):
    def adapt(args, kwargs):
        if len(args) != 1:
            raise _core.NotNative("cast method with positional arguments")
        _strip_harmless(kwargs)
        from thunder.core import dtypes
        return [args[0], dtypes.to_core(dtype)], {}
    return adapt


def _max_min(name):
    """torch.max(x) -> max; torch.max(x, other) -> maximum; torch.max(x, dim[, keepdim]) -> max_dim."""
    def adapt(args, kwargs):
        if len(args) == 1 and not kwargs:
            return name, [args[0]], {}
        if len(args) == 2 and not kwargs and isinstance(args[1], _TensorArg):
            return ("maximum" if name == "max" else "minimum"), list(args), {}
        if len(args) >= 2 or "dim" in kwargs:
            return f"{name}_dim", list(args), dict(kwargs)
        raise _core.NotNative(f"{name} with these arguments")
    return adapt


def _unbiased_positional(args, kwargs):
    """torch.var(x, True) / torch.var(x, dims, True, keepdim): a bool in the dim slot is `unbiased`."""
    args = list(args)
    if len(args) >= 2 and isinstance(args[1], bool):
        kwargs = dict(kwargs, unbiased=args[1])
        args = [args[0]] + args[2:]
    return args, kwargs


def _scatter_value(args, kwargs):
    """torch.scatter(x, dim, index, 2.5): a number in the `src` slot (a constant, or one known at run time) is the
    `value` overload."""
    args, kwargs = list(args), dict(kwargs)
    if len(args) >= 4 and not isinstance(args[3], _TensorArg):
        kwargs["value"] = args.pop(3)
    elif "src" in kwargs and not isinstance(kwargs["src"], _TensorArg):
        kwargs["value"] = kwargs.pop("src")
    return args, kwargs


def _out_none(args, kwargs):
    return list(args), _strip_harmless(kwargs)


def extend(functions, methods, adapters, native):
    """Adds the spellings of the newer ltorch ops to fx_import's tables (functions: callable -> op name,
    methods: method name -> op name, adapters: (kind, name or method) -> argument adapter)."""
    extra_functions = {
        torch._C._nn.log_sigmoid: "log_sigmoid", F.logsigmoid: "log_sigmoid",
        torch.linalg.vector_norm: "vector_norm", torch._C._nn.pad: "pad", torch.swapaxes: "transpose", torch.swapdims: "transpose",
        torch.moveaxis: "movedim", torch.special.ndtr: "ndtr", torch.special.entr: "entr",
        torch.special.xlog1py: "xlog1py", torch.special.xlogy: "xlogy", torch.special.logit: "logit",
        torch.special.sinc: "sinc", torch.special.logsumexp: "logsumexp", torch.special.softmax: "softmax",
        torch.special.log_softmax: "log_softmax", torch.special.round: "round", torch.special.exp2: "exp2",
        torch.special.expm1: "expm1", torch.special.erf: "erf", torch.special.erfc: "erfc",
        torch.special.erfinv: "erfinv", torch.special.digamma: "digamma", torch.special.psi: "digamma",
        torch.special.gammaln: "lgamma", torch.special.log1p: "log1p",
        torch.absolute: "abs", torch.negative: "neg", torch.arccos: "acos", torch.arcsin: "asin",
        torch.arctan: "atan", torch.arccosh: "acosh", torch.arcsinh: "asinh", torch.arctanh: "atanh",
        torch.arctan2: "atan2", torch.fix: "trunc", torch.multiply: "mul", torch.subtract: "sub",
        torch.divide: "div", torch.greater: "gt", torch.greater_equal: "ge", torch.less: "lt",
        torch.less_equal: "le", torch.not_equal: "ne", torch.row_stack: "vstack",
    }
    for fn, name in extra_functions.items():
        if name in native:
            functions[fn] = name
    for meth, name in {"swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim",
                       "absolute": "abs", "negative": "neg", "arccos": "acos", "arcsin": "asin", "arctan": "atan",
                       "arccosh": "acosh", "arcsinh": "asinh", "arctanh": "atanh", "arctan2": "atan2",
                       "fix": "trunc", "multiply": "mul", "subtract": "sub", "divide": "div", "greater": "gt",
                       "greater_equal": "ge", "less": "lt", "less_equal": "le", "not_equal": "ne",
                       "type_as": "type_as", "view_as": "view_as", "reshape_as": "reshape_as",
                       "expand_as": "expand_as", "repeat": "repeat", "new_zeros": "new_zeros",
                       "new_ones": "new_ones", "new_empty": "new_empty", "new_full": "new_full"}.items():
        if name in native:
            methods[meth] = name
    for m in ("flip", "repeat", "tile"):
        adapters[("method", m)] = _pack_varargs
    for name in ("empty",):
        adapters[("function", name)] = _creation(0)
    for m in ("new_zeros", "new_ones", "new_empty"):
        adapters[("method", m)] = _creation(1)
    adapters[("method", "new_full")] = _like
    for name in ("empty_like", "zeros_like", "ones_like", "full_like", "full", "zeros", "ones", "eye", "linspace",
                 "logspace", "scalar_tensor", "arange"):
        if ("function", name) in adapters:
            inner = adapters[("function", name)]
            adapters[("function", name)] = lambda a, k, inner=inner: inner(*_like(a, k))
        else:
            adapters[("function", name)] = _like
    adapters[("function", "broadcast_tensors")] = _pack_all
    for n in ("atleast_1d", "atleast_2d", "atleast_3d"):
        adapters[("function", n)] = _atleast
    adapters[("function", "softmin")] = _drop_stacklevel
    for name in ("var", "std", "var_mean", "std_mean"):
        adapters[("function", name)] = adapters[("method", name)] = _unbiased_positional
    for name in ("normalize", "clone"):
        adapters[("function", name)] = _out_none
    adapters[("function", "scatter")] = adapters[("method", "scatter")] = _scatter_value
    for method, dtype in (("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
                          ("bfloat16", torch.bfloat16), ("int", torch.int32), ("long", torch.int64),
                          ("bool", torch.bool)):
        adapters[("method", method)] = _cast_method(dtype)
    for name in ("max", "min"):
        adapters[("function", name)] = adapters[("method", name)] = _max_min(name)


def _build_tables():
    from thunder.executors.torchex import defined_by_torch
    native = set(_core.native_ops("ltorch"))
    functions, methods = {}, {}
    for name in native:
        for module in (torch, F, torch.special):
            fn = getattr(module, name, None)
            # An F function replaced before thunder's import (a wrapper) is not the op: Dynamo records a wrapper of a
            # Python F function it lists as in-graph as one call, which runs opaque (torchex.torch_functional).
            if callable(fn) and (module is not F or defined_by_torch(fn)):
                functions[fn] = name
        if callable(getattr(torch.Tensor, name, None)):
            methods[name] = name
    functions.update({
        operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
        operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "pow", operator.neg: "neg",
        operator.abs: "abs", operator.eq: "eq", operator.ne: "ne", operator.lt: "lt", operator.le: "le",
        operator.gt: "gt", operator.ge: "ge", operator.and_: "bitwise_and", operator.or_: "bitwise_or",
        operator.xor: "bitwise_xor", operator.invert: "bitwise_not", operator.getitem: "getitem",
        operator.matmul: "matmul", torch.concat: "cat", torch.concatenate: "cat", torch.clip: "clamp",
        torch.true_divide: "true_divide", torch.special.expit: "sigmoid", torch.nn.functional.sigmoid: "sigmoid",
        torch.nn.functional.tanh: "tanh",
    })
    methods.update({"__getitem__": "getitem", "clip": "clamp", "type": "to"})
    # x.data: an alias of x's memory that autograd does not see, as x.detach() (Dynamo records _get_data_attr(x)).
    functions[torch._C._autograd._get_data_attr] = "detach"
    adapters = {
        ("method", "view"): _view_adapter, ("method", "reshape"): _pack_varargs,
        ("method", "permute"): _pack_varargs, ("method", "expand"): _pack_varargs,
        ("method", "to"): _to_dtype_only, ("method", "type"): _to_dtype_only,
        ("function", "zeros"): _pack_size, ("function", "ones"): _pack_size,
        ("function", "softmax"): _drop_stacklevel, ("function", "log_softmax"): _drop_stacklevel,
        ("method", "where"): _where_method,
    }
    for method, dtype in (("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
                          ("bfloat16", torch.bfloat16), ("int", torch.int32), ("long", torch.int64),
                          ("bool", torch.bool)):
        methods[method] = "to"  # the adapter comes from _cast_method below
    for name in ("max", "min"):
        functions[getattr(torch, name)] = name
        methods[name] = name
    extend(functions, methods, adapters, native)
    return functions, methods, adapters


_FUNCTIONS, _METHODS, _ADAPTERS = _build_tables()
