"""Each ``thunder.jit`` wrapper compiles code of its own.

Dynamo keeps what it compiles on the *code object* whose frame it compiled: a list of cache entries (guards,
and the code to run in the frame's place), and it counts its recompile limit there. Every ``torch.compile`` of
one function shares that list, and since each thunder.jit wrapper has a backend of its own, whose entries the
others' guards reject, each wrapper compiles entries that count against the others' limit: the 9th
``thunder.jit`` of one function, or of a module of one class (their ``forward`` is one function), would compile
nothing and run eagerly.

So a wrapper compiles a copy of the code -- same bytecode, names, file and line numbers; only the object
differs -- in a function of its own (:func:`private_function`), and a module is called through a *shadow*
whose ``forward`` is such a copy (:func:`private_module`). Its entries live on the copy: its own cache, its own
limits. Frames of other functions Dynamo compiles during its calls (where a graph break falls inside a callee)
are kept apart by ``torch.compile(..., isolate_recompiles=True)``, where torch has it. When the wrapper is
collected, :func:`release` drops the entries on its copy, and the graphs they hold.
"""
import functools
import types
import weakref

from thunder.core.log import logger


def copy_code(code):
    """A new code object equal to ``code``, holding copies of the code objects it holds (nested functions,
    comprehensions) in turn."""
    consts = tuple(copy_code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_consts=consts)


