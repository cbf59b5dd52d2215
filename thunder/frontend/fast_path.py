"""The fast path: a jitted function's or module's compiled code, called without Dynamo's frame handling.

Dynamo keeps, per code object, a list of cache entries: a guard manager (checks on the frame's locals and on
global state: each tensor's dtype, device, shape, strides and requires_grad, a module's parameters, buffers and
``training`` flag as ``forward`` reads them, grad mode, default dtype, ...) and the transformed bytecode that
runs in place of the frame (it calls the compiled graph and replays side effects). Entering a function through
``torch.compile`` costs about 10-15 us of frame handling before that; entering a module, 20-30 us more
(``nn.Module.__call__`` twice: the jitted module's and the compiled one's).

:class:`FastPath` runs an entry's guard check on the arguments itself and, when it passes, runs the transformed
code as a plain function: what Dynamo would run, without its frame handling. That is the same only where the
frame was captured whole: an entry whose code calls a frame Dynamo compiles on its own (a function or module the
frame calls that has a graph break: ``return inner(x)``, ``return self.body(x)``, ``thunder.jit(optimizer.step)``)
would run that frame uncompiled, so the fast path never takes it (:func:`separate_frame_call` reads the code for
such calls). Everything else is a miss, and the call takes the ordinary path through ``torch.compile``, which
recompiles (or runs uncompiled, and says so) as it would have.

The fast path reads Dynamo's private names (listed in :func:`api_problem`). On a torch that changed them the
fast path is off, with one INFO line, and every call takes the ordinary path; ``tests/test_fast_path.py`` pins
them, so that a torch upgrade that changes them fails there, loudly.
"""
import builtins
import collections
import dis
import functools
import inspect
import sys
import types
import weakref

import torch

from thunder.core import debug
from thunder.core.log import logger
from thunder.frontend.dynamo import count_limited_frames

#: Returned by FastPath.call when no cache entry applies.
MISS = object()

_problem = None  # api_problem()'s answer, once computed


def api_problem():
    """The private name the fast path reads that this torch lacks, or "" when it has them all:
    ``torch._dynamo.eval_frame._debug_get_cache_entry_list`` and, where torch.compile takes
    ``isolate_recompiles``, ``_get_cache_entries_for_region`` (a code object's cache entries), the entries' ``backend`` (whose ``compiler_fn`` is the backend given to
    torch.compile), ``code`` and ``guard_manager``; ``torch.nn.modules.module._has_any_global_hook``, and
    ``torch._C._get_tracing_state`` (whether ``nn.Module.__call__`` would do more than call ``forward``);
    ``eval_frame._stance`` (``torch.compiler.set_stance``'s: under "force_eager" every call is a miss);
    ``torch.autograd.forward_ad._current_level`` (inside a dual level every call is a miss: see
    ``thunder.frontend.dynamo.forward_ad_active``)."""
    global _problem
    if _problem is None:
        _problem = _find_problem()
        if _problem:
            logger.info("thunder: the fast path is off: this torch (%s) changed %s; every call goes through "
                        "torch.compile", torch.__version__, _problem)
    return _problem


def _find_problem():
    from torch._dynamo import eval_frame
    from torch.nn.modules import module

    names = [(eval_frame, "_debug_get_cache_entry_list"), (module, "_has_any_global_hook"),
             (torch._C, "_get_tracing_state")]
    if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
        names.append((eval_frame, "_get_cache_entries_for_region"))
    for owner, name in names:
        if not callable(getattr(owner, name, None)):
            return f"{owner.__name__}.{name}"
    if not hasattr(getattr(eval_frame, "_stance", None), "stance"):
        return "torch._dynamo.eval_frame._stance.stance"
    if not isinstance(getattr(torch.autograd.forward_ad, "_current_level", None), int):
        return "torch.autograd.forward_ad._current_level"
    entry = getattr(torch._C._dynamo.eval_frame, "_CacheEntry", None)
    for name in ("backend", "code", "guard_manager"):
        if not hasattr(entry, name):
            return f"torch._C._dynamo.eval_frame._CacheEntry.{name}"
    return ""


def cache_entries(code, region=-1):
    """Dynamo's cache entries on ``code``, of the ``isolate_recompiles`` region ``region`` (-1: the default one),
    most recently used first; none on a torch without the private names (:func:`api_problem`)."""
    if api_problem():
        return []
    from torch._dynamo import eval_frame

    if region >= 0:
        return eval_frame._get_cache_entries_for_region(code, region)
    return eval_frame._debug_get_cache_entry_list(code)


def plain_module_call(jitted, model):
    """Whether ``jitted(*args)`` would only call ``model``'s forward: no hook on either module or global, no
    ``Module.compile()``, no ``torch.jit`` tracing -- what ``nn.Module.__call__`` checks before it calls
    ``forward`` directly."""
    for d in (jitted.__dict__, model.__dict__):
        if d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"] or d["_backward_pre_hooks"] or \
                d.get("_compiled_call_impl") is not None:
            return False
    return not torch.nn.modules.module._has_any_global_hook() and not torch._C._get_tracing_state()


