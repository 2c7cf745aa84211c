"""nn.TransformerEncoderLayer's inference fast path, as plain ATen ops.

In eval mode (no autograd, batch first, the fast-path conditions met) the
layer calls one fused op, aten._transformer_encoder_layer_fwd, which kiln
has no kernel for: the whole layer would run in eager. Decomposed here (as
torch's own decompositions are: torch functions traced into ATen ops; this
computes nothing itself) into the layer norms, linears, attention and
residual adds the layer's slow path runs, which kiln compiles and fuses
(attention stays whole as SDPA).

Masks are not decomposed (NotImplemented keeps the fused op, which then
falls back to eager): the fused op's mask types and fully masked rows have
conventions of their own."""

import torch
import torch.nn.functional as F


def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
                                  norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
                                  ffn_bias_2, mask=None, mask_type=None):
    if mask is not None or src.dim() != 3 or src.is_nested:
        return NotImplemented
    b, s, e = src.shape
    d = embed_dim // num_heads

    def norm(t, w, bias):
        return F.layer_norm(t, (embed_dim,), w, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    q, k, v = F.linear(x, qkv_weight, qkv_bias).view(b, s, 3, num_heads, d).permute(2, 0, 3, 1, 4)
    a = F.scaled_dot_product_attention(q, k, v)
    x = F.linear(a.transpose(1, 2).reshape(b, s, e), proj_weight, proj_bias) + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    res = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    h = F.linear(x, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + res
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x
