"""thunder's logger: one ``logging.Logger`` named "thunder", which behaves like a library's.

Its records propagate to Python's logging, so the application's handlers (``logging.basicConfig``, a
file, a log collector) get them; :func:`set_log_level` sets which records thunder makes. When the
application has configured no handler that receives them (on the "thunder" logger or the root's), thunder
writes its records to stderr itself (``[thunder INFO] ...``), so ``thunder.set_log_level(LogLevel.INFO)`` shows something in a
plain script. :func:`set_log_file` also writes every record to a file (stderr then gets warnings and
errors only).

What each level adds (:class:`thunder.core.options.LogLevel`): WARNING, a graph that runs uncompiled
(once per cause); INFO, each graph compiled (its ops, fusions, opaque ops, time), each graph break and
each data-dependent branch converted to a select or left as Python control flow; DEBUG, each pass with
its time, kernel compiles and cache hits, opaque fallbacks; TRACE, every intermediate trace and the
generated kernels' sources.
"""
import logging
import os

from thunder.core.options import TRACE_LEVEL, LogLevel

logger = logging.getLogger("thunder")
logger.propagate = True
logger.setLevel(logging.WARNING)


class _StderrWhenUnconfigured(logging.StreamHandler):
    """Writes to stderr only while the application has configured no logging handler for thunder's records (none
    on the "thunder" logger besides thunder's own, nor on the loggers they propagate to, the root's among them):
    otherwise the records reach the application's handlers, and writing them here too would print them twice."""

    def emit(self, record):
        if not _application_handles(logging.getLogger(record.name)):
            super().emit(record)


def _application_handles(log):
    """Whether a handler of the application's receives the records of ``log`` (thunder's, or a child of it)."""
    while log is not None:
        if any(h is not _stderr and h is not _file_handler for h in log.handlers):
            return True
        if not log.propagate:
            return False
        log = log.parent
    return False


_stderr = _StderrWhenUnconfigured()
_stderr.setFormatter(logging.Formatter("[thunder %(levelname)s] %(message)s"))
logger.addHandler(_stderr)
_file_handler = None


def set_log_level(level: LogLevel) -> None:
    """Sets how much thunder logs: the level of the "thunder" logger (its records propagate to Python's logging,
    whose handlers decide where they go; see :mod:`thunder.core.log`).

    Args:
        level: a :class:`thunder.core.options.LogLevel`, or a standard :mod:`logging` level int
            from 0 (``logging.NOTSET``: everything) to 50 (``logging.CRITICAL``); TRACE is 5.
    Raises:
        TypeError: ``level`` is not a LogLevel or an int (a bool is neither).
        ValueError: ``level`` is an int outside 0..50.
    """
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError("thunder.set_log_level: expected a thunder.core.options.LogLevel or a logging level int, "
                        f"got {type(level).__name__}: {level!r}")
    if not logging.NOTSET <= level <= logging.CRITICAL:
        raise ValueError(f"thunder.set_log_level: {level} is not a logging level (expected {logging.NOTSET} to "
                         f"{logging.CRITICAL}: {', '.join(f'{m.name} = {m.value}' for m in LogLevel)})")
    logger.setLevel(int(level))


def set_log_file(path) -> None:
    """Also writes thunder's log to ``path`` (appending); ``None`` stops writing to a file.

    While a log file is set, thunder's own stderr output (see :mod:`thunder.core.log`) is limited to warnings
    and errors; the records still propagate to the application's handlers.
    """
    global _file_handler
    if _file_handler is not None:
        logger.removeHandler(_file_handler)
        _file_handler.close()
        _file_handler = None
    if path is None:
        _stderr.setLevel(logging.NOTSET)
        return
    _file_handler = logging.FileHandler(os.fspath(path), mode="a", encoding="utf-8")
    _file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(_file_handler)
    _stderr.setLevel(logging.WARNING)


def trace_enabled() -> bool:
    return logger.isEnabledFor(TRACE_LEVEL)


def log_trace(msg, *args) -> None:
    logger.log(TRACE_LEVEL, msg, *args)