class _Globals(dict):
    """A function's globals with some names overridden; every other name is read from the originals, live."""

    def __init__(self, originals):
        super().__init__()
        self.originals = originals

    def __missing__(self, name):
        return self.originals[name]


class _WithoutBytecodeTiming:
    """``torch._dynamo.utils`` as the transformed code reads it (``call_size`` and the like, in code for graphs with
    symbolic sizes), with Dynamo's own bytecode timing a no-op."""

    def __init__(self, module):
        self._module = module

    record_pregraph_bytecode_enter = staticmethod(lambda: None)
    record_pregraph_bytecode_exit = staticmethod(lambda token: None)

    def __getattr__(self, name):
        return getattr(self._module, name)


def _reads_globals_only(code):
    """Whether code neither writes globals nor makes functions (which would take its globals). Nested code
    objects among its constants do not count unless it makes functions of them: Dynamo's transformed code keeps
    the original's constants (the branch rewriter's arm functions) but only calls the compiled graph."""
    return not any(i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL", "MAKE_FUNCTION") for i in dis.get_instructions(code))


_HOOKS = ("record_pregraph_bytecode_enter", "record_pregraph_bytecode_exit")
_MODULE_DICTS = ("_modules", "_parameters", "_buffers")  # a module's dicts, read as its transformed code reads them
_CONSTANTS = (type(None), bool, int, str)


def direct_form(code, graph_name):
    """What Dynamo's transformed ``code`` computes, when all it does is call the graph ``graph_name`` on its
    parameters (or their modules' parameters and buffers: ``self._modules["fc1"]._parameters["weight"]``) and
    return the graph's outputs, parameters or constants in lists, tuples and dicts: ``(graph arguments, result)``
    as symbolic values (:func:`_source` writes them as Python). None for anything else -- other calls, globals,
    attributes, jumps, an opcode not read here: that code runs as it is.

    The code is read as a stack machine over symbolic values (Python 3.11's opcodes), following what it pushes,
    stores and builds, without running it. Dynamo's own bytecode timing (``record_pregraph_bytecode_enter`` and
    ``_exit`` of ``torch._dynamo.utils``) is a no-op on the fast path and is dropped."""
    names = code.co_names
    params = code.co_varnames[:code.co_argcount]
    local = {name: ("arg", name) for name in params}
    stack, called = [], []
    built, shared = 0, {None}  # how many containers were built (the next one's id); ids with two references
    for ins in dis.get_instructions(code):
        op, arg = ins.opname, ins.arg
        if op in ("RESUME", "NOP", "PRECALL", "CACHE"):
            continue
        if op == "LOAD_GLOBAL":
            name = names[arg >> 1]
            if arg & 1:
                stack.append(("null",))
            if name == graph_name:
                stack.append(("graph",))
            elif name.startswith("__import_torch_dot__dynamo_dot_utils"):
                stack.append(("utils",))
            else:
                return None
        elif op == "LOAD_ATTR":
            of = stack.pop()
            if of == ("utils",) and names[arg] in _HOOKS:
                stack.append(("hook",))
            elif of[0] in ("arg", "path") and names[arg] in _MODULE_DICTS:
                stack.append(("path", of, f".{names[arg]}"))
            else:
                return None
        elif op == "LOAD_FAST":
            if ins.argval not in local:
                return None
            stack.append(local[ins.argval])
            shared.add(_container(stack[-1]))
        elif op == "STORE_FAST":
            local[ins.argval] = stack.pop()
        elif op == "DELETE_FAST":
            local.pop(ins.argval, None)
        elif op == "LOAD_CONST":
            if type(ins.argval) not in _CONSTANTS:
                return None
            stack.append(("const", ins.argval))
        elif op == "COPY":
            stack.append(stack[-arg])
            shared.add(_container(stack[-1]))
        elif op == "SWAP":
            stack[-1], stack[-arg] = stack[-arg], stack[-1]
        elif op == "POP_TOP":
            stack.pop()
        elif op == "CALL":
            args = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            fn = stack.pop()
            if stack and stack[-1] == ("null",):
                stack.pop()
            if fn == ("hook",):
                stack.append(("const", None))
            elif fn == ("graph",) and not called and all(a[0] in ("arg", "path") for a in args):
                called.append(args)
                stack.append(("out",))
            else:
                return None
        elif op == "BINARY_SUBSCR":
            index, of = stack.pop(), stack.pop()
            if of == ("out",) and index[0] == "const" and type(index[1]) is int:
                stack.append(("item", index[1]))
            elif of[0] == "path" and of[2].startswith(".") and index[0] == "const" and type(index[1]) is str:
                stack.append(("path", of, f"[{index[1]!r}]"))
            else:
                return None
        elif op in ("BUILD_LIST", "BUILD_TUPLE"):
            items = stack[len(stack) - arg:] if arg else []
            del stack[len(stack) - arg:]
            stack.append(("list" if op == "BUILD_LIST" else "tuple", items, built))
            built += 1
        elif op == "BUILD_MAP":
            items = stack[len(stack) - 2 * arg:] if arg else []
            del stack[len(stack) - 2 * arg:]
            if any(k[0] != "const" for k in items[::2]):
                return None
            stack.append(("dict", items, built))
            built += 1
        elif op in ("LIST_EXTEND", "LIST_APPEND"):
            value, target = stack.pop(), stack[-arg]
            if target[0] != "list" or (op == "LIST_EXTEND" and value[0] not in ("list", "tuple")) or \
                    _container(target) in shared:  # another reference would not see the items added
                return None
            stack[-arg] = ("list", target[1] + (value[1] if op == "LIST_EXTEND" else [value]), target[2])
        elif op == "RETURN_VALUE":
            result = stack.pop()
            frame = {name: name for name in params}
            if not called or _source(result, frame) is None or any(_source(a, frame) is None for a in called[0]):
                return None
            containers = []
            _containers_in(result, containers)
            if len(set(containers)) < len(containers):  # one container returned twice: written once, it would be two
                return None
            return called[0], result
        else:
            return None
    return None


def _container(value):
    """The id of a list, tuple or dict direct_form built, or None for any other value."""
    return value[2] if value[0] in ("list", "tuple", "dict") else None


def _containers_in(value, out):
    """Appends the ids of the containers in ``value`` (nested ones included, each time it occurs) to ``out``."""
    if value[0] in ("list", "tuple", "dict"):
        out.append(value[2])
        for v in value[1]:
            _containers_in(v, out)


def _source(value, params):
    """Python source of a symbolic value of direct_form: the graph's output tuple read as ``out``, a parameter as
    ``params[name]``; None where it has none (a hook's token, a graph or module reference)."""
    kind = value[0]
    if kind == "item":
        return f"out[{value[1]}]"
    if kind == "arg":
        return params.get(value[1])
    if kind == "path":  # a module dict of a parameter, or an item of one: self._modules["fc1"]._parameters
        base = _source(value[1], params)
        return base + value[2] if base is not None else None
    if kind == "const":
        return repr(value[1])
    if kind in ("list", "tuple", "dict"):
        parts = [_source(v, params) for v in value[1]]
        if any(p is None for p in parts):
            return None
        if kind == "dict":
            return "{" + ", ".join(f"{k}: {v}" for k, v in zip(parts[::2], parts[1::2])) + "}"
        return ("[" + ", ".join(parts) + "]") if kind == "list" else ("(" + "".join(p + ", " for p in parts) + ")")
    return None


# ---- which transformed code the fast path may run: none that calls a frame Dynamo compiles on its own ----
#
# Dynamo runs the transformed code with its frame handling on: every Python frame that code calls (the callee of a
# graph break: `return inner(x)`, `return self.body(x)`, the optimizer step `_use_grad` wraps) is compiled as a
# frame of its own, with its own cache entries and graphs. Run without that handling, such a frame runs eagerly.

_C_CALLABLES = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                types.MethodWrapperType, types.ClassMethodDescriptorType)
_NAMEDTUPLE_MAKE = collections.namedtuple("_Probe", ())._make.__func__.__code__  # how Dynamo rebuilds a namedtuple
_UNSET = object()

