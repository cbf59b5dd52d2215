"""transformers' once-per-process logging helpers, left out of what thunder's Dynamo traces.

Dynamo cannot trace a ``logging.Logger`` method: each call it meets is a graph break, and one inside an inlined
function cannot be resumed, so Dynamo traces the frame again from its start. GPT-2's ``loss_function`` property
warns (``logger.warning_once``) that its config names no loss type: a GPT-2 training step broke there four times,
into two graphs, and Dynamo's share of its first call was 3.9 s where Llama's was 2.1 s.

torch's remedy is ``torch._dynamo.config.ignore_logging_functions``: calls of the functions it holds are left out
of the traced code. While a thunder wrapper's Dynamo traces, transformers' ``Logger.warning_once`` and
``Logger.info_once`` are in that set (messages about configuration, printed at most once per process). A call
left out is not printed by the compiled code, and thunder says so at INFO, once per process and helper, naming it.
"""
import logging

import torch

from thunder.core.log import logger

#: The helpers transformers adds to logging.Logger that thunder's traces leave out.
HELPERS = ("warning_once", "info_once")

_said = set()  # the helpers whose skipped call thunder has reported


class _Skipped:
    """Stands for one helper in Dynamo's ignore set: Dynamo compares the method it meets with the set's entries,
    so this entry reports the calls it matches (a plain entry would match them silently)."""

    def __init__(self, fn):
        self.fn = fn

    def __hash__(self):
        return hash(self.fn)

    def __eq__(self, other):
        if other is self.fn:
            if self.fn not in _said:
                _said.add(self.fn)
                logger.info("thunder: a call of logging.Logger.%s (transformers') is left out of the traced code, so "
                            "its message is not printed by compiled code: Dynamo cannot trace logging.Logger methods "
                            "and would break the graph there", self.fn.__name__)
            return True
        return other is self


_entries = None  # one _Skipped per helper transformers has added (found at the first trace after its import)


def leave_out():
    """Puts the helpers in Dynamo's ignore set (those not in it already); returns what it added, for
    :func:`restore`. Cheap after the first call: it runs at every call that goes through Dynamo."""
    global _entries
    ignored = getattr(torch._dynamo.config, "ignore_logging_functions", None)
    if not isinstance(ignored, set):
        return ()
    if _entries is None or len(_entries) < len(HELPERS):
        found = [getattr(logging.Logger, name, None) for name in HELPERS]
        _entries = [_Skipped(fn) for fn in found
                    if fn is not None and getattr(fn, "__module__", "").startswith("transformers")]
    added = tuple(e for e in _entries if not any(x is e or x is e.fn for x in ignored))
    ignored.update(added)
    return added


def restore(added):
    """Takes out of Dynamo's ignore set what :func:`leave_out` added."""
    ignored = torch._dynamo.config.ignore_logging_functions
    for e in added:
        ignored.discard(e)
