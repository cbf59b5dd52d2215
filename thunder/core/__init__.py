"""The Python side of thunder's core: options, logging, dtype conversion and
the compile pipeline that drives the C++ core (``thunder._core``)."""
from thunder.core import options  # noqa: F401  (thunder.core.options.LogLevel is public API)
