"""Regression tests for bugs the random-graph fuzzer found (tests/fuzz).

Each test is the fuzzer's shrunk reproducer made small and explicit; its
write-up (what was wrong, why) is the numbered entry in
tests/fuzz/FINDINGS.md that the test names.
"""

import torch
import torch.nn.functional as F

import kiln

INF, NAN = float("inf"), float("nan")
SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 30.0, -30.0, 88.5, 89.0, -88.5, -89.0, 100.0, -100.0, 3.0]


class _LinearAct(torch.nn.Module):
    def __init__(self, act, n):
        super().__init__()
        self.act = act
        self.w = torch.nn.Parameter(torch.ones(n, 1))  # K = 1: inf * w stays inf (no inf * 0)

    def forward(self, x):
        return self.act(F.linear(x, self.w))


def _assert_same_specials(got, want):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_gemm_epilogue_activations_keep_torchs_special_values():
    """FINDINGS 2: linear + SiLU fused into the GEMM's epilogue gave
    silu(-inf) = -inf where torch gives NaN (-inf * sigmoid(-inf) = -inf * 0):
    the epilogue's exp clamped its argument, so sigmoid(-inf) was 4e-39, not 0.
    Every fused activation at +-inf, NaN and around exp's overflow point."""
    x = torch.tensor(SPECIALS).reshape(-1, 1)
    acts = {"silu": F.silu, "silu_decomposed": lambda t: t * torch.sigmoid(t), "sigmoid": torch.sigmoid,
            "tanh": torch.tanh, "relu": F.relu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}
    for name, act in acts.items():
        model = _LinearAct(act, 9).eval()  # 9 columns: the vector body and its tail
        compiled = kiln.trace(model, (x,), fallback=False)
        assert "act=" in compiled.explain(), f"{name}: not fused into the GEMM epilogue"
        with torch.no_grad():
            _assert_same_specials(compiled(x), model(x))