def private_function(fn, method=False):
    """``fn`` with a copy of its code (:func:`copy_code`): the same globals, defaults, closure cells, names and
    attributes; for one of torch's own functions, a function calling it (see :func:`_calling`; ``method``: its
    first parameter is ``self``, for the fast path). Anything but a plain function is returned as it is."""
    if not isinstance(fn, types.FunctionType):
        return fn
    if _is_torchs(fn):
        return _calling(fn, method)
    new = types.FunctionType(copy_code(fn.__code__), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    new.__dict__.update(fn.__dict__)
    new.__wrapped_by_thunder__ = getattr(fn, "__wrapped_by_thunder__", fn)
    return new


def _calling(fn, method):
    """A function of thunder's that calls ``fn``, one of torch's own (``F.silu``, the ``forward`` of
    ``nn.Sequential`` or ``nn.Linear``): ``def call(*args, **kwargs): return _fn(*args, **kwargs)``, with ``self``
    first for a ``method``. Dynamo does not start compiling in torch's files, nor in a copy of their code: for
    such a module torch.compile adds a frame of its own (``torch._dynamo.external_utils.wrap_inline``), shared by
    every module; this one is the wrapper's."""
    self = "self, " if method else ""
    namespace = {"_fn": fn}
    source = f"def call({self}*args, **kwargs):\n    return _fn({self}*args, **kwargs)\n"
    exec(compile(source, f"<thunder: calls {fn.__module__}.{fn.__qualname__}>", "exec"), namespace)
    call = namespace["call"]
    call.__name__, call.__qualname__, call.__module__ = fn.__name__, fn.__qualname__, fn.__module__
    return call


def _is_torchs(fn):
    return (getattr(fn, "__module__", None) or "").startswith("torch.")


def private_module(model, methods=None):
    """A module that behaves as ``model`` -- it shares ``model.__dict__``: parameters, buffers, submodules, hooks,
    attributes -- whose class is a subclass of model's with ``methods`` (name -> function, say rewritten ones)
    and a ``forward`` of its own: a private copy (:func:`private_function`) of ``methods["forward"]`` or of the
    class's, or, for torch's own, a function calling it.

    Returns (the module, its own forward; None where ``forward`` is not a plain function of the class, say an
    instance attribute). ``(model, None)`` when there is nothing to override, or when the class cannot be
    subclassed (a metaclass or ``__init_subclass__`` that refuses): then the module is compiled as it is,
    sharing its class's code with every other wrapper."""
    cls, methods = type(model), dict(methods or {})
    forward, own = methods.get("forward", getattr(cls, "forward", None)), None
    if "forward" not in model.__dict__ and isinstance(forward, types.FunctionType):
        own = methods["forward"] = private_function(forward, method=True)
    if not methods:
        return model, None
    methods.update(__module__=cls.__module__, __qualname__=cls.__qualname__)
    # The module's own hooks receive it as `module`: equal to the original and hashed as it, a hook that looks it
    # up in a dict keyed by modules (activations captured by name) finds it (`module is model` stays False).
    # The class holds the model weakly: Dynamo keeps the classes it saw (in caches of its own), and a model dropped
    # with its wrapper is freed.
    if cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__:
        model_hash, model_ref = hash(model), weakref.ref(model)
        methods.update(__hash__=lambda self: model_hash,
                       __eq__=lambda self, other: other is self or other is model_ref())
    try:
        sub = _forwarding_metaclass(type(cls))(cls.__name__, (cls,), methods)
        shadow = object.__new__(sub)
        object.__setattr__(shadow, "__dict__", model.__dict__)
    except (TypeError, AttributeError) as e:
        logger.debug("thunder: %s cannot be subclassed (%s); it is compiled as it is", cls.__qualname__, e)
        return model, None
    return shadow, own


@functools.lru_cache(maxsize=None)
def _forwarding_metaclass(meta):
    """A metaclass derived from ``meta`` whose classes (private subclasses, see :func:`private_module`) pass writes
    and deletions of class attributes other than their own (``type(self).calls += 1`` in ``forward``) on to their
    base, the user's class, where eager makes them."""
    def __setattr__(cls, name, value):
        meta.__setattr__(cls if name in cls.__dict__ else cls.__bases__[0], name, value)

    def __delattr__(cls, name):
        meta.__delattr__(cls if name in cls.__dict__ else cls.__bases__[0], name)
    return meta.__class__(meta.__name__, (meta,), {"__setattr__": __setattr__, "__delattr__": __delattr__,
                                                   "__module__": meta.__module__})


def forget_shape_history(code):
    """Drops what Dynamo remembers about the sizes and values that changed between calls of ``code``'s function
    (its automatic dynamic shapes: with ``dynamic=None``, a dimension seen to change is compiled symbolic from
    then on). Dynamo keys that memory by the code's file, first line and name, which a copy shares: without this,
    a new wrapper of a function would start where an earlier wrapper (or ``thunder.examine``) left off. Does
    nothing on a torch without ``torch._dynamo.pgo.get_code_state``."""
    try:
        from torch._dynamo.pgo import get_code_state

        state = get_code_state()
        for key in [k for k in state if (k.filename, k.firstlineno, k.name) ==
                    (code.co_filename, code.co_firstlineno, code.co_name)]:
            del state[key]
    except Exception as e:  # noqa: BLE001 -- torch's private API changed: wrappers share that memory
        logger.debug("thunder: cannot reset Dynamo's shape history of %s: %s", code.co_name, e)


def release(code, backend=None):
    """Drops Dynamo's cache entries on ``code`` (a collected wrapper's private copy): the compiled graphs they
    hold go with them, and so do their guards (:func:`_detach_guard_finalizers`). Dynamo itself keeps a reference
    to every code object it compiled, so the copy is not freed, and neither would its entries be. ``backend``
    (a weak reference to the wrapper's backend): torch.compile's wrappers of it are dropped from the backends
    Dynamo keeps for ``torch._dynamo.reset`` (each holds the wrapper's compile state). Does nothing on a torch
    without ``reset_code``."""
    try:
        from torch._C._dynamo.eval_frame import reset_code
        from torch._dynamo import eval_frame
    except ImportError:
        return
    _detach_guard_finalizers(code)
    reset_code(code)
    # (On a rebuild, the wrapper's backend lives on: the torch.compile that follows adds it back.)
    backend = backend() if backend is not None else None
    cached = getattr(eval_frame, "cached_backends", None)
    if backend is not None and isinstance(cached, dict):
        for key, value in list(cached.items()):
            if getattr(value, "compiler_fn", value) is backend:
                del cached[key]


def _detach_guard_finalizers(code):
    """Detaches the ``weakref.finalize`` callbacks that hold the guards of ``code``'s cache entries.

    For each object a guard matches by identity (a module class, ``torch._C._nn.linear``, a global function),
    Dynamo's guard builder registers a finalizer whose callback is its ``CheckFunctionManager.invalidate``: the
    finalizer lives as long as that object -- for a class, the process -- and holds the guard manager, about
    250 KB for a small model. With one code copy per wrapper, jitting a fresh model per request kept that much per
    wrapper forever; torch, whose compiles of one function share its code, grows alike only per new code object.
    The entries are dropped next, so nothing is left for those callbacks to invalidate.

    Reads private names (CPython's ``weakref.finalize._registry``, Dynamo's ``_debug_get_cache_entry_list`` and
    the callback's shape); where they changed, it detaches nothing and the entries are still dropped
    (``tests/test_independent_wrappers.py`` pins it)."""
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
        managers = {id(entry.guard_manager) for entry in _debug_get_cache_entry_list(code)}
        registry = list(weakref.finalize._registry.items())
    except Exception as e:  # noqa: BLE001 -- a torch or Python without these names: keep the finalizers
        logger.debug("thunder: cannot detach the guard finalizers of %s: %s", code.co_name, e)
        return
    for finalizer, info in registry if managers else ():
        owner = getattr(getattr(info.func, "func", None), "__self__", None)  # functools.partial(cfm.invalidate)
        if owner is not None and id(getattr(owner, "guard_manager", None)) in managers:
            finalizer.detach()
