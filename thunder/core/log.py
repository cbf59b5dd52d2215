"""thunder's logger: one ``logging.Logger`` named "thunder"."""
import logging
import os

from thunder.core.options import TRACE_LEVEL, LogLevel

logger = logging.getLogger("thunder")
logger.propagate = False
_stderr = logging.StreamHandler()
_stderr.setFormatter(logging.Formatter("[thunder %(levelname)s] %(message)s"))
logger.addHandler(_stderr)
logger.setLevel(logging.WARNING)
_file_handler = None


def set_log_level(level: LogLevel) -> None:
    """Sets how much thunder logs.

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

    While a log file is set, messages go to the file only; stderr gets warnings and errors.
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
