"""thunder.jit: the user-facing wrappers around a compiled function or module."""
import dataclasses
import functools
import inspect
import sys
import types
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.compiler import is_dynamo_compiling as _is_compiling
from torch.nn.modules.lazy import LazyModuleMixin

from thunder.core.compile import CompiledGraph
from thunder.core.debug import check_debug
from thunder.core.log import logger
from thunder.core.options import check_passes
from thunder.executors import resolve_executors
from thunder.frontend import branches, skipped_logging
from thunder.frontend.code_copies import forget_shape_history, private_function, private_module, release
from thunder.frontend.dynamo import (EagerGraph, JitBackend, JitState, count_limited_frames, current_state,
                                     forget_converted_tensors, listen_for_graph_breaks, note_dynamo_stopped,
                                     note_recompile_limit)
from thunder.frontend.fast_path import MISS, FastPath, cache_entries, plain_module_call

# Argument types a compiled program understands; anything else gets a note naming it if the call fails.
_UNDERSTOOD = (torch.Tensor, bool, int, float, complex, str, type(None), torch.dtype, torch.device, nn.Module,
               torch.Size, slice, type(Ellipsis))


#: torch.compile's isolate_recompiles (torch 2.13 on): each wrapper's recompilations of frames other than its own
#: copy's (a callee's, at a graph break) are kept apart from other wrappers'.
_ISOLATE = {"isolate_recompiles": True} if "isolate_recompiles" in inspect.signature(torch.compile).parameters else {}


def _region(compiled):
    """The isolate_recompiles region of a torch.compile result (its dynamo context's, for a module); -1: none."""
    owner = getattr(compiled, "dynamo_ctx", compiled)
    return getattr(owner, "_isolate_recompiles_id", -1)


def _understood(x):
    if isinstance(x, (list, tuple)):
        return all(_understood(i) for i in x)
    if isinstance(x, dict):
        return all(_understood(v) for v in x.values())
    if dataclasses.is_dataclass(x) and not isinstance(x, type):  # Dynamo reads their fields
        return all(_understood(getattr(x, f.name, None)) for f in dataclasses.fields(x))
    return isinstance(x, _UNDERSTOOD)


def _unchanged(target):
    """A test, cheap enough for every call, that the function a wrapper compiled a copy of is as it was copied:
    the module's ``forward`` (its class the same -- parametrize, FSDP2 and quantization tools swap it --, the
    class's ``forward`` with the same code and defaults, and the instance's own ``forward`` attribute, if it sets
    one, the same object), the function, or a method's function, with the same code and defaults -- and that the
    global module hooks (``register_module_forward_hook`` and its kin) are those there were: Dynamo inlines them
    into the compiled code without guarding on them, so code compiled before one was registered ran without it,
    and code compiled with one kept running it after its removal. Only the hooks where ``target`` is not a plain
    function, a method or a module whose forward is one."""
    m = torch.nn.modules.module
    dicts = (m._global_forward_pre_hooks, m._global_forward_hooks, m._global_backward_pre_hooks,
             m._global_backward_hooks)
    built = tuple(tuple(d) for d in dicts)
    if any(built):  # rare: a profiler's or a FLOP counter's hooks
        def hooks():
            return tuple(tuple(d) for d in dicts) == built
    else:
        h0, h1, h2, h3 = dicts

        def hooks():
            return not (h0 or h1 or h2 or h3)
    if isinstance(target, nn.Module):
        cls, attributes = type(target), target.__dict__
        own = attributes.get("forward")
        fn = getattr(cls, "forward", None)
        if not isinstance(fn, types.FunctionType):
            return lambda: type(target) is cls and attributes.get("forward") is own and hooks()
        code, defaults, kwdefaults = fn.__code__, fn.__defaults__, fn.__kwdefaults__
        return lambda: (type(target) is cls and cls.forward is fn and fn.__code__ is code and
                        fn.__defaults__ is defaults and fn.__kwdefaults__ is kwdefaults and
                        attributes.get("forward") is own and hooks())
    fn = target.__func__ if isinstance(target, types.MethodType) else target
    if not isinstance(fn, types.FunctionType):
        return hooks
    code, defaults, kwdefaults = fn.__code__, fn.__defaults__, fn.__kwdefaults__
    if not any(built):  # the hook check written out: 0.05 us less per call than calling hooks()
        return lambda: (fn.__code__ is code and fn.__defaults__ is defaults and fn.__kwdefaults__ is kwdefaults and
                        not (h0 or h1 or h2 or h3))
    return lambda: fn.__code__ is code and fn.__defaults__ is defaults and fn.__kwdefaults__ is kwdefaults and hooks()


