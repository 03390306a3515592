"""Context-parallel decode attention: partial attention over a sequence-sharded KV cache, merged by log-sum-exp.

Models: flash-decoding across GPUs for long-context inference (context-parallel / sequence-parallel
decoding in TensorRT-LLM helix and context parallelism, vLLM / SGLang decode context parallelism, Meta's
context-parallel Llama 3 inference, LoongServe, Medha): the KV cache of a long sequence is split along the
sequence over the ranks; for each new token every rank attends its share of the cache and returns a partial
output with its log-sum-exp, and the partials are merged so that every rank has the full attention output.

Contract: ``solution(q, k, v)`` is called on every rank r. ``q`` has shape ``(batch, heads, head_dim)`` and is
the same on every rank (the queries of the tokens being decoded, one per sequence); ``k`` and ``v`` have shape
``(batch, kv_heads, kv_per_rank, head_dim)`` and hold rank r's slice of the cache (cache positions
``r * kv_per_rank`` onward; the whole cache has ``W * kv_per_rank`` positions). ``heads = kv_heads * q_per_kv``
(grouped-query attention): query head h reads kv head ``h // q_per_kv``. Every rank returns the same new
``(batch, heads, head_dim)`` tensor in q's dtype: ``softmax(q[b, h] . K[b, h // q_per_kv] / sqrt(head_dim)) @
V[b, h // q_per_kv]`` over all cached positions of all ranks. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="context_parallel_decode",
    name="Context-parallel decode attention (flash-decoding across GPUs)",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4,
                        reason="partial softmax sums merged by log-sum-exp rescales: fp32 sums reassociated"),
        "bfloat16": dict(atol=1e-2, rtol=2e-2,
                         reason="8-bit mantissa: bf16 output rounding and bf16 probabilities in fused kernels"),
    },
    # batch: sequences decoded at once; kv_heads: key/value heads; q_per_kv: query heads per kv head (GQA);
    # kv_per_rank: cached tokens per rank per sequence; head_dim: per-head width.
    sizes={
        "small": dict(batch=2, kv_heads=2, q_per_kv=2, kv_per_rank=8, head_dim=16),
        "default": dict(batch=8, kv_heads=8, q_per_kv=8, kv_per_rank=16384, head_dim=128),
        "large": dict(batch=32, kv_heads=8, q_per_kv=8, kv_per_rank=65536, head_dim=128),
    },
)

# Queries are drawn with std 2 (logits of std 2) so that the softmax is peaked as in trained models; with
# near-uniform attention over a long cache every output would be close to zero and check little.
_Q_STD = 2.0


def make_inputs(ctx: InputContext):
    s = ctx.size
    b, hk, g, t, d = s["batch"], s["kv_heads"], s["q_per_kv"], s["kv_per_rank"], s["head_dim"]
    # the decoded tokens' queries are replicated: the same draws on every rank
    q = torch.randn(b, hk * g, d, generator=ctx.shared_generator()).mul_(_Q_STD).to(ctx.device, ctx.dtype)
    return q, ctx.randn(b, hk, t, d), ctx.randn(b, hk, t, d)


def _attention_lse(q, k, v, scale):
    """Non-causal attention of q (b, h, m, d) over k, v (b, h, n, d): the output in q's dtype and the
    float32 log-sum-exp of the scaled scores (b, h, m), the two things a split-KV merge needs."""
    if q.is_cuda:
        if q.dtype in (torch.float16, torch.bfloat16):
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)[:2]
        else:  # the flash kernel takes 16-bit inputs only
            out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, None, True, 0.0, False, scale=scale)[:2]
        return out, lse[..., :q.shape[-2]]  # the efficient kernel may pad the lse's last dim
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, scale=scale)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    b, heads, dim = q.shape
    kv_heads = k.shape[1]
    # the q_per_kv query heads of a kv head become that head's queries: no K/V is repeated
    out, lse = _attention_lse(q.view(b, kv_heads, heads // kv_heads, dim), k, v, dim ** -0.5)
    # one all-gather of every rank's partial output and log-sum-exp, packed as (b, heads, dim + 1) float32
    part = torch.cat((out.reshape(b, heads, dim).float(), lse.reshape(b, heads, 1).float()), dim=-1)
    parts = part.new_empty(w * b, heads, dim + 1)  # gloo wants the ranks' blocks stacked along dim 0
    all_gather_single(parts, part)
    parts = parts.view(w, b, heads, dim + 1)
    lses = parts[..., dim]  # (W, b, heads)
    weights = torch.softmax(lses, dim=0).unsqueeze(-1)  # exp(lse_r - logsumexp_r lse_r)
    return (weights * parts[..., :dim]).sum(0).to(q.dtype)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, b, hk, g, t, d = (world_size, size["batch"], size["kv_heads"], size["q_per_kv"], size["kv_per_rank"],
                         size["head_dim"])
    heads = hk * g
    partial = b * heads * (d + 1) * 4  # one rank's float32 partial output and log-sum-exp
    # Merging W partials so that every rank has the result moves at least what an all-reduce of one partial does,
    # 2 (W-1)/W of it; QK^T and PV over the local cache are 2 * t * d flops each per query head; the local K and
    # V cache read once (it dominates), q read and the output written.
    return Traffic(
        interconnect_bytes=2 * (w - 1) / w * partial,
        flops=4 * b * heads * t * d,
        hbm_bytes=(2 * b * hk * t * d + 2 * b * heads * d) * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    q = inputs[0][0].double()
    g = size["q_per_kv"]
    k, v = (torch.cat([args[i] for args in inputs], dim=2).double() for i in (1, 2))  # (b, kv_heads, n, d)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (b, heads, n, d)
    scores = torch.einsum("bhd,bhnd->bhn", q, k) / q.shape[-1] ** 0.5
    out = torch.einsum("bhn,bhnd->bhd", torch.softmax(scores, dim=-1), v).to(inputs[0][0].dtype)
    return [out.clone() for _ in range(world_size)]