#: Opcodes that take values off the stack and put new ones on it without calling a callable the code names
#: (dunder methods aside): name -> (values taken, values put), given the instruction's argument.
_PLAIN_OPS = {
    **dict.fromkeys(("RESUME", "NOP", "PRECALL", "CACHE", "EXTENDED_ARG", "KW_NAMES", "MAKE_CELL",
                     "COPY_FREE_VARS"), lambda a: (0, 0)),
    **dict.fromkeys(("BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP"), lambda a: (2, 1)),
    **dict.fromkeys(("UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "UNARY_POSITIVE", "GET_ITER", "LIST_TO_TUPLE"),
                    lambda a: (1, 1)),
    **dict.fromkeys(("BUILD_LIST", "BUILD_TUPLE", "BUILD_SET", "BUILD_STRING", "BUILD_SLICE"), lambda a: (a, 1)),
    "BUILD_MAP": lambda a: (2 * a, 1), "BUILD_CONST_KEY_MAP": lambda a: (a + 1, 1),
    **dict.fromkeys(("LIST_EXTEND", "LIST_APPEND", "SET_ADD", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE", "POP_TOP",
                     "DELETE_ATTR", "STORE_GLOBAL"), lambda a: (1, 0)),
    "DELETE_GLOBAL": lambda a: (0, 0),
    **dict.fromkeys(("MAP_ADD", "DELETE_SUBSCR"), lambda a: (2, 0)), "FORMAT_VALUE": lambda a: (1 + bool(a & 4), 1),
    "UNPACK_SEQUENCE": lambda a: (1, a), "UNPACK_EX": lambda a: (1, (a & 0xFF) + (a >> 8) + 1),
    **dict.fromkeys(("LOAD_CLOSURE", "LOAD_ASSERTION_ERROR"), lambda a: (0, 1)),
    "MAKE_FUNCTION": lambda a: (1 + bin(a & 0xF).count("1"), 1),  # a function made here: calling it is opaque
}
_POP_JUMPS = ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_NONE",
              "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",
              "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE")
