"""Imports a Dynamo FX graph into a core trace.

Every FX node becomes one bound symbol. A node whose target the core knows
(its tables: fx_targets) becomes a native torch-level op, with the
core's shape and dtype rules; if the core declines (``NotNative``), rejects
the arguments, or computes metadata that differs from what Dynamo recorded,
the node is imported as an *opaque* op: the original callable, with Dynamo's
metadata, run by torch. So no program fails to compile for a missing op.
"""
import ast
import builtins
import contextlib
import itertools
import linecache
import math
import operator
import os
import re
import dataclasses
import functools
from dataclasses import dataclass, field

import torch
import torch.fx
import torch.nn.functional as F

from thunder import _core
from thunder.core import dtypes
from thunder.core.log import logger
from thunder.frontend import branches, global_state
from thunder.frontend.fx_effects import (
    _MUTATING_OPERATORS, _draws_random, _has_effect, _is_tensor, _may_write, _probed, _target_name)
from thunder.frontend.fx_targets import _ADAPTERS, _FUNCTIONS, _METHODS, _TensorArg, _write_lowering
from thunder.frontend.fx_memory import (
    _NotReplayable, _aliases_an_argument, _aliasing_decided_at_run_time, _argument_nodes, _assigns_region_to_itself,
    _expanded, _expanded_example, _fresh_outputs, _has_tensor_index, _input_itself, _laid_out_other_than_eager,
    _layout_dependent, _memory_of, _meta_example, _overlapping_source, _replayer, _returned, _returned_argument,
    _sharing, _storage, _storages, _used_through_data, _view_of_intermediate, _view_root, _viewed_memory,
    _views_an_argument, _written_through)


class UnsupportedGraph(Exception):
    """The graph holds something the importer cannot express (e.g. symbolic shapes); the caller runs it with torch."""


def check_dense(t):
    """Raises UnsupportedGraph for a tensor thunder does not compile: a nested one (``torch.nested``) or one of a
    layout other than ``torch.strided`` (sparse, mkldnn). Its graph then runs with torch as captured."""
    if t.is_nested or t.layout != torch.strided:
        raise UnsupportedGraph(f"a tensor of layout {t.layout}{' (nested)' if t.is_nested else ''}: thunder "
                               "compiles dense (strided) tensors only")


# (operator.imatmul is not here: torch.Tensor has no __imatmul__, so `x @= w` rebinds x to x @ w, writing nothing.)
#: Ops whose tensor index arguments may be out of range at run time (they raise only when run): a converted
#: branch holding one is not converted, since both arms run.
_INDEXING_WORDS = ("index", "gather", "scatter", "take", "embedding", "masked_select", "nonzero", "put")
#: Ops that check their arguments' values and raise (a class index out of range, a probability outside [0, 1], a
#: singular or indefinite matrix, a negative count): in a converted branch's arm not taken they would raise where
#: eager does not run them; an SVD (svd, pinverse, a matrix norm of order 2 or "nuc", cond) and a histogram raise on a
#: NaN. (Vector norms and binary_cross_entropy_with_logits check nothing; torch.norm does with p="nuc".)
_VALUE_CHECKING_WORDS = ("nll_loss", "cross_entropy", "margin_loss", "binary_cross_entropy", "one_hot", "linalg",
                         "inverse", "cholesky", "lu_factor", "solve", "ctc_loss", "bincount", "repeat_interleave",
                         "matrix_power", "svd", "pinverse", "nuclear_norm", "histc", "histogram")
_NOT_VALUE_CHECKING = ("vector_norm", "binary_cross_entropy_with_logits")


#: Integer divisions, which raise on a zero divisor (floating-point ones give inf or NaN).
_INTEGER_DIVISIONS = {operator.floordiv, operator.mod, operator.ifloordiv, operator.imod}
_DIVISION_WORDS = ("div", "mod", "remainder")  # floor_divide, __floordiv__, fmod, __rmod__, ... too
#: The type name a number proxy's meta gives for each kind of number Dynamo's example values hold.
_NUMBER_TYPES = {bool: "bool", int: "int", float: "float", torch.SymBool: "bool", torch.SymInt: "int",
                 torch.SymFloat: "float"}


def _integer_division_by_tensor(node, name):
    """Whether the node divides integers (``//``, ``%``, ``torch.remainder``, ``torch.div(..., rounding_mode=)``)
    by a tensor: torch raises when it holds a zero."""
    if node.target not in _INTEGER_DIVISIONS and not any(word in name for word in _DIVISION_WORDS):
        return False
    out = node.meta.get("example_value")
    if not isinstance(out, torch.Tensor) or out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
        return False
    if name.startswith("__r"):  # reflected: number // tensor as a method of the tensor
        divisor = node.args[0]
    else:
        divisor = node.args[1] if len(node.args) > 1 else node.kwargs.get("other")
    return isinstance(divisor, torch.fx.Node) and isinstance(divisor.meta.get("example_value"), torch.Tensor)


@dataclass
class ImportedGraph:
    trace: "_core.Trace"
    namespace: dict                      # names the trace's opaque symbols refer to
    fallbacks: list = field(default_factory=list)  # (node name, target, reason) for each opaque node
    sets_global_state: bool = False      # calls grad-mode/autocast/inference-mode setters (see global_state)
    branch_sites: list = field(default_factory=list)  # ids of the converted branches compiled (see branches)
    #: Outputs that eager returns as views of another output's or an input's memory (see OutputViews).
    output_views: list = field(default_factory=list)
    #: The graph runs inside a torch.autocast region entered before it (a graph break inside the `with` block) and
    #: its ops were not written as casts: their dtypes come from autocast's state at run time.
    under_autocast: bool = False
    #: The graph runs inside a torch.autocast region entered before it and its ops were written as casts: the
    #: trace's dtypes are the region's, so its program runs with autocast off (torch ops must not cast again: an op
    #: of a region turning autocast off computes in float32).
    autocast_written_out: bool = False
    #: For a trace with symbolic sizes (``import_graph(..., symbolic=True)``): (size symbol's proxy id, the
    #: position of the graph input that is its value) per symbol; :meth:`bind` gives them values.
    size_inputs: list = field(default_factory=list)
    #: The positions of tensor outputs that share no memory with an input in eager (Dynamo's example values tell).
    fresh_outputs: list = field(default_factory=list)
    #: Per output position, which memory its tensor has in eager: outputs of one number share memory, of two numbers
    #: not (None for a value that is not a tensor).
    output_memory: list = field(default_factory=list)
    #: Outputs a converted branch selects where an arm leaves them an input itself (SelectedInput); the trace
    #: returns the conditions they read, ``selected_conditions`` of them, after the graph's own outputs.
    selected_inputs: list = field(default_factory=list)
    selected_conditions: int = 0
    #: In training, where an output reaches other inputs requiring grad depending on the way the converted branches
    #: go (WayReaches): the trace also returns those branches' conditions, after the selected inputs' (counted in
    #: ``selected_conditions``).
    way_reaches: object = None
    #: The trace inputs that are non-leaf tensors requiring grad (an earlier graph's or eager code's results), which
    #: code after the graph may write in place before the backward: not free to save (split_forward_backward).
    activation_inputs: list = field(default_factory=list)
    #: The positions of the tensor inputs the graph uses only through ``x.data`` and writes through it, in a graph
    #: that computes nothing requiring grad (an optimizer's ``p.data.add_(...)``): the call passes ``x.data``
    #: for them, whose write bumps no version of x, as eager's does (a tensor autograd saved stays readable).
    data_inputs: list = field(default_factory=list)
    #: Output position (or ("input", input position) for an input the graph writes) -> the error eager's backward
    #: through that output raises (a write into a value an op saved for its backward: _backward_errors); an
    #: identity autograd node on that output raises it (compile._raising_in_backward), whichever backward the
    #: graph has.
    backward_errors: dict = field(default_factory=dict)
    #: {input proxy id: what the input is in the user's program} (``x``, ``self.fc1.weight``: _input_source),
    #: printed after the input's comment in the trace (its inputs are in the order Dynamo first used them).
    input_notes: dict = field(default_factory=dict)

    def bind(self, args) -> "ImportedGraph":
        """This graph for one call's arguments ``args``: its size symbols bound to the values of their inputs
        (``thunder._core.bind_sizes``), every shape of the trace an integer one; a size the decompositions' arithmetic
        reads as a number stays the input it is (``for_kernels``), so that a kernel takes it as an argument and
        serves every length. An import with static sizes is returned as it is."""
        if not self.size_inputs:
            return self
        values = {proxy: int(args[position]) for proxy, position in self.size_inputs}
        for proxy, position in self.size_inputs:
            if not -2**63 <= values[proxy] < 2**63:
                raise OverflowError(f"input {position} of the graph, an int read at run time ({values[proxy]}), is "
                                    "beyond int64: thunder's kernels and sizes are 64-bit")
        return dataclasses.replace(self, trace=_core.bind_sizes(self.trace, values, for_kernels=True), size_inputs=[])


@dataclass
class OutputViews:
    """Outputs of a graph that share one tensor's memory in eager: views of a *base* -- an input of the graph, or a
    tensor the graph computes. The compiled program returns the base (in place of each of them); the caller makes
    each output again from it (``replay``: the view ops that made it in eager, run by torch), so that they alias
    one another, and the input, as eager's do. A functionalized program would return them as separate tensors: a
    write through one (after a graph break) would not reach the others."""

    base_input: int     # the base is this input of the graph (-1: the base is computed, see base_output)
    base_output: int    # the output the compiled program returns the base in (-1 when the base is an input)
    members: list       # (output index, replay): replay(base, inputs) is that output, a view of base or base itself
    root: object = field(default=None, repr=False)  # the FX node that makes the base


@dataclass(frozen=True)
class WayReaches:
    """Per way the converted branches of a graph go, the inputs requiring grad each output reaches, for a backward
    given only some outputs' gradients: an input the given outputs reach only through an arm not taken gets None,
    as in eager, not the select's zeros (an unused output -- an intermediate Dynamo returns -- may reach it
    whichever way, so the graph as a whole reaches it: _check_arms_reach_the_same_leaves keeps the branch).
    ``table[way][k]``: the trace input positions output ``k`` reaches, the ways in ``itertools.product((True,
    False), repeat=count)``'s order; the conditions are the last ``count`` values the trace returns."""
    count: int
    table: tuple

    def reached(self, conditions, outputs):
        """The input positions ``outputs`` (output positions) reach, the branches going as ``conditions`` (the
        ``count`` conditions the trace returned, 0-d bool tensors) say."""
        way = 0
        for c in conditions:
            way = 2 * way + (0 if bool(c) else 1)
        return set().union(*(self.table[way][k] for k in outputs))


@dataclass
class SelectedInput:
    """An output a converted branch selects (``if c: y = y * 2``, then ``return y``) where the arm not writing it
    leaves an input itself, or a view of one: eager returns that input (or view) -- sharing its memory, so that
    writes reach the caller's tensor -- and the select a new tensor. ``choice`` is ``("input", k)``,
    ``("view", replay)`` (a view of an input, made again: fx_memory._replayer), ``("computed",)``,
    ``("over", replay, choice)`` (a view of a select: made again from what ``choice`` picks) or
    ``(j, then, else)``: condition ``j`` of those the trace returns after the graph's outputs picks ``then`` or
    ``else``."""

    output: int
    choice: tuple

    def pick(self, value, args, conditions):
        """The output eager returns: the input (or the view of one) the conditions lead to, else ``value``."""
        picked = _resolve_choice(self.choice, args, conditions)
        return value if picked is None else picked


def _resolve_choice(choice, args, conditions):
    """The tensor a SelectedInput's choice leads to for these inputs and conditions; None for a computed one."""
    while isinstance(choice[0], int):
        choice = choice[1] if bool(conditions[choice[0]]) else choice[2]
    kind = choice[0]
    if kind == "input":
        return args[choice[1]]
    if kind == "view":
        return choice[1](None, args)
    if kind == "over":
        base = _resolve_choice(choice[2], args, conditions)
        return None if base is None else choice[1](base, args)
    return None


#: Methods an explicit call of which is the operator (``c.__iadd__(1)`` is ``c += 1``): imported as that call.
_DUNDER_OPERATORS = {f"__{op.__name__}__": op for op in _MUTATING_OPERATORS}


#: Calls Dynamo records that neither return a value nor change one: left out of the trace, they are not opaque
#: effects (which keep a graph's backward with torch). Usage logging comes from constructing an nn.Module inside
#: forward (a Llama's ``self.layers[:n]`` makes a new ModuleList).
_IGNORED_CALLS = {torch._C._log_api_usage_once}


def _assert_statement(node):
    """The Python ``assert`` statement (an ``ast.Assert``) a ``torch._assert_async`` node is Dynamo's form of: the
    one in the source file that spans the line of the last frame of its stack trace (a statement over several
    lines included), or where the file cannot be read, the trace's last line parsed; None where that is no assert
    statement (a call of its own, no source)."""
    lines = [line.strip() for line in (node.meta.get("stack_trace") or "").splitlines() if line.strip()]
    frames = [m for m in (re.match(r'File "(.*)", line (\d+)', line) for line in lines) if m]
    try:
        path, lineno = frames[-1][1], int(frames[-1][2])
        asserts = _asserts_in("".join(linecache.getlines(path)))
    except (IndexError, SyntaxError):
        asserts = None
    if asserts:  # (an assert holds no statement: one spanning the line is the innermost statement there)
        spanning = [a for a in asserts if a.lineno <= lineno <= a.end_lineno]
        # Two on one line (`assert a; assert b, "msg"`): the one whose message Dynamo passed.
        message = node.args[1] if len(node.args) > 1 else None
        return next((a for a in spanning if isinstance(a.msg, ast.Constant) and a.msg.value == message),
                    next((a for a in spanning if a.msg is None), spanning[0] if spanning else None))
    if not lines or not lines[-1].startswith("assert"):
        return None
    try:
        statement = ast.parse(lines[-1]).body[0]
    except SyntaxError:
        return None
    return statement if isinstance(statement, ast.Assert) else None


@functools.lru_cache(maxsize=16)
def _asserts_in(source):
    """The assert statements of a module's source."""
    return tuple(s for s in ast.walk(ast.parse(source)) if isinstance(s, ast.Assert))


def _python_assert(condition, message=None, without_message=False):
    """A Python ``assert`` on a tensor, as eager runs it: AssertionError (with the statement's message, or none)
    where the condition is false. Dynamo writes the statement as ``torch._assert_async``, which raises
    RuntimeError."""
    if not condition:
        raise AssertionError() if without_message or message is None else AssertionError(message)


_PUBLIC_MODULES = {"torch": torch, "torch.nn.functional": F, "torch.special": torch.special, "torch.fft": torch.fft,
                   "torch.linalg": torch.linalg, "operator": operator, "math": math, "builtins": builtins}
