"""kiln.compare (issue 20): node by node against eager, naming the first node
kiln gets wrong."""

import torch

import kiln
from kiln.optable import TABLE

aten = torch.ops.aten


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x))  # the planted node's line
        return self.norm(self.b(h).softmax(-1) * 3)


def test_compare_of_a_correct_model_is_clean():
    torch.manual_seed(0)
    rep = kiln.compare(_Model(), (torch.randn(4, 16),))
    assert rep.ok, str(rep)
    assert len(rep.rows) >= 5 and rep.reference == "float64 eager"


def test_compare_names_a_planted_wrong_node(monkeypatch):
    # gelu lowered as its tanh approximation: about 1e-3 off, a bug kiln.compare must pin.
    monkeypatch.setitem(TABLE, aten.gelu.default,
                        lambda ctx, n: ctx.node("gelu_tanh", [ctx.value(n.args[0])], origin=ctx.origin(n)))
    torch.manual_seed(0)
    rep = kiln.compare(_Model(), (torch.randn(4, 16) * 3,))
    assert not rep.ok
    assert rep.first_off["op"] == "aten.gelu.default", str(rep)
    assert "the planted node's line" in rep.first_off["where"]
    assert rep.first_off["max_abs"] > 1e-4
    assert "first off" in str(rep) and "<- off" in str(rep)


def test_compare_shows_where_low_precision_enters():
    torch.manual_seed(0)
    rep = kiln.compare(_Model(), (torch.randn(4, 16),), weights_dtype="int4")
    assert not rep.ok and rep.first_off["op"] == "aten.linear.default"