#: Opcodes that call a dunder method of the object they read or write, where Dynamo also breaks graphs:
#: name -> (values taken, the method).
_DUNDER_OPS = {"BINARY_SUBSCR": (2, "__getitem__"), "STORE_SUBSCR": (3, "__setitem__"),
               "STORE_ATTR": (2, "__setattr__")}
_ENDS = ("RETURN_VALUE", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_FORWARD", "RERAISE", "RAISE_VARARGS")


def separate_frame_call(code, globals_, closure=(), instance=None):
    """What Dynamo's transformed ``code`` calls that Dynamo may compile as a frame of its own -- its name, as the
    code reaches it (``inner``, ``self.body``, ``Adam.step``) -- or None when it calls nothing such: only its
    compiled graphs, Dynamo's helpers (``torch._dynamo``), C functions and types (``object.__new__``,
    ``dict.clear``, ``collections.OrderedDict``) and a namedtuple's ``_make``. ``globals_`` and ``closure`` are
    what the code runs with; ``instance``, the object its first parameter (``self``) always is, if any.

    A callee is known only where the code names it: a global, a closure variable, a constant or ``self`` (and
    their attributes, looked up without running a getter: a module's submodules), or what it made of them
    (``type(obj).__mro__[2].clear``, where ``obj = cls.__new__(cls)``). Anything else it calls (a parameter or an
    attribute of one, the result of a call) counts as such a frame; so does a Python ``__getitem__``,
    ``__setitem__``, ``__setattr__`` or property getter of an object known so (Dynamo breaks the graph at these
    too: ``return table[x]``), and code this does not read: another opcode, an exception handler (a string
    saying so). Python 3.11's opcodes. Not looked into: what a callee is called with (a C function given a
    Python callback), the dunder methods of parameters (``return x[i]``, ``x`` a parameter whose ``__getitem__``
    has a graph break), comparisons.

    The code is read as a stack machine over symbolic values, in order; a forward jump's target takes the stack
    the jump left, a loop's body is read once."""
    if sys.version_info[:2] != (3, 11):
        return f"code the fast path does not read (Python {sys.version_info[0]}.{sys.version_info[1]}'s bytecode)"
    try:
        return _first_separate_call(code, globals_, closure, instance)
    except IndexError:  # more values taken than the stack holds: code not as Dynamo writes it
        return "code the fast path does not read (its stack)"


def _first_separate_call(code, globals_, closure, instance):
    """separate_frame_call's reading of the code."""
    frame = dict(zip(code.co_freevars, closure or ()))
    builtin = globals_.get("__builtins__", builtins)
    builtin = vars(builtin) if isinstance(builtin, types.ModuleType) else builtin
    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) + \
        bool(code.co_flags & inspect.CO_VARKEYWORDS)
    local = {name: ("arg", name) for name in code.co_varnames[:nargs]}
    if instance is not None and nargs:
        local[code.co_varnames[0]] = ("static", instance, code.co_varnames[0])
    stack, at, reached = [], {}, True  # at: an instruction's offset -> the stack a forward jump left for it
    for ins in dis.get_instructions(code):
        op, arg = ins.opname, ins.arg
        if ins.offset in at:
            stack, reached = (stack if reached else at[ins.offset]), True
        if not reached:
            if op == "CACHE":
                continue
            return "code the fast path does not read (an exception handler)"
        if op in _PLAIN_OPS:
            taken, put = _PLAIN_OPS[op](arg)
            _take(stack, taken)
            stack += [("made", "a function made here" if op == "MAKE_FUNCTION" else "a value made here")] * put
        elif op == "PUSH_NULL":
            stack.append(("null",))
        elif op == "LOAD_GLOBAL":
            if arg & 1:
                stack.append(("null",))
            name = ins.argval
            value = globals_.get(name, builtin.get(name, _UNSET))
            stack.append(("graph",) if name.startswith("__compiled_fn") else
                         ("made", name) if value is _UNSET else ("static", value, name))
        elif op in ("LOAD_FAST", "LOAD_FAST_CHECK"):
            stack.append(local.get(ins.argval, ("made", ins.argval)))
        elif op in ("STORE_FAST", "STORE_DEREF"):
            local[ins.argval] = stack.pop()
        elif op in ("DELETE_FAST", "DELETE_DEREF"):
            local.pop(ins.argval, None)
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            if ins.argval in frame:
                try:
                    stack.append(("static", frame[ins.argval].cell_contents, ins.argval))
                except ValueError:  # an empty cell: the call raises NameError
                    stack.append(("made", ins.argval))
            else:
                stack.append(local.get(ins.argval, ("made", ins.argval)))
        elif op == "LOAD_CONST":
            stack.append(("static", ins.argval, repr(ins.argval)))
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            value = _attribute(stack.pop(), ins.argval)
            if value[0] == "runs":
                return value[1]
            stack += [("null",), value] if op == "LOAD_METHOD" else [value]
        elif op in _DUNDER_OPS:
            taken, dunder = _DUNDER_OPS[op]
            operands = _take(stack, taken)
            of = operands[-1] if op == "STORE_ATTR" else operands[-2]
            if _runs_dunder(of, dunder):
                return f"{of[2]}.{dunder}" if of[0] == "static" else f"{of[1].__qualname__}.{dunder}"
            if op == "BINARY_SUBSCR":
                stack.append(_item(of, operands[-1]))
        elif op == "COPY":
            stack.append(stack[-arg])
        elif op == "SWAP":
            stack[-1], stack[-arg] = stack[-arg], stack[-1]
        elif op in ("CALL", "CALL_FUNCTION_EX"):
            opaque, result = _call(*_call_operands(stack, op, arg))
            if opaque:
                return opaque
            stack.append(result)
        elif op == "FOR_ITER":
            at[ins.argval] = stack[:-1]  # exhausted: the iterator is popped
            stack.append(("made", "an item"))
        elif op in _POP_JUMPS:
            stack.pop()
            if ins.argval > ins.offset:
                at[ins.argval] = list(stack)
        elif op in ("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"):
            at[ins.argval] = list(stack)
            stack.pop()
        elif op in _ENDS:
            if op == "JUMP_FORWARD":
                at[ins.argval] = stack
            reached = False
        else:
            return f"code the fast path does not read ({op})"
    return None