_PUBLIC_NAMES = {}  # id(callable) -> dotted name, filled on first use


def _qualified_name(fn):
    """'torch.nn.functional.gelu' if importing that path gives back fn, else None.

    Found by identity, not by ``__name__``: torch.fft.fft is named "fft_fft" and torch.special.i0 "special_i0"."""
    for module_name, module in _PUBLIC_MODULES.items():
        name = getattr(fn, "__name__", None)
        if name and getattr(module, name, None) is fn:
            return name if module_name == "builtins" else f"{module_name}.{name}"
    if not _PUBLIC_NAMES:
        for module_name, module in reversed(_PUBLIC_MODULES.items()):
            if module_name in ("builtins", "math", "operator"):
                continue
            for attr, obj in vars(module).items():
                if not attr.startswith("_") and callable(obj):
                    _PUBLIC_NAMES[id(obj)] = f"{module_name}.{attr}"
    name = _PUBLIC_NAMES.get(id(fn))
    return name if name is not None and _resolve(name) is fn else None


def _resolve(dotted):
    module_name, _, attr = dotted.rpartition(".")
    return getattr(_PUBLIC_MODULES[module_name], attr, None)


def source_of(node):
    """'model.py:28 in forward: x = self.fc1(x)' from an FX node's stack trace, or ''."""
    stack = node.meta.get("stack_trace") or ""
    lines = [l for l in stack.strip().splitlines() if l.strip()]
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line.startswith("File "):
            try:
                path = line.split('"')[1]
                lineno = int(line.split("line ")[1].split(",")[0])
                fn = line.rsplit(" in ", 1)[1]
            except (IndexError, ValueError):
                return ""
            if path == branches.__file__:  # a converted branch's marker or select: the user's `if` is a frame up
                continue
            if path.startswith("<thunder: calls "):  # the wrapper's call of one of torch's own modules or functions
                return f"in {path[len('<thunder: calls '):-1]}"
            code = linecache.getline(path, lineno).strip() or (lines[i + 1].strip() if i + 1 < len(lines) else "")
            return f"{os.path.basename(path)}:{lineno} in {_user_function(fn, lines[:i])}: {code}"
    return ""


_ARM_FUNCTION = re.compile(r"_thunder_(then|else)_\d+")
_RESUME_FUNCTION = re.compile(r"torch_dynamo_resume_in_(\w+)_at_\d+")


def _user_function(fn, outer_lines):
    """The user's name for the function a frame runs: for an arm of a converted branch (``_thunder_then_3``, a
    function thunder wrote) the one whose ``if`` it was -- the nearest frame outside the arms in the stack trace's
    ``outer_lines``, or where the arm runs as a frame of its own, the function it was written for; for the code
    after a graph break (Dynamo's ``torch_dynamo_resume_in_f_at_4``) ``f``."""
    for line in reversed(outer_lines):
        if not _ARM_FUNCTION.fullmatch(fn):
            break
        line = line.strip()
        if line.startswith("File ") and " in " in line and line.split('"')[1:2] != [branches.__file__]:
            fn = line.rsplit(" in ", 1)[1]
    fn = branches.ARM_OWNERS.get(fn, fn)  # an arm run as a frame of its own (its branch given up)
    resumed = _RESUME_FUNCTION.fullmatch(fn)
    return resumed[1] if resumed else fn


class _AutocastNotExplicit(Exception):
    """An autocast region this importer cannot write as casts (see _Importer._autocast_op)."""


