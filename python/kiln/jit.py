"""TorchScript interop, for code written for torch_neuronx.

``torch.jit.save(kiln.trace(model, x), path)`` writes a TorchScript module
that holds the .kiln artifact as a uint8 buffer and whose forward calls the
custom op ``torch.ops.kiln.run``. The op is registered when kiln is imported,
so ``torch.jit.load`` works in any process that has done ``import kiln``.
The wrapper module itself is written by KilnModule.save (kiln/module.py).
"""

import weakref

import torch

from kiln.module import KilnModule

_LIB = torch.library.Library("kiln", "DEF")
_LIB.define("run(Tensor artifact, Tensor[] inputs) -> Tensor[]")

# artifact tensor id -> (weakref to it, data_ptr, KilnModule). The loaded
# model is kept while its artifact tensor lives, so each call does not
# parse the artifact again.
_CACHE = {}


def _module_for(artifact):
    key = id(artifact)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is artifact and hit[1] == artifact.data_ptr():
        return hit[2]
    mod = KilnModule.from_bytes(artifact.contiguous().numpy().tobytes())
    _CACHE[key] = (weakref.ref(artifact, lambda _, k=key: _CACHE.pop(k, None)), artifact.data_ptr(), mod)
    return mod


def _run(artifact, inputs):
    return _module_for(artifact).run_flat(list(inputs))


_LIB.impl("run", _run, "CPU")


def _run_meta(artifact, inputs):
    mod = _module_for(artifact)
    return [torch.empty(shape, dtype=dtype, device="meta") for dtype, shape in mod._out_specs]


_LIB.impl("run", _run_meta, "Meta")
