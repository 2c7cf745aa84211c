"""The seed example: a program written for torch_neuronx, with only the
import and the trace call changed to kiln. It compiles a Linear + GELU block
ahead of time, saves it with torch.jit.save, reloads it with torch.jit.load
and checks the reloaded module against eager PyTorch."""
import torch
import kiln  # was: import torch_neuronx


class SimpleLLMBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(768, 768)
        self.activation = torch.nn.GELU()  # the original text says torch.GELU, which does not exist

    def forward(self, x):
        return self.activation(self.linear(x))


model = SimpleLLMBlock()
model.eval()
dummy_input = torch.randn(1, 128, 768)

traced = kiln.trace(model, dummy_input)  # was: torch_neuronx.trace(model, dummy_input)

torch.jit.save(traced, "model_kiln_compiled.pt")
loaded = torch.jit.load("model_kiln_compiled.pt")

with torch.no_grad():
    expected = model(dummy_input)
output = loaded(dummy_input)
max_err = (output - expected).abs().max().item()
matches = torch.allclose(output, expected, rtol=1e-4, atol=1e-4)
print(f"reloaded output shape {tuple(output.shape)}, max abs error vs eager {max_err:.3g}")
print("reloaded module matches eager:", matches)
if not matches:
    raise SystemExit(1)