class _Jitted:
    """Shared by ThunderFunction and ThunderModule: the Dynamo-compiled callable and its state."""

    def _setup(self, target, name, executors, passes, debug=None, fullgraph=False, dynamic=None):
        # Checked here, at thunder.jit time: a bad executor or pass list would otherwise surface only inside the
        # backend, where every graph would fall back to eager.
        self._thunder_state = JitState(name, resolve_executors(executors), check_passes(passes),
                                       debug=check_debug(debug))
        self._thunder_fullgraph = _check_flag("fullgraph", fullgraph)
        self._thunder_dynamic = _check_dynamic(dynamic)
        self._thunder_backend = JitBackend(self._thunder_state)
        self._thunder_target = target
        self._thunder_release = None
        self._thunder_excluded = set()  # (file, line, code) of branches given up on (see thunder.frontend.branches)
        self._thunder_signature_fn = target.forward if isinstance(target, nn.Module) else target
        self._build()
        if self._thunder_code is not None:  # a new wrapper decides static or symbolic sizes from its own calls
            forget_shape_history(self._thunder_code)

    def _build(self):
        """Rewrites the target's data-dependent branches (leaving out the excluded ones) and wraps the result in
        torch.compile; the target itself is never modified.

        What Dynamo compiles is this wrapper's own copy of the code (``thunder.frontend.code_copies``): its cache
        entries and recompile limits are its own, and they are dropped when the wrapper is collected (or
        rebuilt)."""
        target, sites = self._thunder_target, self._thunder_state.branches
        instance = None  # the object a compiled method is bound to (the module whose forward it is)
        if isinstance(target, nn.Module):
            methods, converted = branches.rewrite_methods(target, sites, self._thunder_excluded)
            compiled_target, own = private_module(target, methods)
            instance = compiled_target
            converted = converted if compiled_target is not target else 0
        elif isinstance(target, types.FunctionType):
            rewritten = branches.rewrite(target, sites, self._thunder_excluded)
            compiled_target = own = private_function(rewritten.fn)
            converted = rewritten.converted
        elif isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
            own, instance, converted = private_function(target.__func__, method=True), target.__self__, 0
            compiled_target = types.MethodType(own, instance)
        else:
            compiled_target, own, converted = target, None, 0
        if self._thunder_release is not None:  # the previous copy's entries: nothing calls that code any more
            self._thunder_release()
        self._thunder_code = own.__code__ if own is not None else getattr(self._thunder_signature_fn, "__code__", None)
        # (A weak reference: the finalizer must not keep the wrapper's state alive; cached_backends holds the
        # backend until release drops it.)
        self._thunder_release = weakref.finalize(self, release, own.__code__, weakref.ref(self._thunder_backend)) \
            if own is not None else None
        if self._thunder_release is not None:
            self._thunder_release.atexit = False
        self._thunder_converted = converted
        self._thunder_instance = instance
        # A call returned `instance` inside a tuple, list or dict (see _original_in).
        self._thunder_returns_instance = False
        self._thunder_compiled = torch.compile(compiled_target, backend=self._thunder_backend,
                                               dynamic=self._thunder_dynamic, fullgraph=self._thunder_fullgraph, **_ISOLATE)
        self._thunder_region = _region(self._thunder_compiled)
        # A module's OptimizedModule is called through its forward (Dynamo's frame hook around the module's own
        # call): its __call__ would run global module hooks for the OptimizedModule too, and the module's own call,
        # compiled, runs them for the module as eager does.
        self._thunder_call = self._thunder_compiled.forward if isinstance(
            self._thunder_compiled, torch._dynamo.eval_frame.OptimizedModule) else self._thunder_compiled
        self._thunder_fast_path = None if own is None else FastPath(own, self._thunder_backend, self._thunder_state,
                                                                    self._thunder_region, instance)
        self._thunder_unchanged = _unchanged(self._thunder_target)

    def _follow_source(self):
        """Compiles the function again (a new copy) where it changed since it was copied: a class's ``forward``
        reassigned (``Model.forward = patched``), an instance's ``forward`` set, the module's class swapped
        (``m.__class__ = ...``), a function's ``__code__`` or defaults; or where global module hooks were registered
        or removed since (see _unchanged). The copy keeps what it was made from, so without this the old code ran,
        silently."""
        logger.info("thunder: %s changed since it was compiled (its forward or class reassigned, its code or "
                    "defaults, or the global module hooks): compiling the new one", self._thunder_state.name)
        target = self._thunder_target
        self._thunder_signature_fn = target.forward if isinstance(target, nn.Module) else target
        self._build()

    def _run(self, args, kwargs):
        if not self._thunder_unchanged():
            self._follow_source()
        state = self._thunder_state
        state.calls += 1
        graphs, breaks = state.graphs_made, len(state.graph_breaks)
        ran = state.graph_calls
        token = current_state.set(state)  # graph breaks Dynamo reports during this call are attributed to state
        listen_for_graph_breaks()  # (again: torch._logging.set_logs resets what thunder reads them from)
        # A frame whose trace fails (a converted branch that turns out not to be convertible; an op Dynamo's fake
        # tensors refuse where eager runs it, in a frame resumed after a graph break) runs eagerly with
        # suppress_errors: Dynamo runs that frame as written (_thunder_if takes one branch; a program eager fails on
        # raises eager's error) and skips its code from then on, and the record takes its "WON'T CONVERT" warning
        # (_settle_branches reports it). A fake-tensor failure in the function's own frame is raised all the same
        # (branches._FrameFailureFilter), and the call runs again eagerly (_failed_before_running), as with
        # fullgraph=True, where a frame that cannot be traced whole is an error.
        record = branches.TraceRecord() if self._thunder_converted or not self._thunder_fullgraph else None
        previous = branches.set_tracing_record(record) if record else None
        suppress, log_level = torch._dynamo.config.suppress_errors, None
        if record:
            record.own_code = self._thunder_code
            # A module whose hooks run before forward is not called again: Dynamo runs a forward whose trace failed.
            record.own_frame_reruns = self._callable_again()
            log_level = branches.hear_frame_failures()
            # (Where the user's logging drops the warning all the same, `logging.disable`, a failure would pass
            # unheard: Dynamo's errors are then raised, as without a record, but for converted branches.)
            if self._thunder_converted or branches.frame_failures_heard():
                torch._dynamo.config.suppress_errors = True
        left_out = skipped_logging.leave_out()
        retry, excluded = None, len(self._thunder_excluded)
        # A frame that runs no tensor op (an empty batch returned as it came) is given an empty graph, guarded
        # (thunder_backend runs it as it is): without one Dynamo skips the frame's code from then on, and every
        # later call ran uncompiled, silently.
        allow_empty = torch._dynamo.config.allow_empty_graphs
        torch._dynamo.config.allow_empty_graphs = True
        try:
            out = self._thunder_call(*args, **kwargs)
        except Exception as e:
            if self._thunder_fullgraph and record and (record.open or record.rejected):
                # A converted branch that could not be traced: from now on a graph break, which fullgraph=True
                # makes an error -- raised by this call, compiled again below, as torch.compile raises it.
                retry = e
            elif self._failed_before_running(e, ran):
                out = self._run_eagerly_after_failed_trace(e, args, kwargs)
            else:
                state.raised_calls += 1
                self._annotate(e, args, kwargs)
                if record and record.failures:
                    # A frame whose trace failed ran eagerly and raised: the program's error, not a limit of
                    # Dynamo's, which skips that frame's code from then on; compiled again, later calls compile.
                    self._build()
                raise
        except BaseException:  # KeyboardInterrupt, SystemExit: raised through, and counted
            state.raised_calls += 1
            raise
        finally:
            torch._dynamo.config.allow_empty_graphs = allow_empty
            skipped_logging.restore(left_out)
            current_state.reset(token)
            if state.graphs_made > graphs:
                forget_converted_tensors()
            if record:
                torch._dynamo.config.suppress_errors = suppress
                branches.restore_frame_log(log_level)
                branches.set_tracing_record(previous)
        if record and record.ran_eagerly:
            self._note_trace_failed(record.ran_eagerly[-1])
        if record and (record.open or record.rejected or record.failures):
            self._settle_branches(record)
        if retry is not None:
            if len(self._thunder_excluded) == excluded:  # no branch was given up: the error is the trace's own
                state.raised_calls += 1
                raise retry
            state.calls -= 1
            return self._run(args, kwargs)
        if state.graphs_made > graphs:
            state.cache_misses += 1
        elif state.graph_calls > ran:
            state.cache_hits += 1
        else:  # no graph ran: Dynamo ran the function uncompiled (a limit, a skipped frame, nothing to capture)
            state.eager_calls += 1
            self._check_recompile_limit()
        if state.limited_frames:
            count_limited_frames(state, state.graph_calls > ran)
        if self._thunder_fast_path is not None and (state.graphs_made > graphs or len(state.graph_breaks) > breaks):
            self._thunder_fast_path.refresh()
        return out

    def _settle_branches(self, record):
        """After a call in which Dynamo could not trace a frame: the converted branches whose tracing began and
        did not end (or that were rejected) are left as Python control flow from the next call on; a frame that
        failed for any other reason is reported as having run eagerly."""
        by_id = {site.id: (key, site) for key, site in self._thunder_state.branches.items()}
        failure = record.failures[-1][1] if record.failures else ""
        given_up = []
        for site_id in list(record.rejected) + [s for s in record.open if s not in record.rejected]:
            if site_id not in by_id:
                continue
            key, site = by_id[site_id]
            site.reason = record.rejected.get(site_id) or (f"tracing both arms failed: {failure}" if failure else
                                                           "a graph break splits the branch")
            self._thunder_excluded.add(key)
            site.given_up = True
            given_up.append(site)
        for site in given_up:
            logger.info("thunder: %s: the branch `%s` is not converted (%s); that call ran its frame eagerly, and "
                        "from the next call on it runs as Python control flow", site.location, site.code, site.reason)
        if given_up:
            self._build()
        elif record.failures:
            function = self._thunder_code.co_name if self._thunder_code is not None else self._thunder_state.name
            for frame, reason in record.failures:
                name = (frame.split() or [function])[0]
                part = function if name == function else f"{function} after a graph break ({frame})"
                if reason.startswith("Constraints violated"):
                    # An input's dim marked dynamic (torch._dynamo.mark_dynamic) that the code specializes: the call
                    # ran eagerly (torch.compile raises).
                    note_dynamo_stopped(self._thunder_state, "constraint", function, f"Dynamo's trace of {part} failed "
                                        f"({reason[:300]})", "the code specializes a dimension marked with "
                                        "torch._dynamo.mark_dynamic: remove the mark, or use "
                                        "torch._dynamo.maybe_mark_dynamic")
                    continue
                # Dynamo skips the frame's code from then on (a resumed frame: that part of the function).
                if reason.startswith("RecursionError"):
                    # Dynamo inlines every call, each in several frames of its own: a recursion eager runs within
                    # Python's limit exceeds it while traced.
                    fix = (f"Dynamo inlines each call of a recursive function in frames of its own, so a recursion "
                           f"eager runs can exceed Python's limit ({sys.getrecursionlimit()}) while traced: raise it "
                           "with sys.setrecursionlimit, or write the recursion as a loop")
                else:
                    fix = ("thunder.jit(..., dynamic=False) traces each input shape and number on its own, which may "
                           "avoid a failure of Dynamo's fake tensors; otherwise change the code Dynamo cannot trace "
                           "there")
                note_dynamo_stopped(self._thunder_state, "skip", function, f"Dynamo's trace of {part} failed "
                                    f"({reason[:300]})", fix)

    def _check_recompile_limit(self):
        """After a call that ran no graph: whether the code this wrapper compiles holds as many compiled entries
        as Dynamo allows (Dynamo warns only when it reaches the limit, in the call that did)."""
        code, limit, state = self._thunder_code, torch._dynamo.config.recompile_limit, self._thunder_state
        if code is None and not state.dynamo_stopped and isinstance(self._original(), _TORCHSCRIPT):
            note_dynamo_stopped(state, "skip", state.name, f"{state.name} is TorchScript (torch.jit.trace or "
                                "torch.jit.script), which Dynamo does not trace: every call runs it as it is",
                                "thunder.jit the Python module or function it was made from")
            return
        if code is None or "recompile_limit (" in state.dynamo_stopped:
            return
        if torch._C._functorch.peek_interpreter_stack() is not None:
            # (Not only the first call: after one inside a transform, Dynamo compiles no new graph for the code, and
            # the graphs it has keep serving the calls whose guards pass.)
            first = state.eager_calls == 1 and not state.graphs
            which = "the first" if first else "a"
            note_dynamo_stopped(state, "skip" if first else "limit", code.co_name, f"{which} call of "
                                f"'{code.co_name}' ran inside a torch.func transform (grad, vmap, jacrev...), which "
                                "Dynamo does not trace into from eager: it compiles nothing more for the code from "
                                "then on, as torch.compile does", "call the jitted function outside the transform "
                                "(or thunder.jit a new wrapper for the calls inside it)")
            return
        if state.eager_calls == 2 and not state.graphs and not state.graph_breaks and not state.dynamo_stopped and \
                not state.empty_graphs:  # (an empty graph, guarded, keeps Dynamo compiling the code)
            if code.co_flags & inspect.CO_GENERATOR:
                note_dynamo_stopped(state, "skip", code.co_name, f"'{code.co_name}' is a generator function: a call "
                                    "makes a generator, and its body runs as the generator is iterated, uncompiled",
                                    "thunder.jit the computation each item makes (a function the body calls), or "
                                    "the function that iterates the generator")
                return
            note_dynamo_stopped(state, "skip", code.co_name, "Dynamo compiled nothing in the first call of "
                                f"'{code.co_name}' (no tensor op ran, or it gave up on the frame without a graph "
                                "break: run with TORCH_LOGS=graph_breaks,dynamo to see why) and skips its code from "
                                "then on, as torch.compile does", "make the first call one that computes with "
                                "tensors (or thunder.jit a new wrapper); otherwise change what Dynamo cannot trace")
            return
        if len(cache_entries(code, self._thunder_region)) >= limit:
            note_recompile_limit(self._thunder_state, "recompile_limit", limit,
                                 f"'{code.co_name}' ({code.co_filename}:{code.co_firstlineno})")

    def _original(self):
        d = self.__dict__
        return d["_thunder_model"] if "_thunder_model" in d else d["_fn"]

    def _run_eagerly_after_failed_trace(self, error, args, kwargs):
        """The call run eagerly, where Dynamo, tracing with fake tensors, found that the program fails on these
        inputs before any of it ran (_failed_before_running). Its error wraps the fake tensors' (a
        TorchRuntimeError, whose inner type and message may differ from eager's); run eagerly, the program raises
        exactly what eager raises. Where eager runs it, Dynamo's tracing (its fake tensors, a number it made
        symbolic) is what failed: said once, with Dynamo's reason."""
        state = self._thunder_state
        logger.debug("thunder: %s fails while Dynamo traces it; running it eagerly: %s", state.name,
                     str(error).splitlines()[0])
        try:
            out = self._original()(*args, **kwargs)
        except Exception as eager_error:
            state.raised_calls += 1
            self._annotate(eager_error, args, kwargs)
            raise eager_error from None
        self._note_trace_failed(error)
        return out

    def _note_trace_failed(self, error):
        """Says once that Dynamo's trace of the function's own frame failed on inputs eager runs (that call ran
        eagerly), with Dynamo's reason."""
        function = self._thunder_code.co_name
        lines = [line.strip() for line in str(error).splitlines()]
        why = next((line[len("Explanation:"):].strip() for line in lines if line.startswith("Explanation:")),
                   lines[0] if lines else type(error).__name__)
        note_dynamo_stopped(self._thunder_state, "trace", function, f"Dynamo's trace of {function} failed on inputs "
                            f"eager runs ({why[:300]})", "thunder.jit(..., dynamic=False) traces each input shape and "
                            "number on its own, which may avoid it; otherwise it is a limit of Dynamo's tracing")

    def _failed_before_running(self, error, graphs_ran):
        """Whether Dynamo raised for a user error while tracing the called function's own frame (not a frame
        resumed after a graph break), with no graph run yet in this call: then nothing of the call has run. (A
        raise the code makes, branches.observed_exception, reaches here with fullgraph=True.) Not
        so for a module whose call does more than call ``forward`` (plain_module_call: hooks on it, on the jitted
        module or global ones): they ran, eagerly, before Dynamo traced ``forward``, and would run again."""
        if not isinstance(error, torch._dynamo.exc.TorchRuntimeError) and not branches.observed_exception(error):
            return False
        stack = getattr(error, "real_stack", None)
        code = self._thunder_code
        if not stack or code is None or self._thunder_state.graph_calls != graphs_ran or not self._callable_again():
            return False
        return (stack[0].filename, stack[0].name) == (code.co_filename, code.co_name)

    def _callable_again(self):
        """Whether a call whose traced frame failed before running may be made again, eagerly: not a module's whose
        call does more than call ``forward`` (plain_module_call), whose hooks ran already."""
        return not isinstance(self, ThunderModule) or plain_module_call(self, self._original())

    def _annotate(self, error, args, kwargs):
        """Adds a note naming each argument the compiled program does not understand."""
        import inspect

        try:
            bound = inspect.signature(self._thunder_signature_fn).bind(*args, **kwargs).arguments
        except (TypeError, ValueError):
            return
        for name, value in bound.items():
            note = (f"thunder: argument '{name}' is a {type(value).__name__}; the compiled program expects tensors, "
                    "numbers, strings, None, dtypes, devices, modules or lists/tuples/dicts of those")
            if not _understood(value) and note not in getattr(error, "__notes__", ()):  # (an error raised again)
                try:
                    error.add_note(note)
                except (TypeError, AttributeError):  # notes it does not take (a read-only __notes__)
                    return

    def _get_executors(self):
        """The executors this jitted callable uses, in priority order (list of thunder.executors.Executor)."""
        return list(self._thunder_state.executors)

    def _options(self):
        """The options this was jitted with, as thunder.jit's keyword arguments."""
        s = self._thunder_state
        return {"executors": list(s.executors), "passes": s.passes, "debug": s.debug,
                "fullgraph": self._thunder_fullgraph,
                "dynamic": self._thunder_dynamic}

    def _pickled_options(self):
        """The options, executors by name, for pickling. Raises pickle.PicklingError for executors that are not
        thunder's own (``thunder.executors.executors_by_name()``)."""
        import pickle

        from thunder.executors import executors_by_name

        options = self._options()
        known = executors_by_name()
        names = []
        for ex in options["executors"]:
            if known.get(ex.name) is not ex:
                kind = "module" if isinstance(self, nn.Module) else "function"
                raise pickle.PicklingError(f"thunder: cannot pickle a {kind} jitted with the executor {ex.name!r} "
                                           f"(not one of thunder's own); pickle the original {kind} and jit it "
                                           "again after loading")
            names.append(ex.name)
        options["executors"] = names
        return options

    def _report(self):
        return report(self._thunder_state)


