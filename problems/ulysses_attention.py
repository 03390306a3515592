"""Ulysses sequence-parallel causal attention: all-to-all to head shards, full-sequence attention, all-to-all back.

Models: the attention of a DeepSpeed-Ulysses sequence-parallel transformer layer (also Megatron-LM / NeMo
hierarchical context parallelism, xDiT/USP, long-context fine-tuning stacks): each rank holds every head
for a slice of the tokens; one all-to-all gives it a group of heads for the full sequence, it runs causal
attention for those heads, and a second all-to-all returns the output to sequence shards.

Contract: ``solution(q, k, v)`` is called on every rank r. Each of ``q``, ``k``, ``v`` has shape
``(seq_per_rank, heads, head_dim)`` with ``heads = W * heads_per_rank`` and holds tokens ``r * seq_per_rank``
onward of the full sequence of ``W * seq_per_rank`` tokens (ranks hold consecutive slices). Rank r returns
a new ``(seq_per_rank, heads, head_dim)`` tensor in the input dtype: for each of its tokens t (global
position p) and each head h, ``softmax(q[t, h] . K[:p + 1, h] / sqrt(head_dim)) @ V[:p + 1, h]``, where K and
V are the full sequence's keys and values (causal: a token sees itself and the tokens before it). Inputs
must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="ulysses_attention",
    name="Ulysses sequence-parallel causal attention",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="blocked/online softmax reassociates the fp32 sums over keys"),
        "bfloat16": dict(atol=1e-2, rtol=2e-2,
                         reason="8-bit mantissa: bf16 output rounding and bf16 probabilities in fused kernels"),
    },
    # seq_per_rank: tokens per rank (W * seq_per_rank in the sequence); heads_per_rank: heads each rank attends
    # for (W * heads_per_rank heads in all); head_dim: per-head width.
    sizes={
        "small": dict(seq_per_rank=8, heads_per_rank=2, head_dim=16),
        "default": dict(seq_per_rank=4096, heads_per_rank=4, head_dim=128),
        "large": dict(seq_per_rank=8192, heads_per_rank=8, head_dim=128),
    },
)

# Queries are drawn with std 2 (logits of std 2) so that the softmax is peaked as in trained models; with
# near-uniform attention over long sequences every output would be close to zero and check little.
_Q_STD = 2.0


def make_inputs(ctx: InputContext):
    s = ctx.size
    shape = (s["seq_per_rank"], ctx.world_size * s["heads_per_rank"], s["head_dim"])
    return ctx.randn(*shape).mul_(_Q_STD), ctx.randn(*shape), ctx.randn(*shape)


def _seq_to_heads(x: torch.Tensor, w: int):
    """Start the all-to-all that turns (seq, W * hpr, dim) into (W * seq, hpr, dim): our heads, all tokens."""
    seq, heads, dim = x.shape
    send = x.view(seq, w, heads // w, dim).transpose(0, 1).contiguous()
    out = x.new_empty(w * seq, heads // w, dim)
    return out, dist.all_to_all_single(out, send, async_op=True)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    seq, heads, dim = q.shape
    hpr = heads // w
    started = [_seq_to_heads(x, w) for x in (q, k, v)]
    for _, work in started:
        work.wait()
    # (W * seq, hpr, dim) -> (1, hpr, W * seq, dim) views for the fused kernel
    qh, kh, vh = (t.transpose(0, 1).unsqueeze(0) for t, _ in started)
    o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)  # (1, hpr, W * seq, dim)
    # back: block j of the send buffer = rank j's tokens for our heads
    send = o[0].transpose(0, 1).contiguous()  # (W * seq, hpr, dim)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    return recv.view(w, seq, hpr, dim).transpose(0, 1).reshape(seq, heads, dim)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, s, h, d = world_size, size["seq_per_rank"], size["heads_per_rank"], size["head_dim"]
    n = w * s  # tokens in the sequence
    tensor = s * w * h * d * dtype.itemsize  # one of q, k, v, o on one rank, in either layout
    # Four all-to-alls (q, k, v there, o back), each moving (W-1)/W of a tensor; causal attention on hpr heads of
    # n tokens: QK^T and PV are 2 * n^2 * d flops each, half of it masked; q, k, v read and output written once,
    # and the four exchanged tensors written once on arrival and read once.
    return Traffic(
        interconnect_bytes=4 * (w - 1) / w * tensor,
        flops=2 * n * n * d * h,
        hbm_bytes=(4 + 2 * 4) * tensor,
    )


def oracle(inputs, size, world_size):
    s = size["seq_per_rank"]
    q, k, v = (torch.cat([args[i] for args in inputs]).double() for i in range(3))  # (n, heads, dim)
    n = q.shape[0]
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    p = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    out = torch.einsum("hqk,khd->qhd", p, v).to(inputs[0][0].dtype)
    return [out[r * s:(r + 1) * s].clone() for r in range(world_size)]
