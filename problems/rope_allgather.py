"""Rotary position embedding of a sequence-sharded query and key, then an all-gather along the sequence.

Models: all-gather context parallelism (Llama 3's context parallelism, Megatron-LM's
cp_comm_type="all_gather", NeMo): each rank holds a contiguous chunk of a long sequence, applies
rotary embeddings (RoPE) at its tokens' global positions, and gathers the rotated sequence so
that its queries can attend to every key; here both the rotated queries and keys (GQA: fewer key
heads) are gathered, as when the gathered sequence feeds an attention that is not sequence-sharded.

Contract: ``solution(q, k)`` is called on every rank. ``q`` ``(seq_per_rank, heads, head_dim)``
and ``k`` ``(seq_per_rank, kv_heads, head_dim)``, in the problem dtype, are this rank's chunk of
the sequence: global positions ``rank * seq_per_rank + i``. RoPE uses base 10000 and the
rotate-half convention: for position p and j < head_dim / 2, angle ``p * 10000 ** (-2 j /
head_dim)`` is applied to the pair (x[j], x[j + head_dim / 2]): ``out = x * cos + rotate_half(x) *
sin`` with ``rotate_half(x) = cat(-x[half:], x[:half])`` and cos/sin repeated over both halves.
The reference computes angles in float64, cos and sin rounded to float32, the rotation in float32,
rounded once to the dtype; the float32 tolerance also admits the common float32-angle method
(off by ~p * 2**-24 rad at position p). Every rank returns ``(q_full, k_full)``: ``(world_size *
seq_per_rank, heads, head_dim)`` and ``(world_size * seq_per_rank, kv_heads, head_dim)`` in the
dtype, every rank's rotated chunk in rank order. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

BASE = 10000.0

META = dict(
    id="rope_allgather",
    name="RoPE + sequence all-gather (context parallel)",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-2, rtol=1e-3,
                        reason="angles p * theta computed in float32 (the usual way) are off by ~p * 2^-24 rad: "
                               "~2e-3 rad at 32k positions"),
        "bfloat16": dict(atol=5e-2, rtol=2e-2,
                         reason="8-bit mantissa: cos/sin and the products may each round to bf16 (3-4 ulp)"),
    },
    # seq_per_rank: tokens of each rank's chunk (the sequence is W times longer); heads / kv_heads: query / key
    # heads (GQA); head_dim: rotary dimension.
    sizes={
        "small": dict(seq_per_rank=8, heads=4, kv_heads=2, head_dim=16),
        "default": dict(seq_per_rank=4096, heads=32, kv_heads=8, head_dim=128),
        "large": dict(seq_per_rank=16384, heads=64, kv_heads=8, head_dim=128),
    },
)


def make_inputs(ctx: InputContext):
    s, d = ctx.size["seq_per_rank"], ctx.size["head_dim"]
    return ctx.randn(s, ctx.size["heads"], d), ctx.randn(s, ctx.size["kv_heads"], d)


def _cos_sin(start: int, n: int, head_dim: int, device: torch.device):
    pos = torch.arange(start, start + n, dtype=torch.float64, device=device)
    inv_freq = BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    angle = torch.outer(pos, inv_freq).repeat(1, 2).unsqueeze(1)  # (n, 1, head_dim)
    return angle.cos().float(), angle.sin().float()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


def solution(q: torch.Tensor, k: torch.Tensor):
    s, w = q.shape[0], dist.get_world_size()
    cos, sin = _cos_sin(dist.get_rank() * s, s, q.shape[-1], q.device)
    q_full = q.new_empty(w * s, *q.shape[1:])
    work = all_gather_single(q_full, _rope(q, cos, sin), async_op=True)  # gather q while k is rotated
    k_full = k.new_empty(w * s, *k.shape[1:])
    all_gather_single(k_full, _rope(k, cos, sin))
    work.wait()
    return q_full, k_full


def speed_of_light(size, world_size, dtype) -> Traffic:
    chunk = size["seq_per_rank"] * (size["heads"] + size["kv_heads"]) * size["head_dim"]
    # Receive the W-1 other chunks of q and k. Memory: read the local chunk, write the W-chunk outputs.
    # Flops: two multiplies and an add per element of the local chunk.
    return Traffic(
        interconnect_bytes=(world_size - 1) * chunk * dtype.itemsize,
        flops=3 * chunk,
        hbm_bytes=(1 + world_size) * chunk * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    dtype = inputs[0][0].dtype
    d = size["head_dim"]
    q = torch.cat([args[0] for args in inputs]).double()
    k = torch.cat([args[1] for args in inputs]).double()
    half = d // 2
    pos = torch.arange(q.shape[0], dtype=torch.float64)
    theta = pos[:, None] * BASE ** (-2 * torch.arange(half, dtype=torch.float64) / d)  # (seq, half)
    cos, sin = theta.cos()[:, None, :], theta.sin()[:, None, :]

    def rotate(x):  # pairs (x[j], x[j + half]) rotated by theta_j
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(dtype)

    q_full, k_full = rotate(q), rotate(k)
    return [(q_full.clone(), k_full.clone()) for _ in range(world_size)]