def _headline(s):
    """The first line of a report: calls, graphs, cache hits and misses."""
    uncompiled = sum(isinstance(g, EagerGraph) for g in s.graphs)
    made = len(s.graphs) + sum(count for count, _, _ in s.folded.values())  # (released specializations too)
    graphs = f"{made} graphs compiled" if not uncompiled else \
        f"{made} graphs captured, {made - uncompiled} compiled, {uncompiled} run UNCOMPILED"
    eager = f", {s.eager_calls} calls ran UNCOMPILED (no graph ran)" if s.eager_calls else ""
    eager += (f", {s.partly_uncompiled_calls} calls ran part of the function UNCOMPILED (a frame past Dynamo's "
              "recompile limit ran no graph)" if s.partly_uncompiled_calls else "")
    eager += f", {s.raised_calls} calls raised" if s.raised_calls else ""
    eager += "".join(f", {name}() ran the original forward UNCOMPILED {n} times"
                     for name, n in s.uncompiled_methods.items())
    if s.name.startswith("torch.compile("):  # no thunder wrapper sees its calls: graphs count theirs
        return f"{s.name}: {graphs} (calls counted per graph)"
    return (f"thunder.jit({s.name}): {s.calls} calls, {graphs}, cache {s.cache_hits} hits / {s.cache_misses} "
            f"misses{eager}")


