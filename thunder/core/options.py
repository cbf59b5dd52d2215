"""Options that change what thunder does or reports."""
import enum
import logging
import os

TRACE_LEVEL = 5  # below logging.DEBUG
logging.addLevelName(TRACE_LEVEL, "TRACE")


class LogLevel(enum.IntEnum):
    """Log levels for :func:`thunder.set_log_level`, most to least severe.

    ERROR and WARNING report problems; INFO reports each compiled graph and
    each graph break; DEBUG also reports every pass with its time and the
    compiler's fallbacks; TRACE also writes every intermediate trace.
    The values are the standard :mod:`logging` levels (TRACE is 5).
    """

    ERROR = logging.ERROR
    WARNING = logging.WARNING
    INFO = logging.INFO
    DEBUG = logging.DEBUG
    TRACE = TRACE_LEVEL


#: Passes run on every captured graph, in order (names from thunder._core.pass_names()).
DEFAULT_PASSES = ("functionalize", "cse", "constant_folding", "dce", "claim", "fusion", "release")

#: What the pipeline requires of a pass list, beyond known names each at most once: (pass, rule, check).
#: "functionalize" removes writes and branch regions, which every other pass assumes are gone (they would
#: fold, merge or fuse across a write as if values never changed);
#: "fusion" groups what "claim" gave a fusion executor (before claim, nothing is claimed: it would do nothing);
#: "release" inserts ``del`` symbols that no other pass knows (a later pass would fuse or fold across them).
_PASS_ORDER_RULES = (
    ("functionalize", "'functionalize' must be the first pass (the others assume a trace without writes)",
     lambda p: p[0] == "functionalize"),
    ("fusion", "'fusion' needs 'claim' before it (it groups what claiming gave a fusion executor)",
     lambda p: p.index("claim") < p.index("fusion") if "claim" in p else False),
    ("release", "'release' must be the last pass (no other pass knows the del symbols it inserts)",
     lambda p: p[-1] == "release"),
)


def check_passes(passes):
    """The pass list ``thunder.jit(..., passes=...)`` asks for, checked.

    Args:
        passes: ``None`` (:data:`DEFAULT_PASSES`) or a list or tuple of pass names from
            ``thunder._core.pass_names()``, in the order to run them (empty: no pass runs).
    Returns:
        The passes as a tuple.
    Raises:
        TypeError: ``passes`` is a string (a sequence of names is expected, e.g. ``("dce",)``), not a
            list or tuple, or holds something other than strings.
        ValueError: an unknown pass (the message lists the valid ones); a pass listed twice; an order the
            pipeline cannot run: ``"functionalize"`` not first, ``"fusion"`` before ``"claim"`` or without it,
            ``"release"`` not last.
    """
    from thunder import _core

    if passes is None:
        return DEFAULT_PASSES
    if isinstance(passes, str):
        raise TypeError(f"thunder.jit: passes must be a list or tuple of pass names, e.g. ({passes!r},); "
                        f"got the string {passes!r}")
    if not isinstance(passes, (list, tuple)):
        raise TypeError(f"thunder.jit: passes must be a list or tuple of pass names, got {type(passes).__name__}")
    valid = list(_core.pass_names())
    for name in passes:
        if not isinstance(name, str):
            raise TypeError(f"thunder.jit: pass names are strings, got {type(name).__name__}: {name!r}")
        if name not in valid:
            raise ValueError(f"thunder.jit: unknown pass {name!r}; valid passes: {', '.join(valid)} "
                             f"(default order: {', '.join(DEFAULT_PASSES)})")
        if passes.count(name) > 1:
            raise ValueError(f"thunder.jit: pass {name!r} is listed {passes.count(name)} times; each runs at most once")
    passes = tuple(passes)
    for name, rule, ok in _PASS_ORDER_RULES:
        if name in passes and not ok(passes):
            raise ValueError(f"thunder.jit: invalid pass order {list(passes)}: {rule}")
    return passes


def int_from_environment(name, default, minimum=1):
    """The integer the environment variable ``name`` holds, at least ``minimum`` (``default`` where unset).

    Raises:
        ValueError: it holds anything else, naming the variable, what it holds and what was expected."""
    text = os.environ.get(name)
    if text is None:
        return default
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or int(digits) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {text!r}")
    return int(digits)
