"""thunder's registry of what compiled traces call: kernels and other objects, by stable names.

A printed trace is a Python program that imports every name it uses. Names that are plain imports
(``math``, ``thunder.executors.torchex.autograd_vjp``) print as such; the rest -- the launchers of
generated kernels, opaque callables a graph holds (a bound method, a lambda returning an attribute), the
``_constants`` table of compile-time tensors -- are registered here while the compiled graph that made
them lives, and the trace imports them from this module::

    from thunder.core.registry import cpu_fusion0_3f2a9c1b0d4e as cpu_fusion0

so that ``exec`` of the printed text in a fresh namespace runs the same program. A kernel's name is its
name in the trace and a digest of its generated source (the same kernel gets the same name in every
process); other objects are named after their name in the trace and a digest of the graph that holds
them (``_opaque0_5e1d...``), with a counter appended when two different objects would share a name.

Entries are released when the last :class:`TraceNamespace` that registered them is garbage collected
(the compiled graph and every ``TraceView`` of it are gone); importing a released name raises
ImportError.
"""
import hashlib
import re
import sys
import types
import weakref

#: name -> [object, number of live namespaces that registered it]
_entries = {}

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# Comments, skipping over simple string literals (a '#' inside a string is not a comment).
_COMMENT = re.compile(r"(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')|#[^\n]*")


def digest(text: str, length: int = 12) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``text``: the suffix of stable names."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def __getattr__(name):
    """``from thunder.core.registry import <name>``: the registered object (ImportError if none)."""
    entry = _entries.get(name)
    if entry is None:
        raise AttributeError(f"thunder.core.registry: no live object is registered as {name!r} (the compiled "
                             "graph whose trace imported it has been freed)")
    return entry[0]


def lookup(name):
    """The object registered as ``name``. Raises KeyError if none is (or it was released)."""
    return _entries[name][0]


def registered_names():
    """The names registered now, sorted (for inspection and tests)."""
    return sorted(_entries)


def _acquire(name, obj, equivalent):
    """Registers obj as name, or shares the entry already there when it is obj (or, for kernels, equivalent).
    Returns the name used: name, or name_<k> when another object holds name."""
    candidate, k = name, 0
    while candidate in _entries:
        entry = _entries[candidate]
        if entry[0] is obj or equivalent:
            entry[1] += 1
            return candidate
        k += 1
        candidate = f"{name}_{k}"
    _entries[candidate] = [obj, 1]
    return candidate


def _release(names):
    for name in names:
        entry = _entries.get(name)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _entries[name]


def _import_statement(local, obj):
    """'import math' / 'from m import f as local' when importing gives back obj itself; else None."""
    if isinstance(obj, types.ModuleType):
        if sys.modules.get(obj.__name__) is not obj:
            return None
        if local == obj.__name__:
            return f"import {local}"
        return f"import {obj.__name__} as {local}"
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "." in qualname or "<" in qualname:
        return None
    # Only modules already imported: importing one here would run its code.
    if getattr(sys.modules.get(module), qualname, None) is not obj:
        return None
    return f"from {module} import {qualname}" + ("" if local == qualname else f" as {local}")


_NONE = object()  # no object exported under a name yet (None may be one)

#: Names every printed trace imports itself (csrc/ir/printer.cc).
STANDARD_NAMES = frozenset({"operator", "torch", "prims", "ltorch"})


class TraceNamespace(dict):
    """The globals a compiled graph's traces run in (names to the objects they call), which also knows how
    each name is imported: ``imports_for(text)`` gives the import statements a printed trace needs.

    Names are registered (:func:`export`) after the objects exist -- kernels after they are compiled; a
    trace printed before that (at TRACE logging, during compilation) lacks their imports.
    """

    def __init__(self, *args, graph_digest="", **kwargs):
        super().__init__(*args, **kwargs)
        self.graph_digest = graph_digest
        self.input_notes = {}   # input proxy id -> what it is in the user's program (ImportedGraph.input_notes)
        self._exported = {}     # local name -> the object its statement imports
        self.statements = {}   # local name -> import statement
        self._held = []         # registry names this namespace holds
        self._finalizer = weakref.finalize(self, _release, self._held)

    def copy_for(self, input_notes=True):
        """A new namespace with the same names (a shape signature's, the backward's: it adds its own kernels),
        exported as here (it holds their registry entries too). ``input_notes``: it keeps the notes printed after
        the inputs (False for a backward, whose inputs are other values)."""
        copy = TraceNamespace(self, graph_digest=self.graph_digest)
        copy.input_notes = self.input_notes if input_notes else {}
        copy.export(list(self.statements))  # the names exported here (opaque callables, _constants, kernels)
        return copy

    def export(self, names=None):
        """Makes the statements that import ``names`` (default: every name not yet exported), registering the
        objects that no plain import gives back. A kernel launcher names its registry name in its
        ``registry_name`` attribute; other objects are registered as ``<name>_<graph digest>``."""
        for local in list(self) if names is None else names:
            if local in STANDARD_NAMES or local.startswith("__"):
                continue
            obj = self[local]
            if self._exported.get(local, _NONE) is obj:
                continue
            statement = _import_statement(local, obj)
            if statement is None:
                kernel_name = getattr(obj, "registry_name", None) if callable(obj) else None
                name = _acquire(kernel_name or f"{local}_{self.graph_digest or digest(repr(id(self)))}", obj,
                                equivalent=kernel_name is not None)
                self._held.append(name)
                statement = f"from {__name__} import {name}" + ("" if name == local else f" as {local}")
            self.statements[local] = statement
            self._exported[local] = obj  # a name bound to another object later (a copy's own kernel) is made again

    def imports_for(self, text):
        """The import statements of the exported names that ``text`` (a printed trace) uses, sorted by name
        (numbers in order: cpu_fusion2 before cpu_fusion10)."""
        used = set(_IDENTIFIER.findall(_COMMENT.sub(lambda m: m.group(1) or "", text)))
        return [self.statements[local] for local in sorted(used & self.statements.keys(), key=_natural)]


def _natural(name):
    return re.sub(r"\d+", lambda m: m.group().zfill(10), name)
