"""Debugging compiled programs: trace sources in :mod:`linecache`, errors that name the user's line, pdb.

Every program thunder ``exec``-s (a trace's function, a kernel's launcher) is registered with
:mod:`linecache` under a file name of its own (``<thunder trace release (3)>``), so a traceback through
it shows the trace's line, and ``pdb`` lists and steps through it. An exception raised while a compiled
graph runs gets a note (:func:`annotate`) with that line and, next to it, the user's source line the
trace says it came from::

    RuntimeError: The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1
    thunder: raised at line 12 of the compiled trace <thunder trace release (3)>:
        t3 = ltorch.add(t1, t2)  # t3: "cpu f32[2, 3]"
      from your code at model.py:28 in forward: x = x + self.bias

``thunder.jit(fn, debug="pdb")`` runs each compiled graph's execution trace under :mod:`pdb`, stopped
at its first line (:func:`debug_runner`).
"""
import itertools
import linecache
import re
import weakref

#: File names given so far (a counter keeps them distinct: two graphs' traces may share a pass name).
_counter = itertools.count()
_PREFIX = "<thunder "
_SOURCE_COMMENT = re.compile(r"^  # (\S+:\d+ in .*)$")

#: Values of thunder.jit's ``debug`` option.
DEBUG_MODES = ("pdb",)


def register_source(text: str, label: str) -> str:
    """Registers ``text`` (a program about to be compiled) with linecache; returns the file name to compile it
    under: ``<thunder {label} (n)>``. The entry stays until :func:`release_source_with`'s object is freed."""
    filename = f"{_PREFIX}{label} ({next(_counter)})>"
    lines = text.splitlines(True)
    linecache.cache[filename] = (len(text), None, lines, filename)  # mtime None: checkcache keeps it
    return filename


def release_source_with(obj, filename: str) -> None:
    """Drops ``filename``'s linecache entry when ``obj`` (the function compiled from it) is garbage collected."""
    weakref.finalize(obj, linecache.cache.pop, filename, None)


def is_thunder_source(filename: str) -> bool:
    """Whether a code object's file name is one :func:`register_source` gave."""
    return filename.startswith(_PREFIX)


def user_source_of(filename: str, lineno: int) -> str:
    """The user's source line a trace line came from (``"model.py:28 in forward: x = x + self.bias"``): the
    source comment the printer puts above the symbols each line of user code produced; "" if none."""
    lines = linecache.getlines(filename)
    for i in range(min(lineno, len(lines)) - 1, 0, -1):
        line = lines[i].rstrip("\n")
        if line.startswith("def "):
            break
        match = _SOURCE_COMMENT.match(line)
        if match and not lines[i - 1].strip():
            return match.group(1)
    return ""


def annotate(error: BaseException) -> None:
    """Adds a note to ``error`` raised while a compiled program ran: the trace line it was raised at (the
    innermost frame of a thunder trace in its traceback) and the user's source line that line came from.
    Does nothing if no trace frame is in the traceback or the note is there already."""
    notes = getattr(error, "__notes__", ())
    if any(n.startswith("thunder: raised at line") for n in notes):
        return
    where = None
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(_PREFIX + "trace"):
            where = (filename, tb.tb_lineno)
        tb = tb.tb_next
    if where is None:
        return
    filename, lineno = where
    line = linecache.getline(filename, lineno).rstrip()
    note = f"thunder: raised at line {lineno} of the compiled trace {filename}:\n    {line.strip()}"
    source = user_source_of(filename, lineno)
    if source:
        note += f"\n  from your code at {source}"
    try:
        error.add_note(note)
    except (AttributeError, TypeError):  # an exception type that takes no notes
        pass


def check_debug(debug):
    """The ``debug`` option of :func:`thunder.jit`, checked: None, False or ``"pdb"``. Returns it (None for
    False). Raises TypeError for a non-string, ValueError for an unknown mode."""
    if debug is None or debug is False:
        return None
    if not isinstance(debug, str):
        raise TypeError(f"thunder.jit: debug must be None or one of {DEBUG_MODES}, got {type(debug).__name__}: "
                        f"{debug!r}")
    if debug not in DEBUG_MODES:
        raise ValueError(f"thunder.jit: unknown debug mode {debug!r}; valid: {', '.join(map(repr, DEBUG_MODES))}")
    return debug


def debug_runner(fn, debug):
    """``fn`` (a trace's function) as the ``debug`` mode runs it: for ``"pdb"``, each call runs it under a new
    :class:`pdb.Pdb`, stopped at its first line: ``n`` runs one op, ``p t3`` prints a value, ``l`` lists the
    trace, ``c`` runs the rest. ``fn`` itself for no mode. Quitting the debugger (``q``, or the end of its input)
    raises :class:`bdb.BdbQuit`, as quitting at a ``breakpoint()`` in eager code does (``Pdb.runcall`` returns None
    then, which is no trace's result)."""
    if debug is None:
        return fn
    import bdb
    import pdb

    def run_under_pdb(*args):
        debugger, quit = pdb.Pdb(), []
        set_quit = debugger.set_quit

        def note_quit():
            quit.append(True)
            set_quit()

        debugger.set_quit = note_quit
        result = debugger.runcall(fn, *args)
        if quit:
            raise bdb.BdbQuit("the debugger was quit (q or the end of its input) before the trace returned")
        return result
    run_under_pdb.__wrapped__ = fn
    return run_under_pdb