def _take(stack, n):
    """The top ``n`` values of ``stack``, taken off it (IndexError where it holds fewer)."""
    if n > len(stack):
        raise IndexError(n)
    taken = stack[len(stack) - n:]
    del stack[len(stack) - n:]
    return taken


def _call_operands(stack, op, arg):
    """``(callee, arguments)`` of a CALL or CALL_FUNCTION_EX, taken off the stack (Python 3.11: ``NULL, callable``
    or ``method, self`` below a CALL's arguments; a NULL below CALL_FUNCTION_EX's callable, whose arguments are in
    a tuple and a dict, not looked into)."""
    if op == "CALL":
        items = _take(stack, arg + 2)
        return (items[1], items[2:]) if items[0] == ("null",) else (items[0], items[1:])
    _take(stack, 1 + (arg & 1))
    callee = stack.pop()
    if stack and stack[-1] == ("null",):
        stack.pop()
    return callee, []


def _attribute(value, name):
    """The symbolic value of ``value.name`` (see separate_frame_call): looked up statically where ``value`` is
    known (a module's attribute as it is), an attribute path of a parameter, else a made value."""
    kind = value[0]
    if kind == "arg":
        return ("arg", f"{value[1]}.{name}")
    if kind == "instance":  # an object of a known class: what the class gives it
        if _runs_getter(value[1], name):
            return ("runs", f"{value[1].__qualname__}.{name}")
        found = _static_attribute(value[1], name)
        return ("made", name) if found is _UNSET else ("static", found, f"{value[1].__qualname__}.{name}")
    if kind != "static":
        return ("made", name)
    owner = value[1]
    if isinstance(owner, types.ModuleType):
        try:
            found = getattr(owner, name, _UNSET)
        except Exception:  # noqa: BLE001 -- a module's __getattr__ (a lazy import) that fails: not known
            found = _UNSET
    elif isinstance(owner, type) and name == "__mro__":
        found = owner.__mro__
    else:
        if not isinstance(owner, type) and _runs_getter(type(owner), name):
            return ("runs", f"{value[2]}.{name}")
        found = _static_attribute(owner, name)
        if found is _UNSET and isinstance(owner, torch.nn.Module):  # a submodule, parameter or buffer
            found = next((d[name] for d in map(owner.__dict__.get, _MODULE_DICTS) if d and name in d), _UNSET)
    return ("made", name) if found is _UNSET else ("static", found, f"{value[2]}.{name}")


