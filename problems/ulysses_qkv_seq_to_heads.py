"""Ulysses all-to-all before attention: q, k, v go from sequence shards to head shards of the whole sequence.

Models: the first all-to-all of DeepSpeed-Ulysses sequence parallelism (also in Megatron-LM / NeMo
hierarchical context parallelism, xDiT/USP and long-context training stacks such as 360-LLaMA-Factory):
each rank holds all heads for its slice of the tokens, and before attention it trades them so that it
holds a group of heads for every token, which lets an unmodified attention kernel run per head.

Contract: ``solution(q, k, v)`` is called on every rank r. Each of ``q``, ``k``, ``v`` has shape
``(seq_per_rank, W * heads_per_rank, head_dim)`` and holds tokens ``r * seq_per_rank`` onward of the full
sequence (ranks hold consecutive slices). Rank r returns a tuple of three new tensors ``(q_r, k_r, v_r)``,
each ``(W * seq_per_rank, heads_per_rank, head_dim)`` in the input dtype: heads
``r * heads_per_rank .. (r + 1) * heads_per_rank - 1`` of the full sequence, tokens in global order
(the rows of rank 0, then rank 1, ...). Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="ulysses_qkv_seq_to_heads",
    name="Ulysses all-to-all: q/k/v sequence shards -> head shards",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # seq_per_rank: tokens each rank holds before the exchange; heads_per_rank: heads each rank holds after it
    # (W * heads_per_rank heads in all); head_dim: per-head width.
    sizes={
        "small": dict(seq_per_rank=8, heads_per_rank=2, head_dim=16),
        "default": dict(seq_per_rank=4096, heads_per_rank=4, head_dim=128),
        "large": dict(seq_per_rank=16384, heads_per_rank=8, head_dim=128),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    shape = (s["seq_per_rank"], ctx.world_size * s["heads_per_rank"], s["head_dim"])
    return ctx.randn(*shape), ctx.randn(*shape), ctx.randn(*shape)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    w = dist.get_world_size()
    seq, heads, dim = q.shape
    hpr = heads // w
    outs, works = [], []
    for x in (q, k, v):
        # block j of the send buffer = this rank's tokens for rank j's heads; what arrives from rank j is
        # rank j's tokens for our heads, so the receive buffer is already (W * seq, hpr, dim) in token order
        send = x.view(seq, w, hpr, dim).transpose(0, 1).contiguous()
        out = x.new_empty(w * seq, hpr, dim)
        works.append(dist.all_to_all_single(out, send, async_op=True))
        outs.append(out)
    for work in works:
        work.wait()
    return tuple(outs)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, s, h, d = world_size, size["seq_per_rank"], size["heads_per_rank"], size["head_dim"]
    tensor = s * w * h * d * dtype.itemsize  # one of q, k, v on one rank, before or after the exchange
    # Each rank keeps 1/W of each tensor and sends (and receives) the rest; it reads its 3 inputs, writes 3 outputs.
    return Traffic(
        interconnect_bytes=3 * (w - 1) / w * tensor,
        flops=0.0,
        hbm_bytes=2 * 3 * tensor,
    )


def oracle(inputs, size, world_size):
    h = size["heads_per_rank"]
    full = [torch.cat([args[i] for args in inputs]) for i in range(3)]  # (W * seq, heads, dim) each
    return [tuple(t[:, r * h:(r + 1) * h].clone() for t in full) for r in range(world_size)]