#: torch's autocast lists (aten/src/ATen/autocast_mode.cpp), per device type, by the names the FX graph calls
#: them: (ops whose floating operands on that device are cast to the region's dtype, ops whose floating operands
#: are cast to float32). CUDA's float32 ops include those that take an output dtype and default it to float32
#: there (softmax, sum, ...: an upcast before them computes alike). tests/test_autocast_cuda.py checks the CUDA
#: lists against torch's own CUDA autocast on fake CUDA tensors.
_AUTOCAST_LISTS = {
    "cpu": ({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d", "conv3d",
             "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention",
             "__matmul__"},
            {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
             "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss", "margin_ranking_loss",
             "hinge_embedding_loss", "poisson_nll_loss", "cosine_embedding_loss", "multilabel_margin_loss",
             "multi_margin_loss", "triplet_margin_loss", "ctc_loss", "prod", "cdist", "polar", "stft", "grid_sample",
             "quantile", "nanquantile", "avg_pool3d"}),
    "cuda": ({"linear", "matmul", "mm", "bmm", "addmm", "addmv", "addr", "baddbmm", "addbmm", "mv", "einsum",
              "chain_matmul", "linalg_multi_dot", "linalg_vecdot", "conv1d", "conv2d", "conv3d", "conv_tbc",
              "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention",
              "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "__matmul__"},
             {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
              "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm", "cosine_similarity",
              "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss",
              "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
              "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits",
              "cross_entropy", "dist", "pdist", "cdist", "renorm", "logsumexp", "softmax", "log_softmax", "sum",
              "prod", "cumsum", "cumprod", "linalg_vector_norm", "linalg_matrix_norm", "rms_norm"}),
}


class _Importer:
    def __init__(self, gm: torch.fx.GraphModule, example_inputs, symbolic=False, explicit_autocast=True):
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.symbolic = symbolic
        self.symbols = {}        # Dynamo's size symbol (sympy) -> its _core.Dim, with symbolic=True
        self.size_inputs = []    # (symbol's proxy id, input position)
        self.input_sources = []  # per placeholder (each a trace input, in order), what it is: _input_source
        self.data_numbers = set()  # nodes whose numbers come from tensor data (x.item()), not from sizes
        self.builder = _core.TraceBuilder()
        self.env = {}            # fx node -> core value (proxy, number, tuple of proxies, ...)
        self.namespace = {}      # opaque callables by printed name
        self.fallbacks = []
        self.sets_global_state = False
        # torch.autocast regions written into the trace as casts (see _autocast_call): (device type, lower-precision
        # dtype, its enter node or None) of each open region (dtype None: a region turning autocast off), innermost
        # last; for an op on a device, that device's innermost region decides.
        self.explicit_autocast = explicit_autocast
        self.autocast = []
        # A graph Dynamo starts inside a region (after a graph break within the `with` block; its guards fix the
        # autocast state) is all inside it.
        outer = [d for d in _AUTOCAST_LISTS if torch.is_autocast_enabled(d)]
        self.outer_autocast = len(outer)
        if outer and explicit_autocast:
            self.autocast += [(d, torch.get_autocast_dtype(d), None) for d in outer]
        self.opaque_calls = 0    # ops imported as opaque torch calls
        self.regions = []        # open converted branches: (site, predicate proxy), innermost last
        # Per open converted branch (as regions): [its site, the arm being imported (0: then, 1: else)]; and the
        # memory each arm read into a value that requires grad -> [(that branch's entry, the arm)] (_note_arm_reads)
        self.open_arms = []
        self.arm_reads = {}
        # The memory each opaque view op views (None: not known): later writes into it are not lowered (_opaque).
        self.opaque_views = []
        self.writes = None  # whether any node of the graph may write into a tensor (_may_write), once asked
        self.written_memory = {}  # probe -> _written_memory(probe), once asked
        self.grad_written = set()  # the memory of the arguments of each write so far that read a value requiring grad
        self.computes_grad = None  # whether an op of the graph makes a tensor that requires grad, once asked
        self.region_sites = {}   # branch_begin node -> its site
        # The outputs that are inputs a converted branch may select and the branch_begin nodes whose conditions
        # pick them (_selected_inputs), once the first branch begins; and a copy of each such condition, made where
        # its branch begins (a condition written later, `if flag: ...; flag.logical_not_()`, keeps its value).
        self.selected = None
        self.way_reaches = None  # (the condition nodes, per way: per output position, the inputs it reaches)
        self.condition_copies = {}
        self.output_views = None  # (_output_views of the graph's outputs, the UnsupportedGraph it raised), once
        self.selects = []        # (select node, site, memory of its operands) of each name converted branches bind
        # (site, the inputs requiring grad it joins) of each write in a converted branch's arm into a tensor the
        # graph made, joining it to inputs it was not computed from (see _check_in_branch)
        self.arm_writes = []
        self.order = {n: k for k, n in enumerate(gm.graph.nodes)}
        self.examples = {}       # placeholder -> its example value
        self.input_memory = None  # _input_memory, made on first use
        self.by_memory = None    # memory (_storage) -> the nodes whose tensors live in it, made on first use
        self.branch_sites = []   # sites whose branches this graph compiles to selects
        # Grad mode where the node being imported runs (None: unknown), and the modes inference-mode regions saved.
        self.grad_enabled = torch.is_grad_enabled()  # Dynamo guards on the grad mode the graph is entered with
        self.grad_modes = []
        self.grad_input_memory = {id(_memory_of(n.meta["example_value"])) for n in gm.graph.nodes
                                  if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.Tensor)
                                  and n.meta["example_value"].requires_grad}  # the memory of inputs that require grad
        self.grad_input_storage = None  # their memory as _storage gives it, made on first use
        self.records_grad_somewhere = self.grad_enabled or any(
            n.op == "call_function" and n.target is torch._C._set_grad_enabled and n.args and n.args[0] is not False
            for n in gm.graph.nodes)

    # -- values --
    def _new_output(self, example):
        """A fresh proxy (or structure of proxies) with the metadata of Dynamo's example value."""
        if example is None:
            return None
        if isinstance(example, torch.Tensor):
            return self._tensor_proxy(example)
        if isinstance(example, (list, tuple)):
            return tuple(self._new_output(e) for e in example)
        if isinstance(example, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.builder.new_number(_number_type(example))
        raise UnsupportedGraph(f"an op returned a {type(example).__name__}")

    def _note_eager_layout(self, value, example):
        """Records a computed tensor's strides in eager where they are not contiguous (Dynamo's example value): an
        elementwise result of a transposed input is transposed in eager, so a later ``contiguous()`` of it copies
        and a ``.t().contiguous()`` views, which functionalization must know where the graph writes in place."""
        if isinstance(value, _core.Proxy) and isinstance(example, torch.Tensor):
            if all(isinstance(s, int) for s in example.stride()) and not example.is_contiguous():
                self.builder.set_eager_strides(value, [int(s) for s in example.stride()])
        elif isinstance(value, (tuple, list)) and isinstance(example, (tuple, list)) and len(value) == len(example):
            for v, e in zip(value, example):
                self._note_eager_layout(v, e)

    def _size(self, s):
        """A size of Dynamo's as the core's: an int, or (symbolic=True) a ``_core.Dim``, a polynomial in the size
        symbols the graph's inputs hold. UnsupportedGraph for any other expression (``s0 // 2``: the graph is
        compiled per concrete shape instead)."""
        if isinstance(s, int):
            return s
        if not self.symbolic:
            raise UnsupportedGraph("symbolic shapes")
        return _dim_of(s.node.expr, self.symbols)

    def _sizes(self, node, example):
        """A size, or a tuple of sizes and ints (``x.size()``), of a node that computes only with sizes."""
        if isinstance(example, (tuple, list)):
            return tuple(self._sizes(node, e) for e in example)
        if isinstance(example, (torch.SymFloat, torch.SymBool)) or not isinstance(example, (int, torch.SymInt)):
            raise UnsupportedGraph(f"{node.name} is a symbolic {type(example).__name__}")
        return self._size(example)

    def _tensor_proxy(self, t, input=False):
        check_dense(t)
        if not dtypes.is_core_dtype(t.dtype):
            raise UnsupportedGraph(f"dtype {t.dtype}")
        shape = [self._size(s) for s in t.shape]
        args = (dtypes.to_core(t.dtype), shape, dtypes.device_str(t.device),
                bool(t.requires_grad) if input else self._records_grad(t))
        if input and any(isinstance(s, _core.Dim) for s in shape):
            # Kernels read a non-contiguous input in place with its strides fixed by the guards: not one whose
            # sizes change.
            expected = 1
            for size, stride in reversed(list(zip(shape, t.stride()))):
                if size != 1 and self._size(stride) != expected:
                    raise UnsupportedGraph("a non-contiguous input with symbolic sizes")
                expected = expected * size
            return self.builder.add_input_tensor(*args, [])
        if input and not all(isinstance(s, int) for s in t.stride()):
            # Strides Dynamo made symbolic (a stride that changed between calls) vary under the graph's guards: int()
            # of one is the hint of one call, which a kernel reading the input in place must not bake in.
            raise UnsupportedGraph("an input with symbolic strides")
        if input:  # Dynamo's guards fix an input's strides: kernels may read a non-contiguous one in place
            strides = [] if t.is_contiguous() else [int(s) for s in t.stride()]
            return self.builder.add_input_tensor(*args, strides)
        return self.builder.new_tensor(*args)

    def _arg(self, a, tensor_args=False):
        """An FX argument as a core value: nodes -> proxies, dtypes -> core dtypes, others -> literals."""
        if isinstance(a, torch.fx.Node):
            v = self.env[a]
            if tensor_args and isinstance(v, _core.Proxy):
                meta = self.builder.meta(v)
                if meta[0] != "number":
                    return _TensorArg(v, meta[0], meta[2])
            return v
        if isinstance(a, (list, tuple)):
            items = [self._arg(x, tensor_args) for x in a]
            return items if isinstance(a, list) else tuple(items)
        if isinstance(a, slice):
            return slice(self._arg(a.start), self._arg(a.stop), self._arg(a.step))
        if isinstance(a, torch.dtype):
            return dtypes.to_core(a) if dtypes.is_core_dtype(a) else _core.Literal(str(a))
        if isinstance(a, torch.device):
            return dtypes.device_str(a)
        if a is None or a is Ellipsis or isinstance(a, (bool, int, float, str)):
            return a
        if isinstance(a, (torch.memory_format, torch.layout)):
            return _core.Literal(str(a))
        return self._register(a, "_const")

    def _register(self, obj, prefix):
        name = f"{prefix}{len(self.namespace)}"
        self.namespace[name] = obj
        return _core.Literal(name)

    def _unwrap(self, v):
        if isinstance(v, _TensorArg):
            return v.proxy
        if isinstance(v, (list, tuple)):
            items = [self._unwrap(x) for x in v]
            return items if isinstance(v, list) else tuple(items)
        if isinstance(v, dict):  # keyword arguments: F.cross_entropy(x, t, weight=w)
            return {k: self._unwrap(x) for k, x in v.items()}
        return v

    # -- nodes --
    def run(self):
        inputs = iter(self.example_inputs)
        placeholders = []
        for node in self.gm.graph.nodes:
            if node.op == "call_method" and node.target in _DUNDER_OPERATORS:  # the same call, as an operator's
                node.op, node.target = "call_function", _DUNDER_OPERATORS[node.target]
            _transpose_property_as_method(node)
        for node in self.gm.graph.nodes:
            self.builder.set_source(source_of(node))
            if node.op == "placeholder":
                example = node.meta.get("example_value", next(inputs, None))
                placeholders.append((node, example))
                self.examples[node] = example
                if isinstance(example, torch.Tensor):
                    self.env[node] = self._tensor_proxy(example, input=True)
                elif self.symbolic and isinstance(example, torch.SymInt):
                    self.env[node] = self._size_input(node, example, len(placeholders) - 1)
                elif isinstance(example, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
                    self.env[node] = self.builder.add_input_number(_number_type(example))
                else:
                    raise UnsupportedGraph(f"input {node.name} of type {type(example).__name__}")
                self.input_sources.append(_input_source(node))
            elif node.op == "get_attr":
                value = getattr(self.gm, node.target)
                if isinstance(value, torch.fx.GraphModule):  # a torch.cond branch: inlined where it is called
                    self.env[node] = value
                    continue
                callee = self._register(lambda value=value: value, "_attr").text
                self.env[node] = self.builder.opaque(callee, [], {}, self._new_output(value), True)
            elif node.op == "call_function" and node.target in _IGNORED_CALLS and not node.users:
                self.env[node] = None  # a call torch makes for its own bookkeeping, no value: not an effect
            elif node.op in ("call_function", "call_method"):
                self.env[node] = self._call(node)
                self._note_eager_layout(self.env[node], node.meta.get("example_value"))
                if self.grad_enabled is not False and _may_write(node, probe=False) and self._reads_grad(node):
                    self.grad_written |= _storages(self._example(m) for m in node.all_input_nodes)
            elif node.op == "output":
                if self.regions:
                    raise branches.BranchRejected(self.regions[-1][0], "a graph break splits the branch")
                if self.selects:
                    self._check_selected_outputs(node)
                if self.selects or self.arm_writes:
                    self._check_arms_reach_the_same_leaves(node)
                out = self._unwrap(self._arg(node.args[0]))
                views, fresh, memory, selected, selected_conditions = [], [], [], [], 0
                if isinstance(node.args[0], (tuple, list)):
                    views, error = self._views_of_outputs(list(node.args[0]), placeholders)
                    if error is not None:
                        raise error
                    fresh = _fresh_outputs(list(node.args[0]), placeholders)
                    storages = [_storage(n.meta.get("example_value")) if isinstance(n, torch.fx.Node) else None
                                for n in node.args[0]]
                    # (StorageWeakRef's == reads the other's cdata: None is never compared)
                    memory = [None if s is None else
                              next(i for i, t in enumerate(storages) if t is not None and t == s) for s in storages]
                    out = list(out)
                    for group in views:  # each output made again from the base: the program returns the base
                        base = placeholders[group.base_input][0] if group.base_input >= 0 else group.root
                        for i, _ in group.members:
                            out[i] = self.env[base]
                    selected, conditions = self.selected or ([], [])
                    if self.way_reaches is not None:
                        conditions = list(conditions) + list(self.way_reaches[0])
                    out = tuple(out) + tuple(self.condition_copies[c] for c in conditions)
                    selected_conditions = len(conditions)
                if self.explicit_autocast and self.outer_autocast:
                    self.autocast = [r for r in self.autocast if r[2] is not None]
                if self.autocast:
                    raise _AutocastNotExplicit("a graph break inside an autocast region")
                trace = self.builder.finish(out)
                notes = {} if len(trace.inputs) != len(self.input_sources) else \
                    {p.id: source for p, source in zip(trace.inputs, self.input_sources)}
                return ImportedGraph(trace, self.namespace, self.fallbacks, self.sets_global_state,
                                     self.branch_sites, views, size_inputs=self.size_inputs,
                                     under_autocast=bool(self.outer_autocast) and not self.explicit_autocast,
                                     autocast_written_out=bool(self.outer_autocast) and self.explicit_autocast,
                                     fresh_outputs=fresh, output_memory=memory, selected_inputs=selected,
                                     selected_conditions=selected_conditions,
                                     way_reaches=self._way_reaches_of(trace),
                                     activation_inputs=[self._unwrap(self.env[n]) for n, e in placeholders
                                                        if isinstance(e, torch.Tensor) and e.requires_grad
                                                        and not e.is_leaf],
                                     data_inputs=[] if self._computes_grad() else _used_through_data(placeholders),
                                     input_notes=notes)
            else:
                raise UnsupportedGraph(f"FX op {node.op}")
        raise UnsupportedGraph("graph without output")

    def _size_input(self, node, example, position):
        """A graph input that is a size symbol of Dynamo's (``s0: torch.SymInt``): an int input of the trace,
        and the symbol every size computed from it is a polynomial in."""
        import sympy

        expr = example.node.expr
        if isinstance(expr, sympy.Integer):
            # Dynamo specialized it (an int argument of 0 or 1 under dynamic=True: generate's logits_to_keep=1), and
            # its guards fix the value: a constant of the trace; the input stays (the calling convention).
            self.builder.add_input_number(_number_type(example))
            return int(expr)
        if not isinstance(expr, sympy.Symbol):
            raise UnsupportedGraph(f"size input {node.name} = {expr}")
        if expr in self.symbols:  # a second input with the same size (Dynamo gives equal sizes one symbol)
            proxy = self.builder.add_input_number(_number_type(example))
        else:
            proxy = self.builder.add_input_number(_number_type(example), str(expr))
            self.symbols[expr] = _core.Dim.symbol(proxy)
        self.size_inputs.append((proxy.id, position))
        return self.symbols[expr]

    def _reads_data(self, node) -> bool:
        """Whether node's number is read from tensor data (``x.item()``: Dynamo passes a float module attribute
        or argument as a 0-d tensor under ``dynamic=True``) or computed from one. Such a number is a value of the
        call, computed at run time like in a static graph, not a size."""
        if node.op == "call_method" and node.target == "item" or \
                any(n in self.data_numbers for n in node.all_input_nodes):
            self.data_numbers.add(node)
            return True
        return False

    def _call(self, node):
        if self.symbolic and _has_symbolic_number(node.meta.get("example_value")) and not self._reads_data(node):
            # Size arithmetic (x.size(1) * 2, x.size()): the core computes with the sizes it stands for, no symbol.
            return self._sizes(node, node.meta["example_value"])
        # Indexing a multi-output node selects one of its proxies: no symbol needed.
        if node.op == "call_function" and node.target is operator.getitem:
            base = self.env.get(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
            if isinstance(base, (tuple, list)):
                return base[node.args[1]]
        if node.op == "call_function" and node.target in branches.MARKERS:
            return self._marker(node)
        if node.op == "call_function" and node.target is torch.ops.higher_order.cond:
            return self._cond(node)
        if node.op == "call_function" and node.target is torch.ops.higher_order.autograd_function_apply:
            return self._autograd_function(node)
        if node.op == "call_function" and node.target is torch.ops.higher_order.tag_activation_checkpoint:
            # torch.utils.checkpoint: its body is inlined. The values and gradients are the body's; which
            # activations are saved or recomputed is the rematerialization pass's choice, as for the rest.
            return tuple(self._inline(self.env[node.args[0]], [self._arg(a) for a in node.args[1:]]))
        if node.op == "call_function" and node.target in global_state.CALLEES:
            if self.regions:
                raise branches.BranchRejected(self.regions[-1][0], "it changes grad mode, autocast or inference mode")
            if self._autocast_call(node):
                return None
            return self._global_state(node)
        if self.arm_reads:
            self._check_writes_after_arm_reads(node)
        if self.regions:
            self._check_in_branch(node)
        if self.selects:
            self._check_selected_names(node)
        if self.autocast:
            return self._autocast_op(node)
        return self._call_op(node)

    def _call_op(self, node):
        if node.op == "call_function" and node.target is _SET_INPLACE_REQUIRES_GRAD_ALLOWED:
            return None  # Dynamo's bracket around an in-graph requires_grad_() (see _requires_grad_call)
        if node.op == "call_method" and node.target == "requires_grad_":
            return self._requires_grad_call(node)
        written = self._write(node)
        if written is not _NOT_A_WRITE:
            return written
        if _assigns_region_to_itself(node):
            return None  # nothing to write; thunder's view of the region may differ from eager's in its strides
        if "example_value" in node.meta and node.meta["example_value"] is None and node.users:
            raise UnsupportedGraph(f"{_target_name(node)} returns a Python object that later ops use "
                                   "(a trace holds only tensors and numbers)")
        same = _returns_an_input(node)
        if same is not None and not _layout_dependent(node, same):
            return self.env[same]  # x.float() of a float32 x, x.contiguous() of a contiguous input: x itself
        kind = "method" if node.op == "call_method" else "function"
        name = _METHODS.get(node.target) if kind == "method" else _FUNCTIONS.get(node.target)
        native = None if name is None else lambda: self._native(node, kind, name)
        if node.target is operator.truediv and not _is_tensor(node.args[0]) and _is_tensor(node.args[1]):
            native = lambda: self._rtruediv(node)  # noqa: E731
        if node.op == "call_function" and str(node.target) == "prims.fma.default":
            native = lambda: self._fma(node)  # noqa: E731
        rejected = False
        if node.target is torch._C._autograd._get_data_attr and self._computes_grad() and _written_through(node):
            # x.data has a version counter of its own: a write through it bumps none of x's, so a tensor autograd
            # saved stays readable. Native, it is x.detach(), which shares x's: in a graph that computes values
            # requiring grad, such a write made its backward raise ("modified by an inplace operation", "A view was
            # created in no_grad mode") where eager's runs. torch makes it there (an opaque view: writes after it run
            # in place). (An optimizer's step through p.data computes none, and an x.data only read writes nothing:
            # those stay native.)
            self.fallbacks.append((node.name, _target_name(node), "x.data written through in a graph that computes "
                                   "values requiring grad: the write must bump no version of x"))
            native = None
        if native is not None and self._derivative_not_implemented(node):
            # Autograd has no derivative for it (heaviside, floor_divide of a tensor that requires grad): eager's
            # output requires grad and a backward through it raises "derivative for aten::heaviside is not
            # implemented". Native, thunder's rules made it non-differentiable (None or zero gradients). torch runs
            # it, and its autograd raises the same.
            self.fallbacks.append((node.name, _target_name(node), "autograd has no derivative for it: a backward "
                                   "through it raises, as eager's"))
            native = None
        if native is not None and _aliasing_decided_at_run_time(node) and \
                node.kwargs.get("training", node.args[2] if len(node.args) > 2 else None) is not False and \
                any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values())) and \
                (self._graph_may_write() or _returned(node)):
            # Its native form with p read at run time is a product with ones for p = 0, where eager's is the input
            # itself, which a write into either then reaches: a write in the graph, or the caller's into what it
            # returns. (Not training, it is the input itself.)
            self.fallbacks.append((node.name, _target_name(node), "dropout whose p is read at run time, in a graph "
                                   "that writes into a tensor or returning it: eager's may be its input itself"))
            native = None
        if native is not None:
            try:
                return native()
            except (_core.NotNative, _core.OpError, TypeError, ValueError, KeyError, IndexError) as e:
                self.fallbacks.append((node.name, _target_name(node), f"{type(e).__name__}: {e}"))
                logger.debug("thunder: %s (%s) runs as an opaque torch op: %s", node.name, _target_name(node), e)
                rejected = isinstance(e, _core.OpError)
        return self._opaque(node, rejected)

    def _computes_grad(self):
        """Whether some op of the graph makes a tensor that requires grad (Dynamo's example values tell)."""
        if self.computes_grad is None:
            self.computes_grad = any(
                isinstance(e, torch.Tensor) and e.requires_grad for n in self.order
                if n.op in ("call_function", "call_method")
                for e in (lambda v: v if isinstance(v, (tuple, list)) else [v])(n.meta.get("example_value")))
        return self.computes_grad

    def _may_write_memory_of(self, view):
        """Whether a node of the graph that may write (_may_write) reads or writes a tensor sharing memory with what
        the opaque ``view`` op views: only then must the view be ordered with the writes, an effect. (An opaque
        slice of a buffer nothing writes, ``position_ids[:, :n]`` by a symbolic length, in a graph that writes a
        fresh mask, is none: as an effect, it sent the graph's backward to torch.) True where that memory is not
        known (_viewed_memory)."""
        base = _viewed_memory(view)
        return base is None or base in self._written_memory()

    def _derivative_not_implemented(self, node):
        """Whether autograd has no derivative for ``node``'s op with the arguments it has here (its output's autograd
        node is ``NotImplemented``). Dynamo's example says so, unless a later in-place op replaced that node (``h =
        torch.heaviside(x, y); h.mul_(2)``: the example's is MulBackward0): where the graph writes the output's
        memory, the op runs once more on meta tensors of one element per dim, with the arguments that read a value
        requiring grad requiring grad (an op that fails there is taken to have a derivative)."""
        example = node.meta.get("example_value")
        if type(getattr(example, "grad_fn", None)).__name__ == "NotImplemented":
            return True
        if not isinstance(example, torch.Tensor) or self.grad_enabled is False or \
                _storage(example) not in self._written_memory(probe=False) or not self._reads_grad(node):
            return False

        def meta(a):
            e = self._example(a) if isinstance(a, torch.fx.Node) else None
            if not isinstance(e, torch.Tensor):
                return a
            grad = (e.dtype.is_floating_point or e.dtype.is_complex) and self._holds_grad(a)
            t = torch.empty((1,) * e.dim(), dtype=e.dtype, device="meta")
            return t.requires_grad_().clone() if grad else t  # not a leaf: an in-place op may write it
        try:
            with torch.enable_grad():
                args, kwargs = torch.fx.node.map_aggregate((node.args, node.kwargs), meta)
                out = getattr(args[0], node.target)(*args[1:], **kwargs) if node.op == "call_method" else \
                    node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 -- an op meta tensors cannot run: the example's node stands
            return False
        return type(getattr(out, "grad_fn", None)).__name__ == "NotImplemented"

    def _written_memory(self, probe=True):
        """The memory (_storage) of every argument of a node of the graph that may write (_may_write; ``probe``
        False: the writes its names and schemas tell, without running every op on fake tensors, which is slow)."""
        if probe not in self.written_memory:
            self.written_memory[probe] = _storages(a.meta.get("example_value") for n in self.order
                                                   if n.op in ("call_function", "call_method") and
                                                   _may_write(n, probe=probe) for a in n.all_input_nodes)
        return self.written_memory[probe]

    def _into_an_opaque_view(self, destination):
        """Whether a write into ``destination`` (an FX node) may write memory an opaque view op views: the write is
        then not lowered but runs in place, as eager's (functionalization cannot follow the opaque view)."""
        memory = _storage(destination.meta.get("example_value")) if isinstance(destination, torch.fx.Node) else None
        return any(v is None or memory is None or v == memory for v in self.opaque_views)

    def _graph_may_write(self):
        """Whether some node of the graph may write into a tensor (_may_write); asked once."""
        if self.writes is None:
            self.writes = any(_may_write(n) for n in self.order if n.op in ("call_function", "call_method"))
        return self.writes

    def _native(self, node, kind, name):
        out = self._native_value(kind, node.target if kind == "method" else name, name, node.args, node.kwargs)
        self._check_meta(node, out)
        return out

    def _native_value(self, kind, adapter_key, name, fx_args, fx_kwargs):
        """The native op ``name`` applied to FX arguments, through the argument adapter of (kind, adapter_key)."""
        args = self._arg(list(fx_args), tensor_args=True)
        kwargs = {k: self._arg(v, tensor_args=True) for k, v in fx_kwargs.items()}
        if "axis" in kwargs and "dim" not in kwargs:  # torch's argument parser takes `axis` for any `dim`
            kwargs["dim"] = kwargs.pop("axis")
        adapter = _ADAPTERS.get((kind, adapter_key))
        if adapter is not None:
            adapted = adapter(args, kwargs)
            if len(adapted) == 3:
                name, args, kwargs = adapted
            else:
                args, kwargs = adapted
        return self.builder.call("ltorch", name, self._unwrap(list(args)), self._unwrap(kwargs))

    # -- writes: in-place ops become the out-of-place op and an ltorch.copy_ (the functionalization pass removes it) --

    def _write(self, node):
        """Lowers a write -- an in-place method (``x.add_(y)``), an augmented assignment (``x += y``), a subscript
        assignment (``x[i] = v``), ``inplace=True``, ``out=`` -- into the out-of-place op and
        ``ltorch.copy_(destination, value)``; returns the destination proxy (what the node evaluates to), or
        _NOT_A_WRITE if the node is not a write this can lower (it is then imported as usual: an opaque effect)."""
        lowering = _write_lowering(node)
        if lowering is None or self._into_an_opaque_view(lowering[0]) or self._derivative_not_implemented(node):
            return _NOT_A_WRITE  # (an op autograd cannot differentiate runs with torch: _call_op says why)
        destination, compute = lowering
        if self.regions and self._writes_a_grad_input(destination):
            raise branches.BranchRejected(self.regions[-1][0], "it writes into an input that requires grad: the "
                                          "copy-back would write it (and bump its version, which autograd checks) "
                                          "where eager's untaken branch does not")
        if self._writes_expanded_memory(destination):  # eager writes what it names; torch runs it in place
            self.fallbacks.append((node.name, _target_name(node), "write not lowered: its destination is expanded "
                                   "(elements share memory)"))
            return _NOT_A_WRITE
        overlap = _overlapping_source(node, destination)
        if overlap is not None:  # eager decides (it raises where the overlap is partial): the write runs in place
            self.fallbacks.append((node.name, _target_name(node), f"write not lowered: its destination and "
                                   f"{overlap.name} share memory, not element for element or for an op reading "
                                   "other elements than it writes"))
            return _NOT_A_WRITE
        dst = self.env.get(destination) if isinstance(destination, torch.fx.Node) else None
        if not isinstance(dst, _core.Proxy) or self.builder.meta(dst)[0] == "number":
            return _NOT_A_WRITE
        original = self._original_value(destination, dst)
        try:
            self.env[destination] = original  # what the out-of-place op reads of the destination
            target, value = compute(self, dst)
            tensor_value = isinstance(value, _core.Proxy) and self.builder.meta(value)[0] != "number"
            if self.grad_enabled is False and tensor_value:
                # Grad mode is off: the value written requires no grad, though it is computed from a tensor that
                # does (an optimizer's parameter), so its ops may fuse. (Values of ops that are not writes take
                # requires_grad from Dynamo's example values, which say the same.) A tensor written as it is
                # (`ema.copy_(p)`) is detached: the copy-back into an input runs after grad mode is back on, and
                # recorded the copy (the caller's `ema` came to require grad).
                read = [self.env.get(a) for a in node.all_input_nodes]
                if self.builder.meta(value)[3] and any(isinstance(v, _core.Proxy) and v.id == value.id for v in read):
                    value = self.builder.call("ltorch", "detach", [value], {})
                self.builder.set_requires_grad(value, False)
            elif self.grad_enabled is not False and (self.builder.meta(dst)[3] or
                                                     _storage(self._example(destination)) in self.grad_written):
                # Grad mode is on and the tensor written requires grad (or an earlier write made it: grad_written):
                # it still does after the write, whatever is written (x.zero_(), a number), as in eager. (The
                # functionalization joins it to what it was.)
                if not tensor_value:
                    dtype, shape, device, _ = self.builder.meta(target)
                    value = self.builder.call("ltorch", "full", [list(shape), value], {"dtype": dtype,
                                                                                     "device": device})
                elif not self.builder.meta(value)[3]:  # a tensor that does not (w.detach()): a copy of it does
                    value = self.builder.call("ltorch", "clone", [value], {})
                self.builder.set_requires_grad(value, True)
            elif self.regions and self.grad_enabled is not False and tensor_value and self.builder.meta(value)[3]:
                # Grad mode is on, in a branch arm, and a value that requires grad is written into a tensor that
                # does not: the select would give the tensor autograd history where eager's untaken arm does not.
                raise branches.BranchRejected(self.regions[-1][0], "it writes a value that requires grad into a "
                                              "tensor that does not: the select would give the tensor autograd "
                                              "history where eager's untaken branch leaves it without")
            if self._write_in_place(destination):
                self.builder.call("prims", "copy_to", [target, value], {})
            else:
                self.builder.call("ltorch", "copy_", [target, value], {})
        except (_core.NotNative, _core.OpError, TypeError, ValueError, KeyError, IndexError) as e:
            self.fallbacks.append((node.name, _target_name(node), f"write not lowered: {type(e).__name__}: {e}"))
            return _NOT_A_WRITE
        finally:
            self.env[destination] = dst
        return None if node.target is operator.setitem else dst

    def _writes_expanded_memory(self, destination):
        """Whether a write's destination is expanded (eager writes each shared element: a deprecated write), or is
        (a region of) an input that is: the copy-back of a functional write would write the whole input, whose
        elements share memory, where eager writes the region it names."""
        if _expanded(destination):
            return True
        memory = _storage(destination.meta.get("example_value")) if isinstance(destination, torch.fx.Node) else None
        return memory is not None and memory in self._input_memory() and \
            any(_expanded_example(e) and _storage(e) == memory for e in self.examples.values())

    def _original_value(self, destination, dst):
        """What the out-of-place op of a write into ``dst`` reads as its destination's value: ``dst``, or a clone
        of it when ``dst`` is (a view of) a graph input that requires grad and grad mode is on. The copy-back
        writes that input at the end; an op that saved it for backward (``mul`` saves both operands) would then
        find it modified and raise in backward. Eager's in-place op saves a copy of the original instead."""
        if not self._writes_a_grad_input(destination):
            return dst
        return self.builder.call("ltorch", "clone", [dst], {})

    def _writes_a_grad_input(self, destination):
        """Whether a write into ``destination`` (a node) writes (a view of) a graph input that requires grad, with
        grad mode on."""
        example = destination.meta.get("example_value") if isinstance(destination, torch.fx.Node) else None
        if self.grad_enabled is False or not isinstance(example, torch.Tensor):
            return False
        if id(_memory_of(example)) in self.grad_input_memory:
            return True
        # An alias autograd does not see as a view: x.detach(), x.data (their examples have no _base).
        if self.grad_input_storage is None:
            self.grad_input_storage = _storages(n.meta["example_value"] for n in self.gm.graph.nodes
                                                if n.op == "placeholder" and isinstance(n.meta.get("example_value"),
                                                                                        torch.Tensor)
                                                and n.meta["example_value"].requires_grad)
        return _storage(example) in self.grad_input_storage

    def _setitem(self, destination, dst, key, value):
        """``dst[key] = value`` as (the tensor written, its new value): with basic indexing, the view ``dst[key]``
        and ``value``; with a key of integer index tensors and integers (``x[idx] = v``, ``x[rows, 0] = v``), ``dst``
        and ``index_put`` of what ``dst`` reads as (see _original_value), a number ``value`` as a tensor of its
        dtype (a tensor of another dtype: eager raises, and so does index_put). Raises NotNative for other tensor
        keys (a bool mask, tensors mixed with slices)."""
        key, value = self._unwrap(self._arg(key)), self._unwrap(self._arg(value))
        if not _has_proxy(key):
            return self.builder.call("ltorch", "getitem", [dst, key], {}), value
        indices = list(key) if isinstance(key, (tuple, list)) else [key]
        dtype, _, device, _ = self.builder.meta(dst)
        # An integer among index tensors is one more (0-d) index tensor, broadcast with them, as in eager.
        indices = [self.builder.call("ltorch", "full", [[], i], {"dtype": dtypes.to_core(torch.int64),
                                                                 "device": device})
                   if isinstance(i, int) and not isinstance(i, bool) else i for i in indices]
        if not all(isinstance(i, _core.Proxy) and self.builder.meta(i)[0] in _INDEX_DTYPES for i in indices):
            raise _core.NotNative("subscript assignment with a tensor index among keys other than integers and "
                                  "integer tensors")
        if not isinstance(value, _core.Proxy) or self.builder.meta(value)[0] == "number":
            value = self.builder.call("ltorch", "full", [[], value], {"dtype": dtype, "device": device})
        return dst, self.builder.call("ltorch", "index_put", [self.env[destination], indices, value], {})

    # -- converted branches (thunder.frontend.branches) and torch.cond --

    def _marker(self, node):
        kind = branches.MARKERS[node.target]
        if kind == "select":
            cond, a, b = self._unwrap(self._arg(list(node.args)))
            out = self.builder.call("ltorch", "where", [cond, a, b], {})
            self._check_meta(node, out)
            site = self.region_sites.get(node.args[0])
            if site is not None:
                memory = {_storage(self._example(n)) for n in node.args[1:] if isinstance(n, torch.fx.Node)}
                self.selects.append((node, site, frozenset(memory - {None})))
            return out
        site = node.args[1]
        if kind == "begin":
            cond = self._predicate(self.env[node.args[0]])
            if self.selected is None:
                output = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
                returned = list(output.args[0]) if isinstance(output.args[0], (tuple, list)) else []
                views, _ = self._views_of_outputs(returned, list(self.examples.items()))  # an error: at the output
                self.selected = _selected_inputs(returned, list(self.examples.items()), views)
            if node in self.selected[1] or self._computes_grad():  # (for WayReaches; unused, DCE drops it)
                self.condition_copies[node] = self.builder.call("ltorch", "clone", [cond], {})
            self.builder.call("prims", "branch_begin", [cond], {})
            self.region_sites[node] = site
            self.regions.append((site, cond))
            self.open_arms.append([site, 0])
            if site not in self.branch_sites:
                self.branch_sites.append(site)
            return cond
        if not self.regions or self.regions[-1][0] != site:
            raise branches.BranchRejected(site, "a graph break splits the branch")
        cond = self.regions[-1][1]
        self.builder.call("prims", "branch_" + kind, [cond], {})
        if kind == "else":
            self.open_arms[-1][1] = 1
        if kind == "end":
            self.regions.pop()
            self.open_arms.pop()
        return None

    def _example(self, node):
        return self.examples[node] if node in self.examples else node.meta.get("example_value")

    def _input_memory(self):
        """The memory (_storage) of the graph's inputs, once they are all imported."""
        if self.input_memory is None:
            self.input_memory = {_storage(e) for e in self.examples.values()}
        return self.input_memory

    def _check_arms_reach_the_same_leaves(self, output):
        """A name a converted branch binds is differentiated through both arms: an input that requires grad (a
        parameter) that the graph's outputs reach only through some arm would get a zero gradient when that arm is
        not taken, where eager's autograd never reaches it and leaves its .grad None (an optimizer then skips it:
        Adam's momentum and AdamW's decay would move it in thunder only). Gives up a branch such an input depends
        on: one whose select reads it, differentiably, in one arm only, or whose arm writes it into a tensor."""
        selects = {s for s, site, _ in self.selects}
        values = _argument_nodes(output.args)
        reached = set().union(*(self._differentiable_leaves(n, selects)[0] for n in values))
        certainly = set().union(*(self._differentiable_leaves(n, selects)[1] for n in values))
        ways = self._ways(selects)
        if reached - certainly and ways is not None:
            # The outputs may read an input under opposite conditions (`return (y, x) if c else (x, y)`): exactly,
            # the inputs they read whichever way the branches go.
            certainly = set(reached)
            for arm in ways:
                certainly &= self._leaves_reached(values, arm)
        at_risk = reached - certainly

        def reject(site, inputs):
            names = sorted(n.name for n in inputs)
            raise branches.BranchRejected(
                site, f"an input that requires grad ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) "
                      "reaches the outputs only through one arm: in eager the other arm leaves its .grad None, "
                      "converted it would get zeros")

        for site, joined in self.arm_writes:
            if joined - certainly:
                reject(site, joined - certainly)
        arms = {s: [self._differentiable_leaves(n, selects) if isinstance(n, torch.fx.Node) else (frozenset(),) * 2
                    for n in s.args[1:3]] for s in selects}
        # The branch where an input at risk is certainly read in one arm only; else any whose arms read it.
        for blamed in (lambda a: a[0][1] ^ a[1][1], lambda a: a[0][0] | a[1][0]):
            for select, site, _ in self.selects:
                if at_risk & blamed(arms[select]):
                    reject(site, at_risk & blamed(arms[select]))
        self._check_outputs_require_grad_whichever_way(values, selects, ways, arms)
        returned = output.args[0] if isinstance(output.args[0], (tuple, list)) else None
        if ways is not None and returned is not None and reached:  # (nothing requiring grad: every row empty)
            table = [[frozenset(memo[n]) if isinstance(n, torch.fx.Node) else frozenset() for n in returned]
                     for memo in (self._leaves_by_node(values, arm) for arm in ways)]
            if any(row != table[0] for row in table):
                self.way_reaches = (self._way_conditions(selects), table)

    def _way_reaches_of(self, trace):
        """The WayReaches of the finished ``trace`` (None where no output's reach depends on the way, or an input it
        reaches is not a trace input)."""
        if self.way_reaches is None:
            return None
        conditions, table = self.way_reaches
        position = {p.id: i for i, p in enumerate(trace.inputs)}
        index = {}
        for node in {n for row in table for reached in row for n in reached}:
            proxy = self.env.get(node)
            if not isinstance(proxy, _core.Proxy) or proxy.id not in position:
                return None
            index[node] = position[proxy.id]
        return WayReaches(len(conditions), tuple(tuple(frozenset(index[n] for n in reached) for reached in row)
                                                 for row in table))

    def _way_conditions(self, selects):
        """The conditions (begin markers) the ways of _ways go by: the selects' and those of the arms that hold a
        write (a write in an arm may be read after the branch through the tensor it wrote: no select)."""
        return list(dict.fromkeys([s.args[0] for s in selects] +
                                  [begin for writes in self._writes().values() for _, _, arms in writes
                                   for begin, _ in arms]))

    def _ways(self, selects):
        """Each way the converted branches may go, as the arm each select reads ({select: its operand}) and, under
        ``("taken", begin marker)``, whether each condition holds; None where there are too many to walk the graph
        once per way (more than 8 conditions, or a large graph): the callers' conservative answer stands then."""
        conditions = self._way_conditions(selects)
        if len(conditions) > 8 or len(self.order) << len(conditions) > 30_000:
            return None
        return [{**{s: s.args[1 if taken[conditions.index(s.args[0])] else 2] for s in selects},
                 **{("taken", c): t for c, t in zip(conditions, taken)}}
                for taken in itertools.product((True, False), repeat=len(conditions))]

    def _check_outputs_require_grad_whichever_way(self, values, selects, ways, arms):
        """An output computed from a select requires grad whichever arm is taken where eager's requires it only if
        the arm taken reads an input that does (`t = torch.maximum(a, b)` against `t = b * 3`: eager's `t` has no
        autograd history when the second runs). Gives up a branch whose one arm reads such an input and the other
        none, where some way the branches go leaves an output that requires grad reading none."""
        def flips(n):
            reached, certain = self._differentiable_leaves(n, selects)
            if not reached or certain:
                return False
            return ways is None or any(not self._leaves_reached([n], arm) for arm in ways)

        if any(flips(n) for n in values if isinstance(n, torch.fx.Node)):
            for select, site, _ in self.selects:
                (then_reached, _), (else_reached, _) = arms[select]
                if bool(then_reached) != bool(else_reached):
                    raise branches.BranchRejected(site, "one arm leaves a name computed from an input that requires "
                                                        "grad and the other not: in eager an output computed from it "
                                                        "would have no autograd history when the other is taken")

    def _leaves_reached(self, values, arm):
        """The graph inputs requiring grad that ``values`` are differentiably computed from when each select reads
        only the arm ``arm`` maps it to."""
        memo = self._leaves_by_node(values, arm)
        return set().union(*(memo[n] for n in values))

    def _leaves_by_node(self, values, arm):
        """{node: the graph inputs requiring grad it is differentiably computed from} for ``values`` and the nodes
        they read, each select reading only the arm ``arm`` maps it to."""
        def taken(region):  # (begin marker, in its else-arm)
            return arm.get(("taken", region[0]), True) != region[1]

        def reads(n):
            return [m for m in ([arm[n]] if n in arm else self._reads_with_writes(n, taken))
                    if isinstance(m, torch.fx.Node)]

        memo = {}
        for n in _dependency_order(values, reads, memo):
            if n.op in ("placeholder", "get_attr"):
                memo[n] = self._input_leaf(n)
            else:
                memo[n] = frozenset().union(*(memo[m] for m in reads(n))) if _requires_grad(self._example(n)) \
                    else frozenset()
        return memo

    def _input_leaf(self, node):
        """{node} for a graph input (placeholder or attribute) that requires grad, else the empty set."""
        return frozenset({node}) if getattr(self._example(node), "requires_grad", False) else frozenset()

    def _differentiable_leaves(self, node, selects):
        """(the graph inputs requiring grad that ``node``'s value is differentiably computed from, those of them it
        is computed from whichever way the converted branches go): a select's certain inputs are those both of its
        arms' values certainly read; a value that does not require grad (a comparison, an index, a detached tensor)
        reads none. Memoized per node."""
        memo = self.__dict__.setdefault("_leaves_memo", {})
        for n in _dependency_order([node], self._reads_with_writes, memo):
            if n.op in ("placeholder", "get_attr"):
                memo[n] = (self._input_leaf(n),) * 2
            elif not _requires_grad(self._example(n)):
                memo[n] = (frozenset(), frozenset())
            elif n in selects:
                arms = [memo[m] for m in n.args[1:3] if isinstance(m, torch.fx.Node)]
                memo[n] = (frozenset().union(*(a[0] for a in arms)),
                           arms[0][1] & arms[1][1] if len(arms) == 2 else frozenset())
            else:  # (a write in an arm that ``n`` is not in is read only where that arm runs: not certainly)
                ins = [memo[m] for m in self._reads_with_writes(n)]
                sure = [memo[m] for m in self._reads_with_writes(n, lambda region: False)]
                memo[n] = (frozenset().union(*(a[0] for a in ins)), frozenset().union(*(a[1] for a in sure)))
        return memo[node]

    def _reads_with_writes(self, node, taken=None):
        """The nodes ``node`` reads, and the values written before it into the memory of what it reads (`v1.add_(x1)`
        then `v1 * 2`: the product reads x1, though its FX input is v1's node). Each such value comes before the
        write, which comes before ``node``: the walk stays acyclic. ``taken(region)`` (a (begin marker, in its
        else-arm) pair): whether that arm of a converted branch runs; a write in an arm ``node`` is not in counts
        only where every such arm it is in runs (None: every write counts)."""
        writes = self._writes()
        at = self.order.get(node)
        reads = list(node.all_input_nodes)
        if at is None or not writes:
            return reads
        inside = self._arms()[node] if taken is not None else ()
        for m in node.all_input_nodes:
            for position, sources, arms in writes.get(_storage(self._example(m)), ()):
                if position < at and (taken is None or all(taken(a) for a in arms[len(_common_prefix(arms, inside)):])):
                    reads += [w for w in sources if w not in reads]
        return reads

    def _writes(self):
        """{memory: [(position, the nodes it writes there, the arms of converted branches it is in (_arms)) of each
        write lowered into it]}, once."""
        if self.__dict__.get("_writes_by_memory") is None:
            self._writes_by_memory = {}
            arms = self._arms()
            for n in self.order:
                lowering = _write_lowering(n) if n.op in ("call_function", "call_method") else None
                if lowering is None or not isinstance(lowering[0], torch.fx.Node):
                    continue
                memory = _storage(self._example(lowering[0]))
                if memory is not None:
                    self._writes_by_memory.setdefault(memory, []).append(
                        (self.order[n], [m for m in n.all_input_nodes if m is not lowering[0]], arms[n]))
        return self._writes_by_memory

    def _arms(self):
        """{node: the arms of converted branches it is in, outermost first, each (begin marker, in its else-arm)},
        once."""
        if self.__dict__.get("_arms_of") is None:
            self._arms_of, open_arms = {}, []
            for n in self.order:
                kind = branches.MARKERS.get(n.target) if n.op == "call_function" else None
                self._arms_of[n] = tuple(open_arms)
                if kind == "begin":
                    open_arms.append((n, False))
                elif kind == "else" and open_arms:
                    open_arms[-1] = (open_arms[-1][0], True)
                elif kind == "end" and open_arms:
                    open_arms.pop()
        return self._arms_of

    def _read_after(self, memory, node):
        """Whether a node after ``node`` reads a tensor that lives in ``memory`` (the graph's output included)."""
        if self.by_memory is None:
            self.by_memory = {}
            for n in self.order:
                self.by_memory.setdefault(_storage(self._example(n)), []).append(n)
        at = self.order.get(node)
        readers = (u for n in self.by_memory.get(memory, ()) for u in n.users)
        return at is None or any(self.order.get(u, at + 1) > at for u in readers)

    def _check_selected_names(self, node):
        """A name a converted branch binds is a select: a new tensor, where in eager it is the tensor the arm taken
        left it on, sharing that tensor's memory with whatever else refers to it. Gives the branch up when the
        difference would show -- a write after the branch (``node``) to an arm's tensor other than through the
        name, with the name read after it; or a write through the name, with an arm's tensor read after it (through
        another name, or a name the same branch bound to the same tensor), or the graph's input."""
        written = self._written_memory_of(node)
        if not written:
            return
        inputs, nested = self._input_memory(), self._select_operands()
        for select, site, operands in self.selects:
            name = _storage(self._example(select))
            if name is None:
                continue
            operands = self._arm_memory(operands, nested)
            if written & operands and self._read_after(name, node):
                raise branches.BranchRejected(site, f"after it, {source_of(node) or node.name} writes a tensor "
                                                    "that one arm leaves a name aliasing, and that name (a select, "
                                                    "a new tensor) is read later")
            if name in written:
                shared = set(operands) | {_storage(self._example(s)) for s, _, o in self.selects
                                          if s is not select and o & operands}
                if shared & inputs or any(self._read_after(m, node) for m in shared):
                    raise branches.BranchRejected(site, f"after it, {source_of(node) or node.name} writes through a "
                                                        "name an arm leaves aliasing a tensor that is read later "
                                                        "through another name (or is an input)")

    def _written_memory_of(self, node):
        """The memory (_storage) ``node`` writes: a lowered write's destination's, or for an opaque effect, any
        tensor argument's."""
        lowering = _write_lowering(node)
        if lowering is not None:
            destinations = [lowering[0]]
        elif _has_effect(node, _target_name(node)):  # an opaque effect: any tensor argument may be written
            destinations = _argument_nodes((node.args, node.kwargs))
        else:
            return set()
        return {_storage(self._example(d)) for d in destinations if isinstance(d, torch.fx.Node)} - {None}

    def _select_operands(self):
        """The memory of each select's name -> the memory of its operands (for _arm_memory)."""
        nested = {}
        for select, _, o in self.selects:
            nested.setdefault(_storage(self._example(select)), set()).update(o)
        return nested

    @staticmethod
    def _arm_memory(operands, nested):
        """The memory of the tensors a select's arms may leave its name on: its operands' (``operands``), and where
        an operand is itself a select (a nested branch: ``nested``, _select_operands), what that one's arms may
        leave, and so on."""
        memory, pending = set(operands), list(operands)
        while pending:
            for m in nested.get(pending.pop(), ()):
                if m not in memory:
                    memory.add(m)
                    pending.append(m)
        return memory

    def _check_selected_outputs(self, output):
        """The graph returns a name a converted branch selects and also a tensor an arm may leave that name on
        (another name bound to it, or a view of it): code after the graph (after a graph break) could write through
        one and read the other. Gives the branch up."""
        returned = {_storage(self._example(n)) for n in _argument_nodes(output.args)} - {None}
        outputs = output.args[0] if isinstance(output.args[0], (tuple, list)) else ()
        nested = self._select_operands()
        for select, site, operands in self.selects:
            name = _storage(self._example(select))
            if name not in returned:
                continue
            operands = self._arm_memory(operands, nested)
            shared = set(operands) | {_storage(self._example(s)) for s, _, o in self.selects
                                      if s is not select and o & operands}
            if shared & returned and not (select in outputs and self._selects_inputs_or_new(select, returned)):
                raise branches.BranchRejected(site, "a name it selects (a new tensor) and a tensor an arm may leave "
                                                    "that name aliasing are both live after the graph (a graph break "
                                                    "follows): a write through one would not reach the other")

    def _selects_inputs_or_new(self, select, returned):
        """Whether each tensor a select's arms leave (through nested selects) is an input itself -- returned as that
        input where eager returns it (SelectedInput) -- or shares no memory with what the graph returns."""
        for node in select.args[1:]:
            if _input_itself(node).op == "placeholder":
                continue
            if branches.MARKERS.get(node.target) == "select" and _storage(self._example(node)) not in returned:
                if self._selects_inputs_or_new(node, returned):
                    continue
                return False
            if _storage(self._example(node)) in returned:
                return False
        return True

    def _predicate(self, pred):
        """``bool(pred)`` of a one-element tensor, as a 0-d bool tensor."""
        dtype, shape, _, _ = self.builder.meta(pred)
        if list(shape):
            pred = self.builder.call("ltorch", "reshape", [pred, ()], {})
        if dtype != _core.DType.bool:
            pred = self.builder.call("ltorch", "ne", [pred, 0], {})
        return pred

    def _cond(self, node):
        """``torch.cond(pred, true_fn, false_fn, operands)``: both branches inlined between region markers, each
        result selected; a Python-bool predicate inlines one branch."""
        pred, true_gm, false_gm, operands = node.args[:4]
        operands = [self._arg(o) for o in operands]
        true_gm, false_gm = self.env[true_gm], self.env[false_gm]
        pred = self._arg(pred)
        if not isinstance(pred, _core.Proxy):
            return tuple(self._inline(true_gm if pred else false_gm, operands))
        cond = self._predicate(pred)
        site = f"torch.cond {source_of(node) or node.name}"
        self.builder.call("prims", "branch_begin", [cond], {})
        self.regions.append((site, cond))
        then = self._inline(true_gm, operands)
        self.builder.call("prims", "branch_else", [cond], {})
        otherwise = self._inline(false_gm, operands)
        self.builder.call("prims", "branch_end", [cond], {})
        self.regions.pop()
        self.branch_sites.append(site)
        return tuple(self.builder.call("ltorch", "where", [cond, a, b], {}) for a, b in zip(then, otherwise))

    def _inline(self, gm, operands):
        """Imports the nodes of a subgraph (a torch.cond branch) with its placeholders bound to ``operands``."""
        saved_gm, self.gm = self.gm, gm
        try:
            values = iter(operands)
            for node in gm.graph.nodes:
                if node.op == "placeholder":
                    self.env[node] = next(values)
                elif node.op == "get_attr":
                    value = getattr(gm, node.target)
                    if not isinstance(value, torch.fx.GraphModule):
                        raise UnsupportedGraph("a torch.cond branch reads a module attribute")
                    self.env[node] = value
                elif node.op in ("call_function", "call_method"):
                    self.builder.set_source(source_of(node))
                    self.env[node] = self._call(node)
                elif node.op == "output":
                    out = self._unwrap(self._arg(node.args[0]))
                    return list(out) if isinstance(out, (tuple, list)) else [out]
            raise UnsupportedGraph("torch.cond branch without output")
        finally:
            self.gm = saved_gm

    def _note_arm_reads(self, node):
        """Records the memory ``node``, in the arms being imported, reads into a value that requires grad: its VJP
        may save it (_check_writes_after_arm_reads)."""
        if self.grad_enabled is not False and _requires_grad(self._example(node)):
            for memory in _storages(self._example(m) for m in node.all_input_nodes):
                self.arm_reads.setdefault(memory, []).extend((entry, entry[1]) for entry in self.open_arms)

    def _check_writes_after_arm_reads(self, node):
        """Converted, both arms run: a VJP of an arm may save an input (`t1 * a` saves `t1`) that a later write into
        it -- in the other arm, or after the branch -- overwrites (the copy-back), and the backward's check for
        saved tensors written since the forward raises where eager, which did not run that arm, raises nothing.
        Gives up such a branch. (A write in the same arm, which eager makes after the same read, is checked by
        the backward as eager's autograd checks it.)"""
        for memory in self._written_memory_of(node) & self._input_memory():
            for entry, arm in self.arm_reads.get(memory, ()):
                if not any(open_entry is entry for open_entry in self.open_arms) or entry[1] != arm:
                    raise branches.BranchRejected(entry[0], f"{source_of(node) or node.name} writes into an input "
                                                  "that an arm reads into a value that requires grad: converted, the "
                                                  "backward could find the input saved for that arm overwritten "
                                                  "where the arm is not taken (eager raises no error then)")

    def _check_in_branch(self, node):
        """Inside a converted branch both arms run: what could act or fail only when its arm is taken is refused."""
        site = self.regions[-1][0]
        name = _target_name(node).rsplit(".", 1)[-1].lower()
        self._note_arm_reads(node)
        if _draws_random(node, name):
            raise branches.BranchRejected(site, f"{_target_name(node)} draws random numbers")
        if (node.op == "call_method" and node.target == "requires_grad_") or node.target is \
                _SET_INPLACE_REQUIRES_GRAD_ALLOWED:
            raise branches.BranchRejected(site, "it calls requires_grad_(): whether the tensor the name is left on "
                                                "requires grad would depend on the arm taken, a select's on both")
        # Not an effect elsewhere (a BatchNorm in training keeps thunder's autodiff: the generic VJP rule runs it on
        # copies), but both arms run: the arm not taken would update the running statistics.
        if _probed(node)[2]:
            raise branches.BranchRejected(site, f"{_target_name(node)} writes into an argument (batch_norm's running "
                                                "statistics in training), which the arm not taken would write too")
        lowering = _write_lowering(node)
        if lowering is not None and isinstance(lowering[0], torch.fx.Node):
            # The write is selected: whichever arm is taken, the tensor is joined to what the written value reads.
            selects = {s for s, _, _ in self.selects}
            before = self._differentiable_leaves(lowering[0], selects)[0]
            joined = set().union(*(self._differentiable_leaves(m, selects)[0] for m in node.all_input_nodes)) - before
            if joined and _storage(self._example(lowering[0])) in self._input_memory():
                names = sorted(n.name for n in joined)
                raise branches.BranchRejected(site, f"{_target_name(node)} writes into an input a value computed from "
                                                    f"inputs that require grad it was not ({', '.join(names[:3])}): "
                                                    "the write is selected, joining the input to them whichever arm "
                                                    "is taken (eager: only when this arm is)")
            if joined:  # checked with the outputs: an input it joins that they reach anyway changes nothing
                self.arm_writes.append((site, frozenset(joined)))
        if any(word in name for word in _INDEXING_WORDS) or (
                node.target in (operator.getitem, operator.setitem, "__getitem__")
                and len(node.args) > 1 and _has_tensor_index(node.args[1])):
            raise branches.BranchRejected(site, f"{_target_name(node)} indexes with tensor values, which would raise "
                                                "in the arm not taken if they are out of range")
        nuclear = name == "norm" and "nuc" in [a for a in list(node.args) + list(node.kwargs.values())
                                                if isinstance(a, str)]
        if nuclear or any(word in name for word in _VALUE_CHECKING_WORDS) and not any(
                w in name for w in _NOT_VALUE_CHECKING):
            raise branches.BranchRejected(site, f"{_target_name(node)} checks its arguments' values, and would raise "
                                                "in the arm not taken where they are out of its domain")
        if _integer_division_by_tensor(node, name):
            raise branches.BranchRejected(site, f"{_target_name(node)} divides integers by a tensor, which raises in "
                                                "the arm not taken if it is zero there")

    def _fma(self, node):
        """Inductor's ``prims.fma(a, b, c)``, which Dynamo writes for ``x.addcmul_(t1, t2, value=v)`` (Adam's
        ``exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)``): ``a * b + c``, as its eager
        implementation computes it (Inductor fuses the multiply and the add; so may a kernel's compiler)."""
        a, b, c = self._unwrap(self._arg(list(node.args)))
        integral = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
        if isinstance(b, float) and all(isinstance(v, _core.Proxy) and dtypes.to_torch(self.builder.meta(v)[0]) in
                                        integral for v in (a, c)):
            b = math.trunc(b)  # addcmul_ of integer tensors takes its value as their integer type, as eager does
        out = self.builder.call("ltorch", "add", [self.builder.call("ltorch", "mul", [a, b], {}), c], {})
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor) and self.builder.meta(out)[0] != dtypes.to_core(example.dtype):
            out = self.builder.call("ltorch", "to", [out, dtypes.to_core(example.dtype)], {})  # as Dynamo's fma
        self._check_meta(node, out)
        return out

    def _rtruediv(self, node):
        """number / tensor: what ``Tensor.__rtruediv__`` computes, ``tensor.reciprocal() * number`` (not
        ``torch.div(number, tensor)``, which rounds differently in half precision)."""
        number, tensor = self._unwrap(self._arg(list(node.args)))
        out = self.builder.call("ltorch", "mul", [self.builder.call("ltorch", "reciprocal", [tensor], {}), number], {})
        self._check_meta(node, out)
        return out

    def _check_meta(self, node, out):
        """The core's metadata must equal Dynamo's; if not, the op is opaque (and we have a bug to fix)."""
        example = node.meta.get("example_value")
        pairs = []
        try:
            self._meta_pairs(out, example, pairs)
        except _core.NotNative:
            self.builder.pop_symbol()  # the native symbol just recorded (e.g. ltorch.copy_, which returns nothing)
            raise
        for proxy, e in pairs:
            dtype, shape, device, _ = self.builder.meta(proxy)
            want = (dtypes.to_core(e.dtype), [self._size(s) for s in e.shape], dtypes.device_str(e.device))
            if (dtype, list(shape), device) != want:
                self.builder.pop_symbol()
                raise _core.NotNative(f"metadata mismatch: core says {(dtype, shape, device)}, Dynamo says {want}")
            self.builder.set_requires_grad(proxy, self._records_grad(e, node))

    def _records_grad(self, example, node=None):
        """Whether a value an op makes requires grad: Dynamo's example says, but under ``no_grad`` nothing an op
        makes does -- Dynamo's example of a tensor later written in place is that one object, changed by the write
        (``t = w * 2`` under no_grad, then ``t.copy_(w)``: the example of ``t`` requires grad from the start). For
        the same reason, a value of ``node`` none of whose tensor arguments requires grad does not either where the
        graph may write its memory (``t = m.double(); t.mul_(2); r = t * 1; t.fill_(x.sum())``: eager's ``r`` has no
        autograd history)."""
        if not example.requires_grad or self.grad_enabled is False:
            return False
        if node is None or node.kwargs.get("requires_grad"):
            return True
        if _storage(example) not in self._written_memory(probe=False):
            return True
        # A tensor made like another (`torch.ones_like(w)`, `w.new_zeros(...)`) reads none of its values.
        name = _target_name(node).rsplit(".", 1)[-1]
        return not (name.endswith("_like") or name.startswith("new_")) and self._reads_grad(node)

    def _reads_grad(self, node):
        """Whether ``node`` reads a tensor that requires grad: a proxy that does, or memory a write made before it
        wrote a value that does into (``grad_written``: the proxy read may be the tensor's before the write)."""
        return any(self._holds_grad(m) for m in node.all_input_nodes)

    def _holds_grad(self, m):
        """Whether the value of node ``m`` read here requires grad: its proxy does, or its memory holds a value
        that does (``grad_written``)."""
        return _requires_grad_proxy(self.builder, self.env.get(m)) or _storage(self._example(m)) in self.grad_written

    def _meta_pairs(self, v, e, pairs):
        """Appends to ``pairs`` each (proxy, Dynamo's example tensor) of the output ``v`` and its example ``e``;
        raises NotNative where their structures differ."""
        if isinstance(v, _core.Proxy) and isinstance(e, torch.Tensor):
            pairs.append((v, e))
        elif isinstance(v, tuple) and isinstance(e, (tuple, list)) and len(v) == len(e):
            for a, b in zip(v, e):
                self._meta_pairs(a, b, pairs)
        elif isinstance(v, _core.Proxy) and self.builder.meta(v)[0] == "number" and \
                _NUMBER_TYPES.get(type(e)) == self.builder.meta(v)[1]:
            pass  # a number computed at run time (`-s`, `s * 0.01` of a float Dynamo passes as a tensor)
        elif isinstance(v, _core.Proxy) or isinstance(e, torch.Tensor):
            raise _core.NotNative("output structure differs from Dynamo's")

    def _views_of_outputs(self, returned, placeholders):
        """(_output_views of the graph's returned nodes, None), or ([], the UnsupportedGraph it raised): computed
        once, where the first converted branch begins (for _selected_inputs) or at the output."""
        if self.output_views is None:
            try:
                self.output_views = (_output_views(returned, placeholders), None)
            except UnsupportedGraph as e:
                self.output_views = ([], e)
        return self.output_views

    # -- torch.autocast regions, written into the trace as casts --
    #
    # Inside `with torch.autocast("cpu", dtype=torch.bfloat16):` torch casts the floating CPU operands of the ops
    # on its lower-precision list (linear, matmul, ...) to bfloat16 and those of its float32 list (the losses) to
    # float32; every other op runs on its operands as they come. A "cuda" region does the same to CUDA operands
    # with CUDA's lists (which send more ops to float32: exp, pow, layer_norm, softmax, sum, ...); each device's
    # regions apply to that device's tensors only. Dynamo records the region as calls that set the
    # global autocast state, which the trace would keep as effects (then torch's autograd differentiates the graph).
    # Instead, each op of the region is imported with those casts made explicit (``ltorch.to``) and the region's
    # calls are dropped: the trace computes the region's dtypes itself, and thunder differentiates it. An op of the
    # region not imported natively (an opaque op, or one whose dtype Dynamo reports otherwise) is called under the
    # region's own autocast state (_call_under_autocast), also when the backward recomputes it. Regions nest, the
    # innermost deciding; one with enabled=False (HF Llama's rotary embedding, inside the user's region) casts
    # nothing. A region the casts cannot express (a device other than the CPU and CUDA, a dtype other than
    # float16/bfloat16, a graph break inside it) abandons this: the graph is imported again with the region's calls
    # kept as effects (import_graph). An op whose dtype the lists predict wrongly is caught as any op whose dtype
    # Dynamo reports otherwise: it is called under the region's state.

    def _autocast_call(self, node):
        """Handles an autocast enter or exit call as a region of casts; False if it is another call, or if
        explicit autocast is off."""
        enter, exit_ = torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast
        if not self.explicit_autocast or node.target not in (enter, exit_):
            return False
        if node.target is exit_:
            # the exit closes its own enter's region (regions of two devices need not close in order)
            entered = [k for k, r in enumerate(self.autocast) if r[2] is not None and r[2] is node.args[0]]
            if not entered:
                raise _AutocastNotExplicit("an autocast exit without its enter")
            del self.autocast[entered[-1]]
            return True
        names = ("device_type", "dtype", "enabled", "cache_enabled")
        params = dict(zip(names, node.args))
        params.update(node.kwargs)
        device, dtype, enabled = params.get("device_type"), params.get("dtype"), params.get("enabled", True)
        if device not in _AUTOCAST_LISTS or enabled not in (True, False):
            raise _AutocastNotExplicit(f"autocast on {device!r}, enabled={enabled!r}")
        if enabled is False:  # a region turning autocast off (HF Llama's rotary embedding): its ops cast nothing
            self.autocast.append((device, None, node))
            return True
        if dtype is None:
            dtype = torch.get_autocast_dtype(device)
        if dtype not in (torch.bfloat16, torch.float16):
            raise _AutocastNotExplicit(f"autocast to {dtype}")
        self.autocast.append((device, dtype, node))
        return True

    def _regions(self):
        """The innermost open region of each device: ((device type, dtype or None), ...)."""
        innermost = {}
        for device, dtype, _ in self.autocast:
            innermost[device] = dtype
        return tuple(innermost.items())

    def _autocast_op(self, node):
        """An op inside an autocast region: its floating operands cast as the innermost region would, then imported
        (natively, or as an opaque call under the region's autocast state: see above)."""
        if node.op == "call_function" and node.target is operator.getitem:
            return self._call_op(node)
        name = _target_name(node).rsplit(".", 1)[-1]
        regions = dict(self._regions())
        saved = {}
        try:
            for a in node.all_input_nodes:  # each floating operand by its device's innermost region
                v = self.env.get(a)
                if a in saved or not isinstance(v, _core.Proxy):
                    continue
                meta = self.builder.meta(v)
                have = None if meta[0] == "number" else dtypes.to_torch(meta[0])
                device = str(meta[2]).split(":")[0] if have is not None else None
                if regions.get(device) is None:  # no region for its device, or one turning autocast off
                    continue
                lower, float32 = _AUTOCAST_LISTS[device]
                dtype = regions[device] if name in lower else torch.float32 if name in float32 else None
                if dtype is None or not have.is_floating_point or have in (torch.float64, dtype):
                    continue
                saved[a] = v
                self.env[a] = self.builder.call("ltorch", "to", [v, dtypes.to_core(dtype)], {})
            out = self._call_op(node)
        finally:
            self.env.update(saved)
        return out

    def _global_state(self, node):
        """A call that sets grad mode, inference mode or autocast: an effect, in place (see global_state)."""
        callee = global_state.CALLEES[node.target]
        self.sets_global_state = True
        if callee.startswith("global_state."):
            self.namespace["global_state"] = global_state
        exit_call = node.target in global_state.EXITS  # its argument is the enter's context object
        self._track_grad_mode(node)
        args = [] if exit_call else self._unwrap(self._arg(list(node.args)))
        kwargs = {} if exit_call else {k: self._unwrap(self._arg(v)) for k, v in node.kwargs.items()}
        return self.builder.opaque(callee, args, kwargs, None, True)

    def _track_grad_mode(self, node):
        """Follows grad mode through a global-state call (inference mode counts as grad mode off)."""
        arg = node.args[0] if node.args else node.kwargs.get("mode", True)
        if node.target is torch._C._set_grad_enabled:
            self.grad_enabled = arg if isinstance(arg, bool) else None
        elif node.target is torch.autograd.grad_mode._enter_inference_mode:
            self.grad_modes.append(self.grad_enabled)
            if arg is not False:
                self.grad_enabled = False if arg is True else None
        elif node.target is torch.autograd.grad_mode._exit_inference_mode and self.grad_modes:
            self.grad_enabled = self.grad_modes.pop()

    def _write_in_place(self, destination):
        """Whether a write stays in place (``prims.copy_to``, which the functionalization pass keeps as an effect)
        instead of becoming a new value of the tensor: a write autograd does not record (grad mode off) into a
        tensor that requires grad, in a graph that records autograd history elsewhere. Eager changes the tensor's
        values and keeps its autograd history (its grad_fn, or its being a leaf), which a new value cannot: later
        reads in grad mode would lose the history."""
        if self.grad_enabled is True or not self.records_grad_somewhere:
            return False
        example = destination.meta.get("example_value") if isinstance(destination, torch.fx.Node) else None
        if not isinstance(example, torch.Tensor):
            return True
        base = example._base if example._is_view() else None
        return example.requires_grad or (base is not None and base.requires_grad)

    def _requires_grad_call(self, node):
        """``y.requires_grad_()`` of a value the graph computes (Hugging Face's gradient checkpointing sets it on the
        input embeddings' output, so that checkpointed blocks see inputs that require grad): ``y`` itself, made to
        require grad where grad mode is on (the ops after it require grad by Dynamo's example values already). Its
        own gradient goes nowhere, as a leaf's nobody reads. Raises UnsupportedGraph where ``y`` leaves the graph
        (eager returns a leaf, whose .grad a backward fills) or for ``requires_grad_(False)``."""
        flag = node.args[1] if len(node.args) > 1 else node.kwargs.get("requires_grad", True)
        value = self.env.get(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
        output = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
        if flag is not True or not isinstance(value, _core.Proxy) or node.args[0] in output.all_input_nodes or \
                node in output.all_input_nodes:
            raise UnsupportedGraph("it makes a value it computes a leaf tensor (requires_grad_) and returns it, or "
                                   "sets requires_grad to something other than True")
        example = node.args[0].meta.get("example_value") if isinstance(node.args[0], torch.fx.Node) else None
        if _storage(example) is not None and _storage(example) in self._input_memory():
            # x.detach().requires_grad_() of an input: a leaf the ops after it record on, at run time, where no
            # input of the graph need require grad (and Dynamo's example of x says it does once a write of it
            # did): torch runs the graph.
            raise UnsupportedGraph("it makes a tensor sharing an input's memory require grad "
                                   "(x.detach().requires_grad_() of an input x)")
        if self.grad_enabled is not False:
            self.builder.set_requires_grad(value, True)
        return value

    def _opaque(self, node, rejected=False):
        # An opaque op whose result is a view (x.T, x.diagonal(), x.unfold(...)): the functionalization cannot
        # follow writes through it, nor replay it after a write to its base. In a graph that may write into a
        # tensor, it runs as an effect (pending writes land before it), and the writes after it stay in place, as
        # opaque effects, so that it sees them. In a graph without writes it is a pure op: as an effect it sent a
        # training graph's backward to torch (`pos[:T]` of a parameter, with T a symbolic size).
        # An op whose arguments thunder's rules rejected (``rejected``: an OpError, such as `-` of a bool tensor),
        # and whose result nothing reads, is an effect too: torch may raise for it, and eager raises even where its
        # result is unused, so it is not dead code. (One whose result is read runs anyway; as an effect, it sent
        # the graph's backward to torch: torch.cat(..., axis=1), einsum forms thunder's rules do not take.)
        self.opaque_calls += 1
        if _views_an_argument(node) and any(map(_laid_out_other_than_eager, _sharing(node, _meta_example)[2])):
            # Run by torch on thunder's value, the op sees other strides than eager's: a flatten eager makes a view
            # of may copy (and miss later writes of its base), a view() may raise, an as_strided reads elsewhere.
            raise UnsupportedGraph(f"{_target_name(node)} is a view, in eager, of a value thunder lays out "
                                   "otherwise (eager keeps an elementwise result of a transposed tensor "
                                   "transposed; thunder's kernels write it contiguous)")
        view = _views_an_argument(node) or _aliases_an_argument(node) or _aliasing_decided_at_run_time(node)
        if view:
            self.opaque_views.append(_viewed_memory(node))
        if self.regions and (view or _has_effect(node, _target_name(node))):
            raise branches.BranchRejected(self.regions[-1][0], f"{_target_name(node)} has effects thunder cannot "
                                                               "select between (an opaque in-place op or a call made "
                                                               "for what it does)")
        target = node.target
        method = None  # a method torch.Tensor does not define, called by name
        if node.op == "call_method" and not hasattr(torch.Tensor, target):
            method = lambda self_, *a, _name=target, **k: getattr(self_, _name)(*a, **k)  # noqa: E731
        if self.explicit_autocast and self.autocast:
            # Inside an autocast region written as casts, the region's calls are dropped, so the op would run under
            # whatever autocast state the call finds (and again so when the backward recomputes it): it runs under
            # the region's own state instead.
            fn = method or (getattr(torch.Tensor, target) if node.op == "call_method" else target)
            callee = self._register(functools.partial(_call_under_autocast, fn, self._regions()), "_autocast").text
        elif node.op == "call_method":
            callee = f"torch.Tensor.{target}" if method is None else self._register(method, "_method").text
        elif target is torch._assert_async and _assert_statement(node) is not None:
            # (Dynamo passes "assertion error" for an assert without a message; eager's AssertionError has none.)
            without_message = _assert_statement(node).msg is None
            callee = self._register(functools.partial(_python_assert, without_message=without_message),
                                    "_assert").text
        else:
            callee = _qualified_name(target) or self._register(target, "_opaque").text
        args = self._unwrap(self._arg(list(node.args)))
        kwargs = {k: self._unwrap(self._arg(v)) for k, v in node.kwargs.items()}
        output = self._new_output(node.meta.get("example_value"))
        effect = (view and self._graph_may_write() and self._may_write_memory_of(node)) or \
            (rejected and not node.users) or \
            _has_effect(node, callee if node.op == "call_function" else str(target))
        # An assert (Dynamo's form of one, or a call of torch._assert_async) writes nothing and returns nothing: a
        # check, which thunder's autodiff runs in the forward (as an effect, it sent the backward to torch).
        check = target is torch._assert_async and not node.users
        result = self.builder.opaque(callee, args, kwargs, output, effect, check)
        same = _returned_argument(node)
        if effect and same is not None and isinstance(self.env.get(same), _core.Proxy) and \
                not _changes_metadata(_target_name(node)):
            # An opaque in-place op returns its argument itself (x.fill_diagonal_(0).add_(g)): what reads or writes
            # its result reads or writes that tensor, which the effect wrote. (Its own output is a new root, so a
            # write to it would reach no input and be dropped as dead.)
            return self.env[same]
        return result


    def _autograd_function(self, node):
        """A custom ``torch.autograd.Function`` (Dynamo's ``autograd_function_apply`` of its forward and backward
        graphs): an opaque op that applies it as torch does, so its gradient is the user's ``backward``. (Passing
        the graphs to the core as arguments failed, and the whole graph ran with torch.) Where its forward draws
        random numbers or writes a tensor, the op is an effect: thunder's generic VJP rule, which recomputes an op in
        the backward, does not take it, and the graph keeps torch's autograd."""
        forward, backward = self.env[node.args[0]], self.env[node.args[1]]
        applied = functools.partial(node.target, forward, backward, **node.kwargs)
        callee = self._register(applied, "_autograd_function").text
        args = self._unwrap(self._arg(list(node.args[2:])))
        effect = any(n.op in ("call_function", "call_method") and n.target not in global_state.CALLEES and
                     _has_effect(n, _target_name(n)) for n in forward.graph.nodes)
        return self.builder.opaque(callee, args, {}, self._new_output(node.meta.get("example_value")), effect)


_NOT_A_WRITE = object()

#: The dtypes of the index tensors ``x[idx] = v`` lowers to ``index_put`` with (torch_layout.cc's is_index_dtype).
_INDEX_DTYPES = frozenset({dtypes.to_core(torch.int64), dtypes.to_core(torch.int32)})


def called_function(callee):
    """The function an opaque callee of a trace calls: for the wrapper calling an op under an autocast region's
    state (_call_under_autocast), that op; otherwise the callee itself."""
    if isinstance(callee, functools.partial) and callee.func is _call_under_autocast:
        return callee.args[0]
    return callee


def _call_under_autocast(fn, regions, /, *args, **kwargs):
    """fn(*args, **kwargs) with autocast as the regions the op was captured in set it: per device type, to its
    dtype, or off (None). An opaque op of an autocast region written as casts (see _Importer._autocast_call)."""
    with contextlib.ExitStack() as stack:
        for device, dtype in regions:
            stack.enter_context(torch.autocast(device, dtype=dtype or torch.get_autocast_dtype(device),
                                               enabled=dtype is not None))
        return fn(*args, **kwargs)


def _transpose_property_as_method(node):
    """Rewrites ``getattr(x, "T")`` (Dynamo's node for the property ``x.T``) as the method call it equals:
    ``x.t()`` up to 2 dims, ``x.permute(n-1, ..., 0)`` above; ``x.mT`` as ``x.transpose(-2, -1)``; ``x.H`` and
    ``x.mH`` of a real tensor (a complex one's conjugate too) as ``x.T`` and ``x.mT``. Left as it is, the
    node was an opaque view, which kept the graph's backward with torch (Falcon's ``input @ self.weight.T``)."""
    if node.op != "call_function" or node.target is not getattr or len(node.args) != 2:
        return
    x, name = node.args
    example = x.meta.get("example_value") if isinstance(x, torch.fx.Node) else None
    if not isinstance(example, torch.Tensor) or name not in ("T", "mT", "H", "mH") or \
            (name in ("H", "mH") and example.is_complex()):
        return
    node.op = "call_method"
    if name in ("mT", "mH"):
        node.target, node.args = "transpose", (x, -2, -1)
    elif example.dim() <= 2:
        node.target, node.args = "t", (x,)
    else:
        node.target, node.args = "permute", (x, *range(example.dim() - 1, -1, -1))


@functools.lru_cache(maxsize=None)
def _changes_metadata(name):
    """Whether the in-place op ``name`` (``x.transpose_(0, 1)``, ``resize_``, ``set_``) changes its argument's
    sizes or strides, by ATen's ``inplace_view`` tag: its result is not the argument as the trace knows it."""
    op = getattr(torch.ops.aten, name.rsplit(".", 1)[-1], None)
    try:
        return op is not None and any(torch.Tag.inplace_view in getattr(op, o).tags for o in op.overloads())
    except (AttributeError, RuntimeError):
        return True


#: In-place ops that change their argument's sizes or strides besides those ATen tags ``inplace_view``.
_RESIZING_IN_PLACE = {"squeeze_", "swapaxes_", "swapdims_", "resize_"}


@functools.lru_cache(maxsize=None)
def _resizes_in_place(name):
    """Whether ``name`` (a method or function name) is an in-place op changing its argument's sizes or strides."""
    short = name.rsplit(".", 1)[-1]
    return short.endswith("_") and not short.endswith("__") and (short in _RESIZING_IN_PLACE or
                                                                 _changes_metadata(short))


def _returns_an_input(node):
    """The argument node whose tensor the node returns itself, for a node without effects; None otherwise."""
    same = _returned_argument(node)
    if same is None or _write_lowering(node) is not None or _has_effect(node, _target_name(node)):
        return None
    return same


def _output_views(outputs, placeholders):
    """The groups of a graph's outputs that share memory with one another or with an input in eager (Dynamo's
    example values tell), each with the base every member is made again from (OutputViews). Raises
    UnsupportedGraph when the members of a group do not all lead, through view ops that can be replayed, to one
    base: compiled, they would come out as separate tensors."""
    examples = {node: example for node, example in placeholders}
    inputs = {node: k for k, (node, _) in enumerate(placeholders)}

    def example_of(node):
        return examples[node] if node in examples else node.meta.get("example_value")

    input_storages = {_storage(e) for e in examples.values()} - {None}
    groups = {}
    for i, node in enumerate(outputs):
        if isinstance(node, torch.fx.Node) and isinstance(example_of(node), torch.Tensor):
            groups.setdefault(_storage(example_of(node)), []).append(i)
    views = []
    for storage, positions in groups.items():
        if len(positions) < 2 and storage not in input_storages:
            view = _view_of_intermediate(outputs[positions[0]], inputs, example_of)
            if view is not None:
                views.append(OutputViews(-1, positions[0], [(positions[0], view[1])], view[0]))
            continue
        names = ", ".join(outputs[i].name for i in positions)
        roots = list(dict.fromkeys(_view_root(outputs[i], example_of) for i in positions))
        if len(roots) != 1 or (roots[0] not in inputs and storage in input_storages):
            raise UnsupportedGraph(f"outputs {names} share memory in eager (with each other or an input), but are "
                                   f"not all views of one tensor that thunder can make them again from")
        root = roots[0]
        try:
            members = [(i, _replayer(outputs[i], root, inputs, example_of)) for i in positions]
        except _NotReplayable as e:
            raise UnsupportedGraph(f"outputs {names} share memory in eager, and a view among them cannot be made "
                                   f"again at run time: {e}") from None
        if root in inputs:
            views.append(OutputViews(inputs[root], -1, members, root))
        else:
            views.append(OutputViews(-1, positions[0], members, root))
    return views


def _selected_inputs(outputs, placeholders, views):
    """The outputs that are selects of converted branches with an input itself, or a view of one, among their arms
    -- or views of such selects -- (SelectedInput), and the condition nodes (the branches' begin markers) their
    choices read, in order. An output among ``views`` (OutputViews: made again from its group's base after the
    call) is not one: where the base its group is made from is such a select, the base's output is."""
    examples = dict(placeholders)
    inputs = {node: k for k, (node, example) in enumerate(placeholders) if isinstance(example, torch.Tensor)}
    conditions = {}

    def example_of(node):
        return examples[node] if node in examples else node.meta.get("example_value")

    def is_select(node):
        return isinstance(node, torch.fx.Node) and branches.MARKERS.get(node.target) == "select"

    def view_of(node, root):
        try:
            return _replayer(node, root, inputs, example_of)
        except _NotReplayable:
            return None

    def choice(node):
        node = _input_itself(node)
        if node in inputs:
            return ("input", inputs[node])
        if is_select(node):
            then, otherwise = choice(node.args[1]), choice(node.args[2])
            if then[0] == otherwise[0] == "computed":
                return then
            return (conditions.setdefault(node.args[0], len(conditions)), then, otherwise)
        if isinstance(node, torch.fx.Node) and isinstance(example_of(node), torch.Tensor):
            root = _view_root(node, example_of)
            if root is not node and (root in inputs or is_select(root)):
                inner = ("input", inputs[root]) if root in inputs else choice(root)
                replay = view_of(node, root) if inner[0] != "computed" else None
                if replay is not None:
                    return ("view", lambda base, args, k=inner[1]: replay(args[k], args)) if root in inputs \
                        else ("over", replay, inner)
        return ("computed",)

    grouped = {i for group in views for i, _ in group.members}
    bases = [(group.base_output, group.root) for group in views if group.base_input < 0]
    choices = [(i, choice(node)) for i, node in [(i, n) for i, n in enumerate(outputs) if i not in grouped] + bases]
    choices = [(i, c) for i, c in choices if c[0] not in ("computed", "input", "view")]
    # Only the conditions the kept choices read, numbered in order (a choice given up may have read others).
    nodes, used = list(conditions), {}

    def renumbered(c):
        if isinstance(c[0], int):
            return (used.setdefault(c[0], len(used)), renumbered(c[1]), renumbered(c[2]))
        return ("over", c[1], renumbered(c[2])) if c[0] == "over" else c

    selected = [SelectedInput(i, renumbered(c)) for i, c in choices]
    return selected, [nodes[old] for old in sorted(used, key=used.get)]


def _common_prefix(a, b):
    """The longest common prefix of sequences ``a`` and ``b``."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _requires_grad_proxy(builder, v):
    """Whether ``v`` (a core value: a proxy, or nested tuples/lists of them) holds a tensor proxy that requires
    grad."""
    if isinstance(v, (list, tuple)):
        return any(_requires_grad_proxy(builder, x) for x in v)
    return isinstance(v, _core.Proxy) and builder.meta(v)[0] != "number" and bool(builder.meta(v)[3])


def _has_proxy(v):
    if isinstance(v, _core.Proxy):
        return True
    if isinstance(v, (list, tuple)):
        return any(_has_proxy(x) for x in v)
    if isinstance(v, slice):
        return any(_has_proxy(x) for x in (v.start, v.stop, v.step))
    return False


def _number_type(x):
    if isinstance(x, (bool, torch.SymBool)):
        return 0
    if isinstance(x, (int, torch.SymInt)):
        return 1
    return 2


def _dependency_order(roots, reads, done):
    """The nodes ``roots`` are computed from (``reads(n)``: the nodes n reads), each after those it reads, leaving
    out those in ``done`` (iterative: a long graph does not exhaust Python's recursion)."""
    order, seen, stack = [], set(done), [(r, False) for r in roots]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            order.append(n)
            continue
        if n in seen:
            continue
        seen.add(n)
        stack.append((n, True))
        stack.extend((m, False) for m in reads(n) if m not in seen)
    return order


def _requires_grad(example):
    """Whether an FX node's example value is, or holds, a tensor that requires grad."""
    if isinstance(example, torch.Tensor):
        return example.requires_grad
    if isinstance(example, (tuple, list)):
        return any(_requires_grad(e) for e in example)
    return False


def _has_symbolic_number(example):
    """Whether an example value is a symbolic number, or a tuple (torch.Size) holding one."""
    if isinstance(example, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return isinstance(example, (tuple, list)) and any(_has_symbolic_number(e) for e in example)


def _dim_of(expr, symbols):
    """A sympy size expression of Dynamo's as an int or ``_core.Dim``: sums, products and positive integer
    powers of integers and the symbols in ``symbols`` (sympy symbol -> Dim); UnsupportedGraph for anything else
    (floor division, min/max, a symbol no input holds)."""
    import sympy

    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        if expr not in symbols:
            raise UnsupportedGraph(f"the size symbol {expr} is no input of the graph")
        return symbols[expr]
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [_dim_of(a, symbols) for a in expr.args]
        result = parts[0]
        for p in parts[1:]:
            result = result + p if isinstance(expr, sympy.Add) else result * p
        return result
    if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and int(expr.exp) > 0:
        base, result = _dim_of(expr.base, symbols), 1
        for _ in range(int(expr.exp)):
            result = result * base
        return result
    raise UnsupportedGraph(f"the size {expr} is not a polynomial in the graph's size symbols")


def note_input_sources(gm):
    """Keeps, in each placeholder's meta, what the input is in the user's program (_input_source): Dynamo drops
    its own record of it (``grapharg``) once the backend returns, before a graph with symbolic sizes is imported."""
    for node in gm.graph.find_nodes(op="placeholder"):
        node.meta["thunder_input_source"] = _input_source(node)


def _input_source(placeholder):
    """What a graph input is in the user's program, from the source Dynamo guards it by, written as Python reads
    it: ``L['x']`` -> ``x``, ``L['self']._modules['fc1']._parameters['weight']`` -> ``self.fc1.weight``,
    ``L['x'].size()[0]`` as it is; "" where Dynamo gives none."""
    if "thunder_input_source" in placeholder.meta:
        return placeholder.meta["thunder_input_source"]
    name = getattr(getattr(placeholder.meta.get("grapharg"), "source", None), "name", None)
    name = name() if callable(name) else name
    if not isinstance(name, str):
        return ""
    name = re.sub(r"\b[LG]\['([^']*)'\]", r"\1", name)
    name = re.sub(r"\._(?:modules|parameters|buffers)\['([A-Za-z_]\w*)'\]", r".\1", name)
    return re.sub(r"\._(?:modules|parameters|buffers)\['([^']*)'\]", r"[\1]", name)


#: What Dynamo calls around an in-graph ``requires_grad_()`` (a functorch flag, not a transform).
_SET_INPLACE_REQUIRES_GRAD_ALLOWED = getattr(getattr(torch._C, "_functorch", None), "set_inplace_requires_grad_allowed",
                                             None)


def _runs_only_as_captured(gm):
    """Why a graph must run as Dynamo captured it, or "": it calls torch.func's transforms (``grad``, ``vjp``,
    ``jacrev``, ``vmap``: their levels and wrapped tensors are torch's own state, and thunder's trace of the ops
    between them computed the gradients as zeros or failed), or it registers a tensor hook on a value it makes
    (``y.register_hook(fn)``: a hook that changes the gradient acts inside torch's autograd, which thunder's
    differentiated program does not run), or it changes a tensor's sizes or strides in place (``x.t_()``,
    ``unsqueeze_``, ``resize_``: Dynamo's example value of that tensor is one object, changed in place as Dynamo
    traced, so every node that made or wrote it shows the layout after the change; ``y.relu_()`` before
    ``y.unsqueeze_(0)`` was imported as a write of a [1] tensor into a [] one, and raised)."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and _resizes_in_place(_target_name(node)):
            return f"it changes a tensor's sizes or strides in place ({_target_name(node)})"
        if node.op != "call_function":
            continue
        target = node.target
        if target is torch.ops.higher_order.autograd_function_apply:  # a custom autograd.Function: an opaque op
            continue
        if target is _SET_INPLACE_REQUIRES_GRAD_ALLOWED:  # Dynamo's bracket around requires_grad_()
            continue
        if _calls_functorch(node):
            return _functorch_reason(gm)
        if isinstance(target, torch._ops.HigherOrderOperator) and target.name() == "register_hook":
            return "it registers a tensor hook (Tensor.register_hook) on a value it computes"
    return ""


#: The functorch helpers Dynamo records as calls, by the transform that calls them.
_FUNCTORCH_HELPERS = {"_grad_increment_nesting": "torch.func.grad, vjp or jacrev",
                      "_wrap_for_grad": "torch.func.grad, vjp or jacrev",
                      "_vmap_increment_nesting": "torch.vmap", "_add_batch_dim": "torch.vmap",
                      "lazy_load_decompositions": "torch.vmap", "_jvp_increment_nesting": "torch.func.jvp or jacfwd"}


def _calls_functorch(node):
    """Whether an FX node calls one of torch.func's helpers (torch._C._functorch or torch._functorch)."""
    return node.op == "call_function" and (getattr(node.target, "__module__", None) or "").startswith(
        ("torch._C._functorch", "torch._functorch"))


def _functorch_reason(gm):
    """Why a graph that calls torch.func's transforms runs as captured, naming the transforms (told by the
    helpers they call, which Dynamo records) and the user's line that calls them, where the graph has one: the
    innermost frame of a node's stack outside torch's own files."""
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    transforms, where = [], ""
    for node in gm.graph.nodes:
        if not _calls_functorch(node):
            continue
        name = _FUNCTORCH_HELPERS.get(getattr(node.target, "__name__", ""))
        if name and name not in transforms:
            transforms.append(name)
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', node.meta.get("stack_trace") or "")
        user = [f for f in frames if not f[0].startswith(torch_dir)]
        if user and not where:
            path, line, fn = user[-1]
            code = linecache.getline(path, int(line)).strip()
            where = f" at {os.path.basename(path)}:{line} in {fn}" + (f": {code}" if code else "")
    what = " and ".join(transforms) or "torch.func"
    return ("it calls torch.func's transforms, whose levels and wrapped tensors are torch's own state (thunder's "
            f"trace does not follow them): {what}{where}")


def _backward_errors(gm, example_inputs=()):
    """{output position: the error eager's backward through that output raises} for a graph that writes into a
    value an op before the write saved for its backward (``x = h * 1; x[0] = x[0].sin()``: sin saved ``x[0]``):
    eager's autograd raises "modified by an inplace operation" in a ``backward()`` that reaches that output.
    thunder's trace is functional and would differentiate the program as written; a backward through that output
    raises the same error (compile._raising_in_backward). Told by Dynamo's example values, whose fake tensors carry
    the autograd graph eager would build: their backward raises the same error.

    In a graph with converted branches Dynamo traced both arms, whose writes eager never makes together: the graph
    runs again on fake tensors (as where it writes into an input that requires grad) once per way its branches go
    (branches.run_exactly; up to 3 branches). Where the errors are the same every way (a write after the branch),
    they are the graph's; where they differ (a write in one arm into a value an op saved), the backward would have
    to know the arm taken: the branch is given up (BranchRejected, the first branch whose arms alone make the
    difference). An input that requires grad the graph writes gets the errors of a backward from it, under
    ``("input", position)`` (the caller holds it, returned or not).

    Raises:
        branches.BranchRejected: as above."""
    nodes = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    # Only where a write reaches memory that an earlier op making a value that requires grad read or wrote (which
    # it may have saved): a cheap test first (writes told by names and schemas; probing every op of a model's
    # graph on fake tensors took 0.2-0.3 s).
    saved, suspect = set(), False
    for n in nodes:
        example = n.meta.get("example_value")
        grad = _requires_grad(example)
        if not saved and not grad:  # (a graph computing nothing that requires grad: no memory read at all)
            continue
        memories = _storages(a.meta.get("example_value") for a in _argument_nodes((n.args, n.kwargs)))
        if memories & saved and _may_write(n, probe=False):
            suspect = True
            break
        if grad:
            saved |= memories | _storages(example if isinstance(example, (tuple, list)) else [example])
    if not suspect:
        return {}
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    returned = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    placeholders = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    # Which inputs require grad: the caller's tensors say (Dynamo's example of an input the graph writes a value
    # requiring grad into requires grad from the start: `v1[:, 0] = a[:, 1]` into a v1 that did not).
    real = list(example_inputs)
    grads = [bool(r.requires_grad) if isinstance(r, torch.Tensor) else False for r in real] \
        if len(real) == len(placeholders) else [_requires_grad(e) for e in placeholders]
    begins = [n for n in nodes if n.op == "call_function" and branches.MARKERS.get(n.target) == "begin"]
    inputs = [e for e, grad in zip(placeholders, grads) if grad and isinstance(e, torch.Tensor)]
    written = _storages(a.meta.get("example_value") for n in nodes if _may_write(n, probe=False)
                        for a in n.all_input_nodes)
    if not begins and not _storages(inputs) & written:
        return _errors_of_backwards([n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None
                                     for n in returned], inputs)
    # (An input that requires grad written in place: its example is the tensor after the writes, whose backward
    # to itself reads nothing. The run below starts from a copy of it made from a leaf.)
    fake_mode = next((e.fake_mode for e in placeholders if hasattr(e, "fake_mode")), None)
    if len(begins) > 3 or fake_mode is None:
        return {}
    errors = {}
    for way in itertools.product((True, False), repeat=len(begins)):
        try:
            with fake_mode, torch.enable_grad():
                # Copies: the runs write into them (Dynamo's examples stay as they are).
                leaves = [e.detach().clone().requires_grad_() if grad else e.detach().clone()
                          if isinstance(e, torch.Tensor) else e for e, grad in zip(placeholders, grads)]
                args = [v.clone() if grad else v for v, grad in zip(leaves, grads)]  # not leaves: writable
                outputs = branches.run_exactly(gm, *args, ways=dict(zip(begins, way)))
        except Exception:  # noqa: BLE001 -- a graph fake tensors cannot run one way: tells nothing
            return {}
        outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        grad_leaves = [v for v, grad in zip(leaves, grads) if grad]
        errors[way] = _errors_of_backwards(outputs, grad_leaves)
        # The caller's inputs the graph wrote: a backward from them raises too (they may not be returned).
        written_inputs = [a if a is not v and _requires_grad(a) and a._version else None for a, v in zip(args, leaves)]
        errors[way].update({("input", i): e for i, e in _errors_of_backwards(written_inputs, grad_leaves).items()})
    for i, begin in enumerate(begins):
        for way, found in errors.items():
            if found.keys() != errors[(*way[:i], not way[i], *way[i + 1:])].keys():
                raise branches.BranchRejected(begin.args[1], "an arm writes into a value an op saved for its "
                                              "backward: eager's backward raises only where that arm runs")
    return errors[(True,) * len(begins)]


def _errors_of_backwards(outputs, inputs):
    """{position: message} of each tensor in ``outputs`` whose backward to ``inputs`` (fake tensors) raises
    "modified by an inplace operation"."""
    errors = {}
    for k, example in enumerate(outputs):
        if not inputs or not isinstance(example, torch.Tensor) or example.grad_fn is None:
            continue
        fake_mode = getattr(example, "fake_mode", None)  # the example values' (the tracing context's may differ)
        if fake_mode is None:
            continue
        try:
            with fake_mode:
                torch.autograd.grad(example, inputs, torch.ones_like(example), retain_graph=True, allow_unused=True)
        except RuntimeError as e:
            if "modified by an inplace operation" in str(e):
                errors[k] = str(e).splitlines()[0]
        except Exception:  # noqa: BLE001 -- a fake tensor's backward that fails otherwise tells nothing
            pass
    return errors


def import_graph(gm: torch.fx.GraphModule, example_inputs, symbolic=False) -> ImportedGraph:
    """Imports a Dynamo FX graph into a core trace.

    Args:
        gm: the graph; example_inputs: its inputs' example values.
        symbolic: import a graph Dynamo captured with symbolic sizes as it is: its size inputs (``s0``) become
            int inputs of the trace, every size a polynomial in them (``_core.Dim``), and the shape rules of the
            core compute with them (an op whose rule cannot decide on a symbolic size is opaque). The result's
            :meth:`ImportedGraph.bind` binds the sizes of one call.

    Raises:
        UnsupportedGraph: the graph uses something a trace cannot express (symbolic shapes unless ``symbolic``,
            sizes that are not polynomials in the size inputs, dtypes the core lacks, unusual FX node kinds).
    """
    reason = _runs_only_as_captured(gm)
    if reason:
        raise UnsupportedGraph(reason)
    try:
        imported = _Importer(gm, example_inputs, symbolic).run()
    except _AutocastNotExplicit as e:
        logger.debug("thunder: an autocast region stays global state (its ops keep torch's autocast): %s", e)
        imported = _Importer(gm, example_inputs, symbolic, explicit_autocast=False).run()
    imported.backward_errors = _backward_errors(gm, example_inputs)
    return imported