def _break_counts(s):
    """', 0 graph breaks, 1 of 1 data-dependent branch converted to selects': what the one-line summary of a jitted
    module adds to the headline."""
    breaks = len(dict.fromkeys(str(b) for b in s.graph_breaks))
    shown = branches.site_statuses(s.branches.values(), s.graph_breaks)
    text = f", {breaks} graph break{'s' if breaks != 1 else ''}"
    if shown:
        converted = sum(status == "converted" for _, status in shown)
        text += f", {converted} of {len(shown)} data-dependent branch{'es' if len(shown) != 1 else ''} converted to selects"
    return text


def _no_graph_reason(s):
    """Why a JitState that was called has no graph: every call raised before one was captured, or every call ran
    eagerly, and what is known of the cause."""
    if s.raised_calls and not s.eager_calls and not s.cache_hits:
        return "every call raised before a graph was captured (the error is the call's)"
    breaks = s.dynamo_stopped or s.graph_breaks
    if not breaks and s.empty_graphs:
        return "the calls ran no tensor op (Dynamo's graphs of them were empty: nothing to compile)"
    return "every call ran eagerly (" + ("see why above)" if breaks else
                                         "Dynamo compiled nothing at the first call -- no tensor op ran, or it "
                                         "gave up on the frame without a graph break -- and, as torch.compile "
                                         "does, skips this function's code from then on)")