def _runs_getter(cls, name):
    """Whether reading attribute ``name`` of a ``cls`` object runs Python code: a property's getter, another
    descriptor's ``__get__``."""
    found = _static_attribute(cls, name)
    if isinstance(found, property):
        return found.fget is not None and _runs_python(found.fget)
    if found is _UNSET or isinstance(found, types.FunctionType):  # a method: bound by C code
        return False
    get = _static_attribute(type(found), "__get__")
    return get is not _UNSET and _runs_python(get)


def _runs_dunder(value, name):
    """Whether the dunder method ``name`` of an object known to the code (see separate_frame_call) is Python."""
    if value[0] == "instance":
        cls = value[1]
    elif value[0] == "static" and not isinstance(value[1], type):
        cls = type(value[1])
    else:
        return False
    found = _static_attribute(cls, name)
    return found is not _UNSET and _runs_python(found)


def _static_attribute(owner, name):
    """``owner.name`` as the class (or object) defines it, without running a getter: a static method's function,
    a class method bound to its class; _UNSET where it has none."""
    try:
        found = inspect.getattr_static(owner, name)
    except AttributeError:
        return _UNSET
    if isinstance(found, staticmethod):
        return found.__func__
    if isinstance(found, classmethod):
        return types.MethodType(found.__func__, owner if isinstance(owner, type) else type(owner))
    return found


def _item(of, index):
    """The symbolic value of ``of[index]``: an item of a tuple, list or dict known to the code (a class's
    ``__mro__``), else what ``of`` is derived from."""
    if of[0] == "static" and index[0] == "static" and type(of[1]) in (tuple, list, dict):
        try:
            return ("static", of[1][index[1]], f"{of[2]}[{index[1]!r}]")
        except (IndexError, KeyError, TypeError):
            pass
    return ("arg", f"{of[1]}[...]") if of[0] == "arg" else ("made", "an item")


def _call(callee, args):
    """``(what the call enters that Dynamo may compile as a frame of its own, or None; the call's symbolic
    result)``: a class called (or its ``__new__``) makes an object of that class; ``type`` of one, its class."""
    kind = callee[0]
    if kind == "graph":
        return None, ("made", "a graph's outputs")
    if kind in ("arg", "made"):
        return callee[1], None
    if kind != "static":
        return f"a {callee[1].__qualname__} object" if kind == "instance" else "a callable it made", None
    fn, name = callee[1], callee[2]
    if _runs_python(fn):
        real = getattr(fn, "__func__", fn) if isinstance(fn, (types.FunctionType, types.MethodType)) else None
        return (f"{name} ({real.__module__}.{real.__qualname__})" if real is not None and real.__name__ != name
                else name), None
    if isinstance(fn, type) and fn is not type:
        return None, ("instance", fn)
    if isinstance(fn, _C_CALLABLES) and fn.__name__ == "__new__" and args and args[0][0] == "static" and \
            isinstance(args[0][1], type):
        return None, ("instance", args[0][1])
    if fn is type and len(args) == 1 and args[0][0] == "instance":
        return None, ("static", args[0][1], args[0][1].__qualname__)
    return None, ("made", f"{name}(...)")


def _runs_python(fn):
    """Whether calling ``fn`` runs Python code Dynamo may compile (its own helpers in ``torch._dynamo`` and a
    namedtuple's ``_make`` aside): a Python function or method, an object whose class defines ``__call__`` in
    Python (a module), a class whose ``__new__`` or ``__init__`` is Python (or whose metaclass's ``__call__``)."""
    if isinstance(fn, _C_CALLABLES):
        return False
    if isinstance(fn, functools.partial):
        return _runs_python(fn.func)
    if isinstance(fn, types.MethodType):
        return _runs_python(fn.__func__)
    if isinstance(fn, types.FunctionType):
        return fn.__code__ is not _NAMEDTUPLE_MAKE and not (fn.__module__ or "").startswith("torch._dynamo")
    if isinstance(fn, type):
        return any(_runs_python(f) for f in (_static_attribute(type(fn), "__call__"),
                                             _static_attribute(fn, "__new__"), _static_attribute(fn, "__init__"))
                   if f is not _UNSET)
    call = _static_attribute(type(fn), "__call__")
    return call is not _UNSET and _runs_python(call)


