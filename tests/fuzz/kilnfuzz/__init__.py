"""kilnfuzz: a random-graph differential fuzzer for kiln.

It generates random well-typed programs of ATen ops (program.py, ops_*.py,
generate.py), runs each through kiln and through eager PyTorch in float32 and
float64 (paths.py), compares the results under a stated tolerance rule
(check.py), and shrinks any failure to a minimal standalone reproducer
(shrink.py, repro.py). runner.py is the loop and the command line
(tests/fuzz/kiln_fuzz.py). The bf16 mode (bf16.py, --bf16-every) runs the
same programs in bf16 against eager bf16 and float64 (check.py's bf16 rule).
The quant mode (quant.py, ops_quant.py, --quant-every) traces graphs with
linear layers with quantized weights (weights_dtype int8, int4, ... :a8)
against eager with kiln's quantization rules (tests/python/quant_reference.py).
"""
