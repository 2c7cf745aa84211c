"""Training a small CNN through torch.compile(backend="kiln") (issue 6):
convolutions, BatchNorm2d in training mode, ReLU, max and adaptive average
pooling, a linear head and cross-entropy, stepped by SGD with momentum from
the same initial weights as an eager copy. Both the forward graph (batch
statistics, the running-stat update AOTAutograd copies back into the
buffers) and the backward graph (convolution_backward, the pooling
backwards, the decomposed batch-norm backward) must run in kiln: no CPU
fallback warning.

Tolerances: after 5 steps, parameters and running statistics rtol 1e-4 /
atol 1e-5 (test_training.py's): kiln's GEMMs and reductions sum in another
order than torch's (~1e-7 relative per op) and SGD with momentum compounds
that over steps; a wrong gradient (a missing tap, a wrong index, a wrong
batch statistic) is off by orders of magnitude more. num_batches_tracked is
an integer and must match exactly.
"""
import copy
import warnings

import pytest
import torch

import kiln  # noqa: F401  (registers the backend)


class SmallCNN(torch.nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, classes)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def train(model, batches, steps_log):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        steps_log.append(loss.item())


def test_cnn_with_batch_norm_training_matches_eager():
    torch.manual_seed(0)
    model = SmallCNN().train()
    ref = copy.deepcopy(model)
    batches = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))) for _ in range(5)]
    torch._dynamo.reset()
    got, want = [], []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        train(torch.compile(model, backend="kiln"), batches, got)
    train(ref, batches, want)
    warned = [str(x.message) for x in w if "kiln" in str(x.message)]
    assert not warned, warned  # forward and backward both ran in kiln
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    for (name, b), r in zip(model.named_buffers(), ref.buffers()):
        if b.dtype == torch.int64:
            assert b.item() == r.item() == len(batches), name  # num_batches_tracked
        else:
            torch.testing.assert_close(b, r, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    # The running statistics really moved (the update is not a no-op).
    assert not torch.allclose(model.bn1.running_mean, torch.zeros(8))
    assert not torch.allclose(model.bn1.running_var, torch.ones(8))


def test_cnn_backward_graph_runs_in_kiln():
    # The captured backward graph holds the ops this test is about, and kiln
    # compiled it whole (no partition into eager pieces).
    from kiln import dynamo

    seen = []
    real = dynamo._compile_fx

    def spy(gm, example_inputs):
        compiled = real(gm, example_inputs)  # raises if any op is unsupported
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return compiled

    torch.manual_seed(0)
    model = SmallCNN().train()
    dynamo._compile_fx = spy
    try:
        torch._dynamo.reset()
        out = torch.compile(model, backend="kiln")(torch.randn(4, 3, 16, 16))
        out.sum().backward()
    finally:
        dynamo._compile_fx = real
    ops = set().union(*seen)
    for op in ("aten.convolution_backward.default", "aten.max_pool2d_with_indices_backward.default",
               "aten._native_batch_norm_legit_functional.default", "aten.max_pool2d_with_indices.default"):
        assert op in ops, (op, sorted(ops))


class NormZoo(torch.nn.Module):
    """GroupNorm, InstanceNorm (batch statistics, no running stats), a
    grouped, dilated conv stack with average pooling: the other training
    paths of optable/nn.py."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, dilation=1)
        self.gn = torch.nn.GroupNorm(4, 8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.inorm = torch.nn.InstanceNorm2d(8, affine=True)
        self.fc = torch.nn.Linear(8 * 4 * 4, classes)

    def forward(self, x):
        x = torch.nn.functional.avg_pool2d(torch.relu(self.gn(self.conv1(x))), 3, 2, 1)
        x = torch.relu(self.inorm(self.conv2(x)))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1)
        return self.fc(x)


def test_group_and_instance_norm_training_matches_eager():
    torch.manual_seed(1)
    model = NormZoo().train()
    ref = copy.deepcopy(model)
    batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))) for _ in range(4)]
    torch._dynamo.reset()
    got, want = [], []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        train(torch.compile(model, backend="kiln"), batches, got)
    train(ref, batches, want)
    warned = [str(x.message) for x in w if "kiln" in str(x.message)]
    assert not warned, warned
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


class Decoder(torch.nn.Module):
    """A decoder's upsampling: transposed convolutions (strided with output
    padding, grouped and dilated, 1-d) between ordinary ones."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.up2 = torch.nn.ConvTranspose2d(6, 4, (2, 3), stride=(1, 2), groups=2, dilation=(2, 1))
        self.up1d = torch.nn.ConvTranspose1d(4, 2, 3, stride=2)

    def forward(self, x):
        x = self.up2(torch.relu(self.up(torch.relu(self.conv(x)))))
        return self.up1d(x.flatten(2)).square().mean()


def test_transposed_convolution_training_matches_eager():
    """Forward and backward of transposed convolutions in kiln (the backward
    of y = conv_transpose(x, w) is the forward convolution for dx and the
    convolution's weight gradient with dy and x swapped for dw): 3 SGD steps
    against an eager copy, no CPU fallback."""
    torch.manual_seed(0)
    model = Decoder().train()
    ref = copy.deepcopy(model)
    xs = [torch.randn(2, 3, 10, 12) for _ in range(3)]
    torch._dynamo.reset()

    def steps(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for x in xs:
            opt.zero_grad()
            m(x).backward()
            opt.step()

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        steps(torch.compile(model, backend="kiln"))
    steps(ref)
    warned = [str(x.message) for x in w if "kiln" in str(x.message)]
    assert not warned, warned
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
