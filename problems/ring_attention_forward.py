"""Ring attention forward (non-causal): K/V blocks travel around a ring while each rank merges online-softmax partials.

Models: ring attention (Liu et al., "Ring Attention with Blockwise Transformers") and the ring variant of
context parallelism in Megatron-LM / TransformerEngine, torch ``context_parallel`` and
ring-flash-attention: each rank keeps the queries of its sequence slice and, over W - 1 neighbour exchanges
overlapped with compute, sees every rank's keys and values once, merging the partial attention of each
block with a log-sum-exp rescale. Non-causal, as in encoders, vision/video transformers and diffusion
models.

Contract: ``solution(q, k, v)`` is called on every rank r. Each of ``q``, ``k``, ``v`` has shape
``(seq_per_rank, heads, head_dim)`` and holds rank r's slice of the sequence (the full sequence is the
ranks' slices in rank order, ``W * seq_per_rank`` tokens). Rank r returns a new ``(seq_per_rank, heads,
head_dim)`` tensor in the input dtype: for each of its tokens t and head h,
``softmax(q[t, h] . K[:, h] / sqrt(head_dim)) @ V[:, h]`` over all keys K and values V of the full sequence.
Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="ring_attention_forward",
    name="Ring attention forward (non-causal, online softmax)",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=2e-4, rtol=2e-4,
                        reason="online softmax: per-block sums merged by log-sum-exp rescales, reassociated in fp32"),
        "bfloat16": dict(atol=1e-2, rtol=2e-2,
                         reason="8-bit mantissa: bf16 block outputs and probabilities; merge order differs"),
    },
    # seq_per_rank: tokens per rank (W * seq_per_rank in the sequence); heads: attention heads; head_dim: width.
    sizes={
        "small": dict(seq_per_rank=8, heads=2, head_dim=16),
        "default": dict(seq_per_rank=4096, heads=32, head_dim=128),
        "large": dict(seq_per_rank=16384, heads=32, head_dim=128),
    },
)

# Queries are drawn with std 2 (logits of std 2) so that the softmax is peaked as in trained models; with
# near-uniform attention over long sequences every output would be close to zero and check little.
_Q_STD = 2.0


def make_inputs(ctx: InputContext):
    s = ctx.size
    shape = (s["seq_per_rank"], s["heads"], s["head_dim"])
    return ctx.randn(*shape).mul_(_Q_STD), ctx.randn(*shape), ctx.randn(*shape)


def _attention_lse(q, k, v, scale):
    """Non-causal attention of q (b, h, m, d) over k, v (b, h, n, d): the output in q's dtype and the
    float32 log-sum-exp of the scaled scores (b, h, m), the two things an online-softmax merge needs."""
    if q.is_cuda:
        if q.dtype in (torch.float16, torch.bfloat16):
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)[:2]
        else:  # the flash kernel takes 16-bit inputs only
            out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, None, True, 0.0, False, scale=scale)[:2]
        return out, lse[..., :q.shape[-2]]  # the efficient kernel may pad the lse's last dim
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, scale=scale)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    w, rank = dist.get_world_size(), dist.get_rank()
    seq, heads, dim = q.shape
    scale = dim ** -0.5
    qh = q.transpose(0, 1).unsqueeze(0)  # (1, heads, seq, dim) view
    kv = torch.stack((k, v))  # one buffer per step: (2, seq, heads, dim)
    nxt, prv = (rank + 1) % w, (rank - 1) % w
    out = lse = None
    for step in range(w):
        if step < w - 1:  # pass our current block on while computing with it
            recv = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, nxt), dist.P2POp(dist.irecv, recv, prv)])
        blk_out, blk_lse = _attention_lse(qh, kv[0].transpose(0, 1).unsqueeze(0), kv[1].transpose(0, 1).unsqueeze(0),
                                          scale)
        blk_out = blk_out[0].float()  # (heads, seq, dim)
        blk_lse = blk_lse[0].float()  # (heads, seq)
        if out is None:
            out, lse = blk_out, blk_lse
        else:
            new_lse = torch.logaddexp(lse, blk_lse)
            out = out * (lse - new_lse).exp_().unsqueeze(-1) + blk_out * (blk_lse - new_lse).exp_().unsqueeze(-1)
            lse = new_lse
        if step < w - 1:
            for req in reqs:
                req.wait()
            kv = recv
    return out.transpose(0, 1).to(q.dtype).contiguous()


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, s, h, d = world_size, size["seq_per_rank"], size["heads"], size["head_dim"]
    block = s * h * d * dtype.itemsize  # one of q, k, v, o on one rank
    # W-1 steps, each sending and receiving one K and one V block; QK^T and PV over all W * s keys are
    # 2 * s * (W * s) * d flops each per head; q, the W K/V pairs and the output read or written once, and the
    # W-1 received K/V pairs written on arrival.
    return Traffic(
        interconnect_bytes=(w - 1) * 2 * block,
        flops=4 * s * (w * s) * d * h,
        hbm_bytes=(2 + 2 * w + 2 * (w - 1)) * block,
    )


def oracle(inputs, size, world_size):
    k, v = (torch.cat([args[i] for args in inputs]).double() for i in (1, 2))  # (n, heads, dim)
    outs = []
    for q, _, _ in inputs:
        scores = torch.einsum("qhd,khd->hqk", q.double(), k) / q.shape[-1] ** 0.5
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v).to(q.dtype))
    return outs
