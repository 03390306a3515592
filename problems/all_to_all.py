"""All-to-all with uneven splits: each rank sends a different number of rows to each rank.

Models: mixture-of-experts token dispatch and combine under expert parallelism (DeepSpeed-MoE,
Megatron-LM, DeepEP), where the router decides how many tokens go to each rank, and the
sequence <-> head re-sharding of Ulysses sequence parallelism (DeepSpeed-Ulysses).

Contract: ``solution(x, input_splits, output_splits)`` is called on every rank. ``x`` has shape
``(sum(input_splits), dim)``; its first ``input_splits[0]`` rows go to rank 0, the next
``input_splits[1]`` rows to rank 1, and so on. ``output_splits[j]`` is how many rows this rank
receives from rank j (equal to rank j's ``input_splits[rank]``). Every rank returns a new
``(sum(output_splits), dim)`` tensor: the rows received from rank 0, then from rank 1, and so on,
each block in the order its sender held them. Splits may be zero. ``x`` must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="all_to_all",
    name="All-to-all (uneven splits)",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # rows_per_peer: mean rows one rank sends to one rank (splits are uniform in [0, 2 * rows_per_peer]);
    # dim: row length (a hidden size).
    sizes={
        "small": dict(rows_per_peer=8, dim=128),
        "default": dict(rows_per_peer=64, dim=4096),
        "large": dict(rows_per_peer=4096, dim=4096),
    },
    ladder=[dict(rows_per_peer=1 << p, dim=1024) for p in range(0, 15, 2)],  # 4 KiB .. 64 MiB to each peer (float32)
)


def _split_matrix(ctx: InputContext) -> torch.Tensor:
    """(W, W) rows sent from rank i to rank j; identical on every rank, different per seed."""
    w, r = ctx.world_size, ctx.size["rows_per_peer"]
    g = ctx.shared_generator()
    splits = torch.randint(0, 2 * r + 1, (w, w), generator=g)
    # Force one cross-rank message to be empty every seed, so the zero-size case is always exercised.
    src = int(torch.randint(0, w, (1,), generator=g).item())
    dst = (src + int(torch.randint(1, w, (1,), generator=g).item())) % w
    splits[src, dst] = 0
    return splits


def make_inputs(ctx: InputContext):
    splits = _split_matrix(ctx)
    input_splits = splits[ctx.rank].tolist()
    output_splits = splits[:, ctx.rank].tolist()
    x = ctx.randn(sum(input_splits), ctx.size["dim"])
    return x, input_splits, output_splits


def solution(x: torch.Tensor, input_splits: list[int], output_splits: list[int]) -> torch.Tensor:
    out = x.new_empty(sum(output_splits), x.shape[1])
    dist.all_to_all_single(out, x, output_split_sizes=output_splits, input_split_sizes=input_splits)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, r = world_size, size["rows_per_peer"]
    row = size["dim"] * dtype.itemsize
    # Expected over the splits (mean r rows per pair, one cross-rank pair forced empty): cross-rank rows
    # each rank sends (= receives); it reads all rows it holds and writes all it gets (self rows included).
    return Traffic(
        interconnect_bytes=(w * (w - 1) - 1) / w * r * row,
        flops=0.0,
        hbm_bytes=2 * (w * w - 1) / w * r * row,
    )


def oracle(inputs, size, world_size):
    # rank j receives, from every rank i in order, the rows i holds for j
    def block(i, j):
        x, input_splits, _ = inputs[i]
        start = sum(input_splits[:j])
        return x[start:start + input_splits[j]]

    return [torch.cat([block(i, j) for i in range(world_size)]) for j in range(world_size)]
