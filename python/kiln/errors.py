"""Exceptions kiln raises. KilnError comes from the C core (kiln._C)."""

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


__all__ = ["KilnError", "UnsupportedOpError"]
