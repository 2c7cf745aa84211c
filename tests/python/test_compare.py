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


class _Partitioned(torch.nn.Module):
    """Two kiln pieces around an op kiln lacks (polygamma: eager fallback)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.special.polygamma(1, torch.relu(self.a(x)) + 1)
        return torch.nn.functional.gelu(self.b(h))  # the second piece's line


def test_compare_of_a_partitioned_model_reports_the_partition():
    torch.manual_seed(0)
    rep = kiln.compare(_Partitioned(), (torch.randn(3, 8),))
    assert rep.ok, str(rep)
    assert rep.pieces == 2 and rep.eager_ops == ["aten.polygamma.default"]
    engine = {r["op"]: r["engine"] for r in rep.rows}
    assert engine["aten.polygamma.default"] == "eager" and engine["aten.gelu.default"] == "kiln"
    assert len(rep.rows) == 6 and "partitioned: 2 kiln pieces" in str(rep) and "(ran in eager)" in str(rep)


def test_compare_names_a_wrong_node_after_the_fallback(monkeypatch):
    """The planted gelu is in the piece after the eager op: compare keeps
    the second piece's intermediates too and names it, with its line."""
    monkeypatch.setitem(TABLE, aten.gelu.default,
                        lambda ctx, n: ctx.node("gelu_tanh", [ctx.value(n.args[0])], origin=ctx.origin(n)))
    torch.manual_seed(0)
    rep = kiln.compare(_Partitioned(), (torch.randn(3, 8) * 3,))
    assert not rep.ok and rep.first_off["op"] == "aten.gelu.default", str(rep)
    assert rep.first_off["engine"] == "kiln" and "the second piece's line" in rep.first_off["where"]
    assert all(not r["off"] for r in rep.rows[:rep.rows.index(rep.first_off)])