class FastPath:
    """Calls the Dynamo-compiled code of ``fn`` (the function whose frame Dynamo compiles: a wrapper's private
    copy) directly when an entry's guards pass.

    ``call(args)`` takes the call's positional arguments (keyword arguments always take the ordinary path). For a
    module, ``instance`` is the module ``fn`` is the ``forward`` of: it is passed as ``self``. ``backend`` is the
    wrapper's: only entries it compiled are used, and of those only entries for a frame Dynamo captured whole:
    whose code calls a graph of its own, no ``__resume_at_*`` function (a graph break in the frame) and no other
    frame Dynamo compiles separately (:func:`separate_frame_call`: ``return inner(x)`` where ``inner`` has a graph
    break; run here, with Dynamo's frame handling off, that frame would run uncompiled). ``region`` is the
    wrapper's ``isolate_recompiles`` region (-1: none).

    ``state``: the wrapper's JitState (thunder.frontend.dynamo): a call the fast path runs is counted there as a
    cache hit, a miss (a graph with symbolic sizes compiled a specialization for new shapes) or a raised one. (An
    entry that runs no graph -- a graph break before any op, BatchNorm's momentum=None -- takes the ordinary path,
    which says why.)

    Misses: a guard failure (new shapes, dtypes, strides, grad mode, a parameter replaced, ``train()``/``eval()``
    where ``forward`` reads the flag: Dynamo then recompiles), a function with graph breaks (in its own frame or
    in one it calls), fewer arguments than parameters (defaults), an empty closure cell. Functions with
    keyword-only parameters are never served.
    """

    def __init__(self, fn, backend, state, region=-1, instance=None):
        code = fn.__code__
        self.fn, self.backend, self.region, self.instance, self.state = fn, backend, region, instance, state
        n = code.co_argcount
        self.names = code.co_varnames[:n]
        self.varargs = code.co_varnames[n] if code.co_flags & inspect.CO_VARARGS else None
        self.varkw = code.co_varnames[n + bool(self.varargs)] if code.co_flags & inspect.CO_VARKEYWORDS else None
        self.bound = 0 if instance is None else 1  # leading parameters filled by the fast path (self)
        self.cells = tuple(zip(code.co_freevars, fn.__closure__ or ()))
        self.enabled = not code.co_kwonlyargcount and len(fn.__closure__ or ()) == len(code.co_freevars) and \
            n >= self.bound and not api_problem()
        self.entries = []  # (guard check, transformed code as a function)
        # Per transformed code object, what reading it found (separate_frame_call, _reads_globals_only,
        # direct_form): a refresh follows every new graph, and a graph with symbolic sizes adds one per shape
        # signature to the same few entries.
        self._readings = weakref.WeakKeyDictionary()

    def refresh(self):
        """Re-reads the cache entries (after a call through torch.compile that compiled something)."""
        if not self.enabled:
            return
        try:
            self.entries = self._read_entries()
        except (AttributeError, TypeError) as e:  # a torch whose entries look otherwise: the ordinary path
            logger.info("thunder: the fast path is off for %s: Dynamo's cache entries are not as expected (%s)",
                        self.fn.__qualname__, e)
            self.enabled, self.entries = False, []
        self.call = self._generated_call()

    def _read_entries(self):
        fn, entries = self.fn, []
        for e in cache_entries(fn.__code__, self.region):
            if e.backend.compiler_fn is not self.backend:
                continue
            # A graph break in the frame, or no graph: the ordinary path (which says why where no graph runs).
            graph_names = [n for n in e.code.co_names if n.startswith("__compiled_fn")]
            if not graph_names or any(n.startswith("__resume_at") for n in e.code.co_names):
                continue
            reading = self._readings.get(e.code)
            if reading is None:
                reading = self._readings[e.code] = (
                    separate_frame_call(e.code, fn.__globals__, fn.__closure__, self.instance),
                    _reads_globals_only(e.code),
                    direct_form(e.code, graph_names[0]) if len(graph_names) == 1 else None)
            callee, globals_only, direct = reading
            if callee is not None:  # a graph break in a frame it calls, which would run uncompiled here
                logger.debug("thunder: %s: calls whose guards pass on a cache entry that calls %s take the ordinary "
                             "path (Dynamo compiles the frames that code calls on their own)", self.state.name, callee)
                continue
            # The transformed code's globals are the function's, with Dynamo's per-call wrappers taken off:
            # the graph's callable without its disable() wrapper (Dynamo is not running here to disable),
            # and the no-op bookkeeping of Dynamo's own bytecode timing.
            overrides = _Globals(fn.__globals__) if globals_only else fn.__globals__
            for name in e.code.co_names if overrides is not fn.__globals__ else ():
                value = fn.__globals__.get(name)
                if name.startswith("__compiled_fn") and hasattr(value, "__wrapped__"):
                    overrides[name] = value.__wrapped__
                elif name.startswith("__import_torch_dot__dynamo_dot_utils"):
                    overrides[name] = _WithoutBytecodeTiming(value)
            if direct is not None:
                graph = fn.__globals__.get(graph_names[0])
                graph = getattr(graph, "__wrapped__", graph)
                parts = getattr(graph, "parts", None)  # (its function, its CompiledGraph, its state): see below
                direct = (graph if parts is None or parts[2] is not self.state else parts[:2],) + direct
            entries.append((e.guard_manager.check,
                            types.FunctionType(e.code, overrides, fn.__name__, fn.__defaults__, fn.__closure__),
                            direct))
        return entries

    def _generated_call(self):
        """``call``, written out for this function's parameters, closure cells and cache entries: the frame's
        locals as a dict literal, then each entry's guard check in turn (0.3 us less than a generic loop); where
        the entry's transformed code only calls the graph and returns its outputs (:func:`direct_form`), the graph
        is called and the result built here (0.4 us less than running that code); a graph thunder compiled for this
        function is called without its run wrapper (``thunder.frontend.dynamo._compile_graph``), its calls counted
        here as that wrapper counts them (0.25 us less)."""
        if not self.entries:
            return lambda args: MISS
        from torch._dynamo import eval_frame

        namespace = {"MISS": MISS, "instance": self.instance, "state": self.state, "annotate": debug.annotate,
                     "count_limited_frames": count_limited_frames, "eval_frame": eval_frame,
                     "forward_ad": torch.autograd.forward_ad, "dispatch_modes": torch._C._len_torch_dispatch_stack}
        positional = len(self.names) - self.bound
        values = {name: "instance" for name in self.names[:self.bound]}  # each local of the frame, as source
        values.update((name, f"args[{i}]") for i, name in enumerate(self.names[self.bound:]))
        if self.varargs:
            values[self.varargs] = f"args[{positional}:]"
        if self.varkw:
            values[self.varkw] = "{}"
        test = f"len(args) < {positional}" if self.varargs else f"len(args) != {positional}"
        # torch.compiler.set_stance("force_eager"): the ordinary path runs the function eagerly, as torch.compile;
        # inside a forward-AD dual level, it runs the graphs with torch (dynamo.forward_ad_active); under a
        # TorchDispatchMode (FakeTensorMode: shape propagation), Dynamo runs the frame with its tensors as they are.
        lines = ["def call(args):", f"    if {test} or eval_frame._stance.stance == 'force_eager' or "
                 "forward_ad._current_level >= 0 or dispatch_modes():",
                 "        return MISS"]
        if self.cells:  # an empty cell (a closure variable not yet assigned) is a miss
            lines.append("    try:")
            for k, (name, cell) in enumerate(self.cells):
                namespace[f"cell{k}"] = cell
                lines.append(f"        c{k} = cell{k}.cell_contents")
                values[name] = f"c{k}"
            lines += ["    except ValueError:", "        return MISS"]
        lines.append("    frame = {" + ", ".join(f"{name!r}: {value}" for name, value in values.items()) + "}")
        arguments = "instance, *args" if self.bound else "*args"
        counted = ["        state.calls += 1",
                   "        if state.graphs_made > graphs:",
                   "            state.cache_misses += 1",
                   "        elif state.graph_calls > ran:",
                   "            state.cache_hits += 1",
                   "        else:",
                   "            state.eager_calls += 1",
                   "        if state.limited_frames:",
                   "            count_limited_frames(state, state.graph_calls > ran)"]
        for k, (check, run, direct) in enumerate(self.entries):
            namespace[f"check{k}"], namespace[f"run{k}"] = check, run
            lines.append(f"    if check{k}(frame):")
            if direct is not None and isinstance(direct[0], tuple):  # a graph of ours: a hit, unless it raises
                (namespace[f"fn{k}"], namespace[f"compiled{k}"]), graph_args, result = direct
                lines += [f"        compiled{k}.calls += 1", "        state.graph_calls += 1", "        try:",
                          f"            out = fn{k}({', '.join(_source(a, values) for a in graph_args)})",
                          "        except BaseException as e:", "            annotate(e)",
                          "            state.calls += 1", "            state.raised_calls += 1", "            raise",
                          "        state.calls += 1",
                          "        state.cache_hits += 1", "        if state.limited_frames:",
                          "            count_limited_frames(state, True)", f"        return {_source(result, values)}"]
                continue
            lines += ["        graphs, ran = state.graphs_made, state.graph_calls", "        try:"]
            if direct is not None:  # the graph called directly, its outputs returned as the transformed code would
                graph, graph_args, result = direct
                namespace[f"graph{k}"] = graph
                lines += [f"            out = graph{k}({', '.join(_source(a, values) for a in graph_args)})",
                          f"            out = {_source(result, values)}"]
            else:
                lines.append(f"            out = run{k}({arguments})")
            # A call that raises (KeyboardInterrupt too) is counted as the ordinary path counts it.
            lines += ["        except BaseException:", "            state.calls += 1",
                      "            state.raised_calls += 1", "            raise"] + counted + ["        return out"]
        lines.append("    return MISS")
        exec(compile("\n".join(lines), f"<thunder fast path {self.fn.__qualname__}>", "exec"), namespace)
        return namespace["call"]

    def call(self, args):
        """The compiled code's result for these positional arguments, or MISS (replaced by refresh())."""
        return MISS
