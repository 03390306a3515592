"""Reshard activations from contiguous sequence slices to the zigzag (load-balanced) context-parallel layout.

Models: the entry of a load-balanced context-parallel region (Llama 3 style CP, Megatron-LM /
TransformerEngine ``cp_comm_type``, torch ``context_parallel`` with its round-robin / head-tail load
balancer, ring-flash-attention's zigzag): activations that were split into contiguous token slices (by the
data loader or sequence parallelism) are redistributed so that rank r holds chunks r and 2W-1-r of the 2W
chunks of the sequence, which evens out causal attention work.

Contract: ``solution(x)`` is called on every rank r. ``x`` has shape ``(2 * chunk, hidden)`` and holds tokens
``2 * r * chunk`` onward of the sequence of ``2W * chunk`` tokens, i.e. chunks 2r and 2r+1. Rank r returns a new
``(2 * chunk, hidden)`` tensor in x's dtype: chunk r of the sequence followed by chunk 2W-1-r (chunk m is
tokens ``m * chunk .. (m + 1) * chunk - 1``). ``x`` must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="cp_zigzag_reshard",
    name="Contiguous -> zigzag context-parallel resharding",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # chunk: tokens per chunk (each rank holds 2 chunks before and after; the sequence has 2W); hidden: row width.
    sizes={
        "small": dict(chunk=4, hidden=32),
        "default": dict(chunk=2048, hidden=8192),
        "large": dict(chunk=8192, hidden=8192),
    },
)


def _owner(m: int, w: int) -> int:
    """Rank that holds chunk m in the zigzag layout."""
    return m if m < w else 2 * w - 1 - m


def make_inputs(ctx: InputContext):
    s = ctx.size
    return (ctx.randn(2 * s["chunk"], s["hidden"]),)


def solution(x: torch.Tensor) -> torch.Tensor:
    w, rank = dist.get_world_size(), dist.get_rank()
    c = x.shape[0] // 2
    # we hold chunks 2r and 2r+1; the send buffer must be ordered by destination rank
    dest = (_owner(2 * rank, w), _owner(2 * rank + 1, w))
    send = torch.cat((x[c:], x[:c])) if dest[0] > dest[1] else x
    input_splits = [0] * w
    for d in dest:
        input_splits[d] += c
    # we receive chunk r from rank r // 2 and chunk 2W-1-r from rank (2W-1-r) // 2; the first source is never
    # the later one, so the output is already in the order chunk r, chunk 2W-1-r
    output_splits = [0] * w
    for m in (rank, 2 * w - 1 - rank):
        output_splits[m // 2] += c
    out = torch.empty_like(x)
    dist.all_to_all_single(out, send, output_split_sizes=output_splits, input_split_sizes=input_splits)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, c = world_size, size["chunk"]
    chunk = c * size["hidden"] * dtype.itemsize
    # Chunks that change owner: the busiest rank sends or receives the most of them (at most 2). Every rank reads
    # its 2 chunks and writes 2.
    sent = [sum(_owner(m, w) != r for m in (2 * r, 2 * r + 1)) for r in range(w)]
    received = [sum(m // 2 != r for m in (r, 2 * w - 1 - r)) for r in range(w)]
    return Traffic(
        interconnect_bytes=max(sent + received) * chunk,
        flops=0.0,
        hbm_bytes=4 * chunk,
    )


def oracle(inputs, size, world_size):
    w, c = world_size, size["chunk"]
    full = torch.cat([args[0] for args in inputs])
    return [torch.cat([full[r * c:(r + 1) * c], full[(2 * w - 1 - r) * c:(2 * w - r) * c]]) for r in range(w)]
