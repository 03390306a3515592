"""Greedy decoding: the argmax token id of each row of logits sharded along the vocabulary.

Models: greedy sampling in tensor-parallel inference (vLLM, Megatron-LM / NeMo inference,
TensorRT-LLM): the output projection is vocab-parallel, so each TP rank holds every sequence's
logits for its own vocabulary range; rather than gathering the full logits, each rank reduces
its range to (max, id) and only those pairs are exchanged.

Contract: ``solution(logits)`` is called on every rank. ``logits`` ``(batch, vocab_per_rank)`` in
the problem dtype is this rank's slice of the columns of the full ``(batch, world_size *
vocab_per_rank)`` logits (rank r holds vocabulary ids ``r * vocab_per_rank ...``). Every rank
returns the ``(batch,)`` int64 global id of each row's largest logit; among equal largest logits,
the lowest id. Ties are real (bf16 logits often repeat; some rows hold a repeated maximum on
every rank) and must follow that rule. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="vocab_parallel_argmax",
    name="Vocab-parallel argmax (greedy decoding)",
    category="vocab",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="integer ids: exact, ties to the lowest id"),
        "bfloat16": dict(atol=0, rtol=0, reason="integer ids: exact, ties to the lowest id"),
    },
    # batch: sequences decoded together; vocab_per_rank: columns of each rank's slice (128256 / 8 for Llama 3).
    sizes={
        "small": dict(batch=16, vocab_per_rank=64),
        "default": dict(batch=256, vocab_per_rank=16032),
        "large": dict(batch=2048, vocab_per_rank=32064),
    },
)


def make_inputs(ctx: InputContext):
    b, v = ctx.size["batch"], ctx.size["vocab_per_rank"]
    logits = 2 * ctx.randn(b, v)
    # A quarter of the rows hold one value above every other logit, the same on every rank, at two random
    # columns of each rank: their answer is rank 0's lower column.
    g = ctx.shared_generator()
    rows = torch.randperm(b, generator=g)[: max(1, b // 4)]
    top = (12 + torch.rand(rows.numel(), 1, generator=g)).to(ctx.device, ctx.dtype)
    cols = ctx.randint(0, v, rows.numel(), 2)
    logits[rows.to(ctx.device).unsqueeze(-1), cols] = top
    return (logits,)


def solution(logits: torch.Tensor) -> torch.Tensor:
    b, vocab_per_rank = logits.shape
    values, idx = logits.max(dim=-1)  # the first (lowest) index among equal maxima
    # (value, global id) in float64: exact for any float logit and any vocabulary id below 2**53
    packed = torch.stack((values.double(), (idx + dist.get_rank() * vocab_per_rank).double()), dim=-1)
    gathered = packed.new_empty(dist.get_world_size() * b, 2)
    all_gather_single(gathered, packed)
    gathered = gathered.view(-1, b, 2)
    best = gathered[..., 0].argmax(dim=0, keepdim=True)  # the lowest rank among equal maxima: lower ids
    return gathered[..., 1].gather(0, best).squeeze(0).long()


def speed_of_light(size, world_size, dtype) -> Traffic:
    b, v = size["batch"], size["vocab_per_rank"]
    # Each rank receives the other ranks' (value, id) pair per row: a float32 and a 32-bit id at the least.
    # Memory: read the logits shard once. Flops: one comparison per logit.
    return Traffic(
        interconnect_bytes=(world_size - 1) * b * 8,
        flops=b * v,
        hbm_bytes=b * v * dtype.itemsize + b * 8,
    )


def oracle(inputs, size, world_size):
    full = torch.cat([args[0] for args in inputs], dim=1)
    is_max = full == full.max(dim=-1, keepdim=True).values
    ids = torch.arange(full.shape[1]).expand_as(full)
    first = torch.where(is_max, ids, full.shape[1]).min(dim=-1).values
    return [first.clone() for _ in range(world_size)]