def _specializes(g):
    """'; symbolic graph 1 at shapes s0=5 (its symbolic trace, sizes bound)' for a specialization of a graph with
    symbolic sizes; '' otherwise."""
    if not g.shapes:
        return ""
    how = "its symbolic trace, sizes bound" if g.shapes[2] is None else f"traced again: {g.shapes[2]}"
    return f"; symbolic graph {g.shapes[0]} at shapes {g.shapes[1]} ({how})"


def report(s):
    """What a JitState compiled, as ``print(thunder.summary(jitted))`` shows it: calls and cache hits, executors,
    graph breaks, data-dependent branches, and per graph its final trace (and backward)."""
    lines = [_headline(s), "executors: " + ", ".join(e.name for e in s.executors)]
    if s.dynamo_stopped:
        lines.append(f"Dynamo stopped compiling (calls or frames of this function run uncompiled): "
                     f"{s.dynamo_stopped}")
    breaks = list(dict.fromkeys(str(b) for b in s.graph_breaks))
    lines.append(f"graph breaks ({len(breaks)}):" if breaks else "graph breaks: none")
    lines += [f"  {b}" for b in breaks]
    shown = branches.site_statuses(s.branches.values(), s.graph_breaks)
    if shown:
        converted = sum(status == "converted" for _, status in shown)
        lines.append(f"data-dependent branches: {converted} converted to selects, {len(shown) - converted} left "
                     "as graph breaks:")
        lines += [f"  {b}" for b, _ in shown]
    if not s.graphs and s.calls:
        lines.append(f"no graph was captured: {_no_graph_reason(s)}")
    for g in s.graphs:
        if isinstance(g, EagerGraph):
            lines.append(f"graph {g.index}: UNCOMPILED, runs with torch as Dynamo captured it; called {g.calls} "
                         f"times; reason: {g.reason}{_specializes(g)}")
            continue
        if g.released:
            lines.append(f"graph {g.index}: compiled in {g.compile_seconds * 1e3:.1f} ms, called {g.calls} times, "
                         f"released: {g.released}{_specializes(g)}")
            continue
        opaque = f", {g.opaque_ops()} ops opaque" if g.opaque_ops() else ""
        if g.captured_calls:
            opaque += (f", {g.captured_calls} calls run UNCOMPILED, as captured (forward AD or a "
                       "TorchDispatchMode)")
        lines.append(f"graph {g.index}: compiled in {g.compile_seconds * 1e3:.1f} ms, called {g.calls} times, "
                     f"executors {', '.join(g.executors()) or 'none'}{opaque}{_specializes(g)}")
        lines += ["    " + l for l in str(g.execution_trace).rstrip().splitlines()]
        if g.autodiff == "thunder":
            lines.append(f"  graph {g.index} backward: compiled by thunder's autodiff "
                         f"(thunder.last_backward_traces), executors {', '.join(g.backward_executors()) or 'none'}")
            lines += ["    " + l for l in str(g.backward_traces[-1]).rstrip().splitlines()]
        elif g.autodiff:
            lines.append(f"  graph {g.index} backward: {g.autodiff}")
    for number, (count, calls, seconds) in s.folded.items():
        lines.append(f"symbolic graph {number}: {count} more specializations released, their records folded: "
                     f"compiled in {seconds * 1e3:.1f} ms, called {calls} times")
    return "\n".join(lines)


class ThunderFunction(_Jitted):
    """A function compiled by :func:`thunder.jit`. Call it like the original; ``print(jitted)`` shows what was
    compiled (as ``print(thunder.summary(jitted))`` does).

    The options are :func:`thunder.jit`'s, checked as it checks them (TypeError, ValueError)."""

    def __init__(self, fn, executors=None, passes=None, debug=None, fullgraph=False, dynamic=None):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._setup(fn, getattr(fn, "__qualname__", None) or repr(fn), executors, passes, debug, fullgraph, dynamic)

    def __call__(self, *args, **kwargs):
        if _is_compiling():  # traced by an enclosing compile: its trace takes in the original
            return self._fn(*args, **kwargs)
        if not kwargs and self._thunder_fast_path is not None:
            if not self._thunder_unchanged():
                self._follow_source()
            fast = self._thunder_fast_path
            try:
                out = MISS if fast is None else fast.call(args)  # counted in the state
            except Exception as e:
                self._annotate(e, args, kwargs)
                raise
            if out is not MISS:
                return out
        return self._run(args, kwargs)

    def __reduce__(self):
        """Pickles the function (by reference, as pickle does: a lambda or a nested function cannot be) and the
        options; loading jits it again (``multiprocessing`` with spawn, a DataLoader worker holding it). A wrapper
        that is itself the global its function's name gives (``@thunder.jit`` at module level) is pickled as that
        global. Raises pickle.PicklingError where the function or an executor cannot be pickled."""
        fn = self._fn
        owner = sys.modules.get(getattr(fn, "__module__", None) or "")
        found = owner
        for part in (getattr(fn, "__qualname__", "") or "").split("."):
            found = getattr(found, part, None)
        if owner is not None and found is self:
            return fn.__qualname__
        return _rebuild_function, (fn, self._pickled_options())

    def __deepcopy__(self, memo):
        """A deep copy of the jitted function, jitted with the same options (it compiles anew). A bound method
        (``m.forward = thunder.jit(m.forward)``, the guide's recipe for ``generate``) is bound to the copy of its
        module, so ``copy.deepcopy(m)`` works as it does with ``torch.compile(m.forward)``."""
        import copy

        return ThunderFunction(copy.deepcopy(self._fn, memo), **self._options())

    def __str__(self):
        return self._report()

    __repr__ = __str__


#: The attributes a ThunderModule keeps itself, prefixed ``_thunder_`` so that a module's own attributes of the
#: same names (a wrapper's ``self._model``) stay the module's; every other attribute is the original module's
#: (except dunder names such as ``__class__``: the wrapper's own identity, never the original's).
_OWN_ATTRIBUTES = frozenset(["_thunder_" + name for name in (
    "state", "compiled", "signature_fn", "model", "fast_path", "backend", "target", "excluded", "converted",
    "fullgraph", "dynamic", "code", "region", "release", "instance", "returns_instance", "unchanged", "lazy",
    "call")] + [
    # The wrapper's hooks are its own (nn.Module.__init__ made its hook dicts), and so is the flag that says
    # whether its backward hooks are full ones (register_full_backward_hook sets it): read from the original,
    # they were neither full nor not, and ran never.
    "_is_full_backward_hook"])


