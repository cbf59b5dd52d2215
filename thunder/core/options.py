"""Options that change what thunder does or reports."""
import enum
import logging

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
DEFAULT_PASSES = ("cse", "constant_folding", "dce", "claim", "fusion", "release")
