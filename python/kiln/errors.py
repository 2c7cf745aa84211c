"""Exceptions kiln raises. KilnError comes from the C core (kiln._C).
Unsupported is the op table's refusal of one use of an op, caught by the
capture (which names the op and line) and by the fallback analysis."""

import os
import warnings

from kiln._C import KilnError


class UnsupportedOpError(KilnError):
    """An op in the captured graph that kiln cannot compile.

    Carries the ATen op name and the user's source line it came from.
    """

    def __init__(self, op, where, reason=""):
        self.op = op
        self.where = where
        self.reason = reason
        msg = f"kiln does not support {op}"
        if reason:
            msg += f" ({reason})"
        if where:
            msg += f", used at {where}"
        super().__init__(msg)


class Unsupported(Exception):
    """Raised by a handler for a use of a supported op that kiln can't lower.

    with_inputs: eager must compute the node's inputs too, not only the node
    (its answer depends on how eager lays its input out in memory, which a
    dense kiln value handed over from a kiln piece would not reproduce); the
    fallback then runs every node the refused one depends on in eager."""

    def __init__(self, message, with_inputs=False):
        super().__init__(message)
        self.with_inputs = with_inputs


_warned_failures = set()


def lowering_failure(op, where, error):
    """A handler of the op table failed with something other than its
    refusals (Unsupported, KilnError): a kiln bug. The op runs in eager
    (the refusal returned here feeds the fallback, which keeps the user's
    program running) and a warning names the op, the user's line and the
    error. KILN_STRICT=1 (kiln's own tests and fuzzer) re-raises instead, so
    such bugs fail there rather than hide behind the fallback."""
    if os.environ.get("KILN_STRICT", "") not in ("", "0"):
        raise error
    why = f"kiln's lowering of it failed: {type(error).__name__}: {error}; a kiln bug, please report it"
    if (op, where, why) not in _warned_failures:  # the capture and the fallback analysis both meet it
        _warned_failures.add((op, where, why))
        warnings.warn(f"kiln: {op}{' at ' + where if where else ''}: {why}; running it in eager",
                      RuntimeWarning, stacklevel=3)
    return UnsupportedOpError(op, where, why)


__all__ = ["KilnError", "UnsupportedOpError", "Unsupported", "lowering_failure"]