#: The hook dicts of a ThunderModule itself (nn.Module.__init__ made them): the forward and backward hooks
#: registered on the jitted module, which a copy of it keeps.
_WRAPPER_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                  "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_pre_hooks",
                  "_backward_hooks")


def _global_hooks_run_inside(attributes):
    """Whether a jitted module with these attributes (its ``__dict__``) is called without its own nn.Module call:
    there are global module hooks, and it has no hooks of its own (nor ``Module.compile()``). The wrapper stands
    for the original module, whose call (compiled, or traced by an enclosing compile) runs the global hooks once,
    as eager's does: the wrapper's own call would run them for it a second time. (With hooks of its own, it runs
    them, and the global ones, as any module: those fire twice.)"""
    return not any(attributes[k] for k in _WRAPPER_HOOKS) and attributes.get("_compiled_call_impl") is None and \
        bool(torch.nn.modules.module._has_any_global_hook())


def _original_in(out, instance, model):
    """``out`` with ``instance`` (the private module compiled in place of ``model``) replaced by ``model``, where
    it is ``out`` or is held in the tuples (namedtuples included), lists and dicts (OrderedDict included) ``out`` is
    made of; ``out`` itself when it holds none (or is a container that cannot be made again from its items)."""
    if out is instance:
        return model
    if isinstance(out, (tuple, list)):
        items = [_original_in(o, instance, model) for o in out]
        if any(a is not b for a, b in zip(items, out)):
            return _remade(out, items)
    elif isinstance(out, dict):
        items = {k: _original_in(v, instance, model) for k, v in out.items()}
        if any(items[k] is not v for k, v in out.items()):
            return _remade(out, items)
    return out


def _remade(container, items):
    """A container of ``container``'s type holding ``items``; ``container`` where its type cannot be made so."""
    kind = type(container)
    try:
        return kind._make(items) if isinstance(container, tuple) and hasattr(kind, "_make") else kind(items)
    except Exception:  # noqa: BLE001 -- a container type whose constructor takes other arguments
        return container


def _is_dunder(name):
    return name.startswith("__") and name.endswith("__")


