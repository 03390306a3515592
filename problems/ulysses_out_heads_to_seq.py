"""Ulysses all-to-all after attention: the output goes from head shards of the whole sequence back to sequence shards.

Models: the second all-to-all of DeepSpeed-Ulysses sequence parallelism (Megatron-LM / NeMo hierarchical
context parallelism, xDiT/USP): after attention each rank holds the output of its group of heads for
every token, and trades it back so that it holds every head for its own slice of the tokens, ready for
the output projection.

Contract: ``solution(o)`` is called on every rank r. ``o`` has shape
``(W * seq_per_rank, heads_per_rank, head_dim)``: heads ``r * heads_per_rank`` onward, for the full
sequence in token order. Rank r returns a new ``(seq_per_rank, W * heads_per_rank, head_dim)`` tensor in
o's dtype: tokens ``r * seq_per_rank .. (r + 1) * seq_per_rank - 1`` with all heads, head ``j * heads_per_rank
+ i`` taken from rank j's head i. ``o`` must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="ulysses_out_heads_to_seq",
    name="Ulysses all-to-all: attention output head shards -> sequence shards",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # seq_per_rank: tokens each rank holds after the exchange; heads_per_rank: heads each rank holds before it
    # (W * heads_per_rank heads in all); head_dim: per-head width.
    sizes={
        "small": dict(seq_per_rank=8, heads_per_rank=2, head_dim=16),
        "default": dict(seq_per_rank=4096, heads_per_rank=4, head_dim=128),
        "large": dict(seq_per_rank=16384, heads_per_rank=8, head_dim=128),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    return (ctx.randn(ctx.world_size * s["seq_per_rank"], s["heads_per_rank"], s["head_dim"]),)


def solution(o: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    tokens, hpr, dim = o.shape
    seq = tokens // w
    # o is already laid out by destination: rows j * seq onward are rank j's tokens
    recv = torch.empty_like(o)
    dist.all_to_all_single(recv, o)
    # recv[j] holds rank j's heads for our tokens: (W, seq, hpr, dim) -> (seq, W * hpr, dim)
    return recv.view(w, seq, hpr, dim).transpose(0, 1).reshape(seq, w * hpr, dim)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, s, h, d = world_size, size["seq_per_rank"], size["heads_per_rank"], size["head_dim"]
    tensor = s * w * h * d * dtype.itemsize  # the attention output of one rank, before or after the exchange
    # Each rank keeps 1/W of its output and sends (and receives) the rest; it reads its input and writes its result.
    return Traffic(
        interconnect_bytes=(w - 1) / w * tensor,
        flops=0.0,
        hbm_bytes=2 * tensor,
    )


def oracle(inputs, size, world_size):
    s = size["seq_per_rank"]
    full = torch.cat([args[0] for args in inputs], dim=1)  # (W * seq, all heads, dim), heads in rank order
    return [full[r * s:(r + 1) * s].clone() for r in range(world_size)]
