"""The op table's registry: ATen op -> handler, and which ops capture keeps
whole (out of torch.export's default decompositions) so that their handler
sees them undecomposed.

Every entry is made by register() or register_by_name(); a second
registration of the same op is an error at import time, so no op's
lowering depends on the order in which the handler modules happen to be
imported.
"""

import torch


class _Table(dict):
    """target -> handler. Ops another library defines (transformers' custom
    ops) exist only once it is imported, after kiln may have been: they are
    registered by name (register_by_name) and found when first looked up."""

    def __init__(self):
        super().__init__()
        self.by_name = {}

    def _by_name(self, key):
        return self.by_name.get(str(key)) if isinstance(key, torch._ops.OpOverload) else None

    def __missing__(self, key):
        fn = self._by_name(key)
        if fn is None:
            raise KeyError(key)
        self[key] = fn
        return fn

    def __contains__(self, key):
        return dict.__contains__(self, key) or self._by_name(key) is not None

    def get(self, key, default=None):
        return self[key] if key in self else default


# ATen op (OpOverload, or a Python callable such as operator.getitem) ->
# handler(ctx, node) returning the kiln value id(s) of the node's result.
TABLE = _Table()
_KEEP_WHOLE = set()


def _refuse_twice(key, have, fn):
    raise RuntimeError(f"kiln op table: {key} is registered twice "
                       f"({have.__module__}.{have.__qualname__} and "
                       f"{fn.__module__}.{fn.__qualname__})")


def register(*targets, keep_whole=False):
    """Decorator: fn lowers each of `targets`. keep_whole: capture keeps
    these ops out of the default decompositions (the handler lowers the
    whole op, where the decomposition would give kiln worse pieces)."""
    def wrap(fn):
        for t in targets:
            if dict.__contains__(TABLE, t):
                _refuse_twice(t, TABLE[t], fn)
            have = TABLE.by_name.get(str(t)) if isinstance(t, torch._ops.OpOverload) else None
            if have is not None:
                _refuse_twice(t, have, fn)
        for t in targets:
            TABLE[t] = fn
            if keep_whole:
                _KEEP_WHOLE.add(t)
        return fn

    return wrap


def register_by_name(*names):
    """As register, for ops named "namespace.op.overload" that may not exist
    yet (an op of a library imported after kiln)."""
    def wrap(fn):
        for name in names:
            have = TABLE.by_name.get(name) or next(
                (f for t, f in dict.items(TABLE) if isinstance(t, torch._ops.OpOverload) and str(t) == name),
                None)
            if have is not None:
                _refuse_twice(name, have, fn)
        for name in names:
            TABLE.by_name[name] = fn
        return fn

    return wrap


def keep_whole_targets():
    """The ops registered with keep_whole=True."""
    return frozenset(_KEEP_WHOLE)


def supported_targets():
    return set(TABLE)