class ThunderModule(_Jitted, nn.Module):
    """An nn.Module compiled by :func:`thunder.jit`.

    It shares the original module's parameters, buffers and submodules (same
    names in ``state_dict``); ``train()``/``eval()`` switch the original; other
    attributes are read from and written to the original -- except the wrapper's identity: assigning
    ``__class__`` (as FSDP2's ``fully_shard`` does) or another dunder attribute changes the wrapper, never
    the original. ``repr(jitted)`` is the module tree and one summary line (``print(thunder.summary(jitted))``
    shows the traces). Pickling it (``pickle``, ``torch.save``) saves the original module and the options;
    the loaded object compiles again on its first call. The options are :func:`thunder.jit`'s, checked as
    it checks them (TypeError, ValueError).
    """

    def __new__(cls, model, *args, **kwargs):
        # A container module (Sequential, ModuleList, ModuleDict, or a class of its own that defines __len__,
        # __getitem__ or __iter__) stays one.
        if cls is ThunderModule and any(hasattr(type(model), name) for name in ("__len__", "__getitem__", "__iter__")):
            cls = ThunderContainerModule
        return super().__new__(cls)

    def __init__(self, model, executors=None, passes=None, debug=None, fullgraph=False, dynamic=None):
        nn.Module.__init__(self)
        object.__setattr__(self, "_thunder_model", model)
        # The state and what loads and saves it are the original's: its parameters, buffers, submodules and
        # state-dict hooks (a parent's load_state_dict runs a child's post-hooks itself).
        for name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_state_dict_hooks",
                     "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"):
            object.__setattr__(self, name, getattr(model, name))
        object.__setattr__(self, "_thunder_lazy", tuple(m for m in model.modules() if isinstance(m, LazyModuleMixin)))
        self._setup(model, type(model).__name__, executors, passes, debug, fullgraph, dynamic)

    @property
    def training(self):
        return self.__dict__["_thunder_model"].training if "_thunder_model" in self.__dict__ else True

    @training.setter
    def training(self, mode):
        if "_thunder_model" in self.__dict__:
            self._thunder_model.training = mode

    def __call__(self, *args, **kwargs):
        """Through the fast path (``thunder.frontend.fast_path``) when the call would only run ``forward`` (no
        hooks) and the guards of an entry this wrapper compiled pass; else as any module is called."""
        d = self.__dict__
        fast = d["_thunder_fast_path"]
        if _is_compiling():  # traced by an enclosing compile: its hooks, then forward (the original's call)
            if _global_hooks_run_inside(d):
                return self.forward(*args, **kwargs)
            return nn.Module.__call__(self, *args, **kwargs)
        model = d["_thunder_model"]
        if d["_thunder_lazy"]:  # lazy modules to initialize: forward does (see there)
            return nn.Module.__call__(self, *args, **kwargs)
        if not kwargs and fast is not None and "forward" not in d and plain_module_call(self, model):
            if not d["_thunder_unchanged"]():
                self._follow_source()
                fast = d["_thunder_fast_path"]
            try:
                out = MISS if fast is None else fast.call(args)  # counted in the state
            except Exception as e:
                self._annotate(e, args, kwargs)
                raise
            if out is not MISS:
                if out is d["_thunder_instance"] or d["_thunder_returns_instance"]:
                    return _original_in(out, d["_thunder_instance"], d["_thunder_model"])
                return out
        # A forward set on the wrapper (accelerate's hooks, a LoRA patch) is meant to call the compiled one it read
        # before: one that did not ran uncompiled, which is counted and said once.
        calls = self._thunder_state.calls if "forward" in d else None
        out = self.forward(*args, **kwargs) if _global_hooks_run_inside(d) else nn.Module.__call__(self, *args, **kwargs)
        if calls is not None and self._thunder_state.calls == calls:
            self._note_replaced_forward_ran()
        return out

    def _note_replaced_forward_ran(self):
        state = self._thunder_state
        state.calls += 1
        state.eager_calls += 1
        if not self.__dict__.get("_thunder_warned_forward"):
            self.__dict__["_thunder_warned_forward"] = True
            logger.warning("thunder: %s.forward was replaced by a function that does not call the compiled forward "
                           "(the jitted module's forward before the replacement): its calls run uncompiled. To fix: "
                           "call the previous jitted.forward from the replacement, or set the attribute on the "
                           "original module (model.forward = f) and call the jitted module, which compiles f. "
                           "print(jitted) and thunder.compile_stats count the calls that ran uncompiled.", state.name)

    def _lazy_call_pending(self, model, args, kwargs):
        """Initializes the lazy modules (nn.LazyLinear and the like: their parameters are made from the first
        call's inputs, and each becomes its ``cls_to_become``) as their pre-hooks do in eager. The module itself is
        initialized here, on the original, before compiling: its hook, run on the compiled copy, left the original
        lazy, and nothing compiled. Lazy submodules are given their inputs by the forward: True when this call
        must run eagerly for them (Dynamo cannot make their parameters from symbolic sizes, with dynamic=True);
        the next call compiles."""
        if isinstance(model, LazyModuleMixin) and model.has_uninitialized_params():
            model._infer_parameters(model, args, kwargs)
        pending = [m for m in self.__dict__["_thunder_lazy"]
                   if isinstance(m, LazyModuleMixin) and m.has_uninitialized_params()]
        if not pending:
            self.__dict__["_thunder_lazy"] = ()
            return False
        state = self._thunder_state
        state.calls += 1
        state.eager_calls += 1
        logger.info("thunder: %s has lazy submodules (%s): this call runs eagerly and makes their parameters; the "
                    "next one compiles", state.name, ", ".join(type(m).__name__ for m in pending))
        return True

    def forward(self, *args, **kwargs):
        d = self.__dict__
        if _is_compiling():  # traced by an enclosing compile: its trace takes in the original
            return d["_thunder_model"](*args, **kwargs)
        if d["_thunder_lazy"] and self._lazy_call_pending(d["_thunder_model"], args, kwargs):
            return d["_thunder_model"](*args, **kwargs)  # the wrapper's own hooks ran around this, as ever
        out = self._run(args, kwargs)
        # A forward returning `self` returns the module compiled, which shares the original's state
        # (code_copies.private_module): the caller gets the original, as in eager. Every compiled entry's first
        # call comes here, so the fast path looks into containers only once one held it.
        original = _original_in(out, d["_thunder_instance"], d["_thunder_model"])
        if original is not out and out is not d["_thunder_instance"]:
            d["_thunder_returns_instance"] = True
        return original

    def train(self, mode: bool = True):
        self._thunder_model.train(mode)
        return self

    def state_dict(self, *args, **kwargs):
        return self._thunder_model.state_dict(*args, **kwargs)

    def __deepcopy__(self, memo):
        """A deep copy of the original module, jitted with the same options (it compiles anew)."""
        import copy

        copied = ThunderModule(copy.deepcopy(self.__dict__["_thunder_model"], memo), **self._options())
        copied.__dict__.update(copy.deepcopy(self._wrapper_hooks(), memo))
        return copied

    def __reduce__(self):
        """Pickles the original module, the options (executors by name) and the hooks registered on the wrapper;
        loading jits it again, and the loaded module compiles on its first call. Raises pickle.PicklingError for
        executors that are not thunder's own (``thunder.executors.executors_by_name()``): pickle the original
        module instead."""
        options = self._pickled_options()
        return _rebuild_module, (self.__dict__["_thunder_model"], options, self._wrapper_hooks())

    def _wrapper_hooks(self):
        """The hook dicts of the wrapper itself (hooks registered on the jitted module) that hold hooks, and
        whether its backward hooks are full ones: what a copy keeps, as a copy of a module keeps its hooks."""
        held = {k: self.__dict__[k] for k in _WRAPPER_HOOKS if self.__dict__.get(k)}
        if held:
            held["_is_full_backward_hook"] = self.__dict__.get("_is_full_backward_hook")
        return held

    def load_state_dict(self, *args, **kwargs):
        return self._thunder_model.load_state_dict(*args, **kwargs)

    # Where a parent module walks its tree, the jitted module stands for the original: a parent's load_state_dict
    # loads it with the original's rules (its class's _load_from_state_dict, set_extra_state), a parent's .to() or
    # .double() runs the original's _apply (an override that casts a cache), apply() reaches the original (weight
    # init by isinstance). named_modules() and modules() list the wrapper, not the original: listing both counted
    # their shared parameters twice (parameter groups, hooks on every module), and FSDP2 keeps its state on the
    # wrapper.

    def _load_from_state_dict(self, *args, **kwargs):
        return self._thunder_model._load_from_state_dict(*args, **kwargs)

    def _apply(self, fn, recurse=True):
        self._thunder_model._apply(fn, recurse)
        return self

    def apply(self, fn):
        """``fn`` applied to every submodule of the original module, then to the original (nn.Module.apply)."""
        self._thunder_model.apply(fn)
        return self

    def __getattr__(self, name):
        try:
            return nn.Module.__getattr__(self, name)
        except AttributeError:
            model = self.__dict__["_thunder_model"]
            value = getattr(model, name)
        if isinstance(value, types.MethodType) and value.__self__ is model:
            return _watched_method(self._thunder_state, model, name, value)
        return value

    def __setattr__(self, name, value):
        # `jitted.forward = wrapper` (accelerate's hooks, LoRA patches: a wrapper calling the `jitted.forward` read
        # before) wraps the jitted module's forward, as it wraps a module's own: the wrapper's, not the original's
        # (where the compiled code would run the wrapper, which calls the compiled code: a recursion).
        if name in _OWN_ATTRIBUTES or _is_dunder(name) or name == "forward":
            object.__setattr__(self, name, value)
        elif "_thunder_model" in self.__dict__:
            setattr(self._thunder_model, name, value)
        else:
            nn.Module.__setattr__(self, name, value)

    def __delattr__(self, name):
        if name in self.__dict__ or _is_dunder(name) or "_thunder_model" not in self.__dict__:
            nn.Module.__delattr__(self, name)
        else:
            delattr(self._thunder_model, name)

    def __repr__(self):
        """The original module's tree, then one line: calls, graphs, cache hits (traces: thunder.summary)."""
        state = self._thunder_state
        return (f"{self.__dict__['_thunder_model']!r}\n{_headline(state)}{_break_counts(state)}; "
                "print(thunder.summary(...)) for the traces")

    __str__ = __repr__


#: What torch.jit.trace makes of a module: compiled by TorchScript, which Dynamo runs as it is.
_TORCHSCRIPT = torch.jit.ScriptModule

#: (jitted module name, method name) pairs already warned about by _watched_method.
_warned_methods = set()


