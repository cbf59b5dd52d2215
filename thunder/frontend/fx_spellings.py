"""FX import tables for torch spellings that are
not ``torch.<name>``/``F.<name>``/``torch.special.<name>``, methods taking *varargs, and creation
ops' keyword arguments that do not change the result. Merged into fx_import's tables."""
import torch
import torch.nn.functional as F

from thunder import _core


def _varargs_method(args, kwargs):
    from thunder.frontend.fx_import import _pack_varargs  # x.flip(0, 1) -> x.flip((0, 1)), like x.view

    return _pack_varargs(args, kwargs)


def _drop_stacklevel(args, kwargs):
    from thunder.frontend.fx_import import _drop_stacklevel as drop

    return drop(args, kwargs)


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
        from thunder.frontend.fx_import import _TensorArg

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
    from thunder.frontend.fx_import import _TensorArg

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
        adapters[("method", m)] = _varargs_method
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
