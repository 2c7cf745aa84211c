"""The op table: each ATen op kiln lowers, and how, as handlers registered
by op family. registry.py holds the table (one registration per op, with
the keep-whole flag capture reads); core.py the views, arithmetic,
reductions, matmul/linear/attention, convolution and pooling, and the
helpers the others share; elementwise.py the rest of the elementwise math;
nn.py the training CNN ops (norm statistics, convolution and pooling
backward, adaptive pooling, upsampling); movement.py pads, scatters, scans,
sorts and multi-tensor indexing; sample.py grid sampling, fold and
embedding bags; rng.py dropout and random numbers; quant.py the dequantize ops of weights quantized the
PyTorch way; train.py the training graphs' softmax, gelu backward,
flash attention and compiled optimizer prims; moe.py what a mixture of
experts adds (histc of expert ids, transformers' grouped matmuls);
composite.py the composite ops torch.export's undecomposed program holds
(F.pad, masked_fill, chunk, meshgrid, ...).
"""

from kiln.errors import Unsupported
from kiln.optable import (composite, core, elementwise, moe, movement, nn, quant, rng, sample,  # noqa: F401
                          train)  # (they register)
from kiln.optable.core import DTYPES, OPS, TORCH_DTYPES, dtype_id
from kiln.optable.registry import TABLE, keep_whole_targets, register, register_by_name, supported_targets

__all__ = ["DTYPES", "OPS", "TABLE", "TORCH_DTYPES", "Unsupported", "dtype_id", "keep_whole_targets",
           "register", "register_by_name", "supported_targets"]