def _watched_method(state, model, name, method):
    """``method``, a method of the original module read through its ThunderModule (``jitted.generate``), wrapped so
    that a call which runs the original module's forward -- uncompiled: only calls of the jitted module itself are
    compiled, and Hugging Face's ``generate`` calls ``self(...)`` on the original -- is counted in ``state``
    (``print(jitted)``, ``compile_stats(jitted).uncompiled_methods``) and warned about once, naming the fix.
    For the duration of the call the original module's ``forward`` is an instance attribute counting its calls:
    ``self(x)`` (nn.Module's call reads ``self.forward``) and ``self.forward(x)`` alike (a forward pre-hook sees
    only the first). Dynamo's guards do not read the original's attributes: the compiled entries stay valid."""

    @functools.wraps(method)
    def watched(*args, **kwargs):
        calls = [0]
        # An instance attribute forward the user set is kept; one of another thread's watched calls is not.
        own = model.__dict__.get("forward")
        own = getattr(own, "_thunder_replaced", own)
        forward = own if own is not None else type(model).forward.__get__(model, type(model))

        @functools.wraps(forward)
        def counted(*a, **k):
            calls[0] += 1
            return forward(*a, **k)

        counted._thunder_replaced = own
        model.__dict__["forward"] = counted
        try:
            return method(*args, **kwargs)
        finally:
            if model.__dict__.get("forward") is counted:
                if own is None:
                    del model.__dict__["forward"]
                else:
                    model.__dict__["forward"] = own
            if calls[0]:
                state.uncompiled_methods[name] = state.uncompiled_methods.get(name, 0) + calls[0]
                if (state.name, name) not in _warned_methods:
                    _warned_methods.add((state.name, name))
                    logger.warning("thunder: jitted %s.%s(...) ran the module's forward uncompiled (%d calls): a "
                                   "jitted module compiles calls of itself, not calls its methods make on the "
                                   "original module. To fix: jit the forward instead, "
                                   "model.forward = thunder.jit(model.forward).", state.name, name, calls[0])

    return watched


class ThunderContainerModule(ThunderModule):
    """A jitted container module (``nn.Sequential``, ``nn.ModuleList``, ``nn.ModuleDict``, or another whose class
    defines ``__len__``, ``__getitem__`` or ``__iter__``): indexing, item assignment and deletion, ``len``,
    iteration, ``in`` and truth are the original's, as in eager; calling it runs the compiled forward."""

    def __getitem__(self, key):
        return self.__dict__["_thunder_model"][key]

    def __setitem__(self, key, value):
        self.__dict__["_thunder_model"][key] = value

    def __delitem__(self, key):
        del self.__dict__["_thunder_model"][key]

    def __len__(self):
        return len(self.__dict__["_thunder_model"])

    def __iter__(self):
        return iter(self.__dict__["_thunder_model"])

    def __contains__(self, key):
        return key in self.__dict__["_thunder_model"]

    def __bool__(self):
        return bool(self.__dict__["_thunder_model"])


def _rebuild_function(fn, options):
    """Unpickles a ThunderFunction (see ThunderFunction.__reduce__): the function, jitted again."""
    return ThunderFunction(fn, **options)


def _rebuild_module(model, options, hooks=None):
    """Unpickles a ThunderModule (see ThunderModule.__reduce__): the module, jitted again, with the wrapper's
    hooks."""
    jitted = ThunderModule(model, **options)
    jitted.__dict__.update(hooks or {})
    return jitted


def _check_flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"thunder.jit: {name} must be True or False, got {type(value).__name__}: {value!r}")
    return value


def _check_dynamic(dynamic):
    """thunder.jit's ``dynamic`` (torch.compile's meaning): None, True or False; TypeError otherwise."""
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"thunder.jit: dynamic must be True, False or None, got {type(dynamic).__name__}: "
                        f"{dynamic!r}")
    return dynamic


def compiled_graphs(jitted):
    """The graphs thunder compiled (not those running uncompiled) of a jitted callable or a JitState."""
    state = jitted if isinstance(jitted, JitState) else jitted._thunder_state
    return [g for g in state.graphs if isinstance(g, CompiledGraph)]


@dataclass
class CompileStats:
    """What thunder.jit did: calls, cache hits/misses, and per graph its compile time (seconds)."""

    calls: int
    cache_hits: int
    cache_misses: int
    graphs: list          # dicts: index, compiled (bool), reason (str, or None if compiled), calls, compile_seconds, pass_seconds
    graph_breaks: list    # GraphBreak
    eager_calls: int = 0  # calls that ran no graph: Dynamo ran the function uncompiled (not counted as cache hits)
    dynamo_stopped: str = ""  # why Dynamo stopped compiling the function (a recompile limit), "" if it did not
    branches: list = field(default_factory=list)  # thunder.frontend.branches.BranchSite per `if` of the jitted code
    symbolic_graphs: int = 0  # graphs Dynamo captured with symbolic sizes; each is compiled once per shape signature
    #: Methods of a jitted module's original that ran its forward uncompiled (``jitted.generate``): name -> forwards.
    uncompiled_methods: dict = field(default_factory=dict)
    #: Calls that ran graphs, but none of a frame that had reached Dynamo's recompile limit (after a graph break,
    #: the rest of the function ran uncompiled); counted as cache hits or misses too.
    partly_uncompiled_calls: int = 0
    #: Symbolic graph number -> {"specializations", "calls", "compile_seconds"} of its released specializations no
    #: longer listed in ``graphs``: past THUNDER_MAX_SPECIALIZATIONS released ones, the oldest records are folded.
    folded_specializations: dict = field(default_factory=dict)

    @property
    def dynamo_graphs(self):
        """How many graphs Dynamo captured: those with static shapes (one entry of ``graphs`` each) and those with
        symbolic sizes (``symbolic_graphs``; an entry of ``graphs`` per shape signature they were called with)."""
        return sum(g["symbolic"] is None for g in self.graphs) + self.symbolic_graphs

    @property
    def branches_converted(self):
        """How many data-dependent branches are compiled to selects (in some graph)."""
        return sum(status == "converted" for _, status in branches.site_statuses(self.branches, self.graph_breaks))

    @property
    def branches_left(self):
        """How many data-dependent branches are graph breaks: given up while traced, or not converted (the reason
        is each site's ``reason``) with a graph break at their line."""
        return sum(status == "left" for _, status in branches.site_statuses(self.branches, self.graph_breaks))

    @property
    def uncompiled(self):
        """The graphs that run with torch as Dynamo captured them (dicts as in ``graphs``), each with its reason."""
        return [g for g in self.graphs if not g["compiled"]]
