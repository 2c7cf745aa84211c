"""The arguments kiln.trace, torch.compile(backend="kiln") and kiln.compare
share: example inputs as a tuple, and the weights_dtype spelling of
quantized weights."""

import torch


def as_tuple(example_inputs):
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def weights_quant(weights_dtype):
    """(bits, group, asym, a8) for a quantized weights_dtype, None for any
    other value (torch.int8 / 'int8'; 'int8:a8'; 'int4', 'int4:g128',
    'int4:asym', 'int4:g128:asym', 'int4:sym', each int4 spelling with
    ':a8' too, in any order after 'int4'); ValueError for a malformed int4
    spec."""
    if weights_dtype is torch.int8 or weights_dtype == "int8":
        return (8, 0, False, False)
    if weights_dtype == "int8:a8":
        return (8, 0, False, True)
    if not isinstance(weights_dtype, str) or not weights_dtype.startswith("int4"):
        return None
    parts = weights_dtype.split(":")
    group, asym, a8 = 32, False, False
    ok = parts[0] == "int4"
    for p in parts[1:]:
        if p in ("asym", "sym"):
            asym = p == "asym"
        elif p == "a8":
            a8 = True
        elif p.startswith("g") and p[1:].isdigit():
            group = int(p[1:])
        else:
            ok = False
    if not ok or group < 32 or group > 4096 or group % 32:
        raise ValueError(f"kiln.trace: weights_dtype {weights_dtype!r}: expected 'int4[:g<group>][:asym][:a8]' "
                         f"with the group a multiple of 32 up to 4096 (default 32)")
    return (4, group, asym, a8)
