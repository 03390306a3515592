"""Embedding lookup with the table sharded by vocabulary rows across tensor-parallel ranks.

Models: the input embedding of tensor-parallel language models (Megatron-LM's and vLLM's
VocabParallelEmbedding, NeMo): every TP rank sees the same token ids but holds only a contiguous
range of the vocabulary's rows, looks up the ids it owns, writes zeros for the others, and an
all-reduce assembles the full embeddings on every rank.

Contract: ``solution(ids, weight)`` is called on every rank. ``ids`` ``(tokens,)`` int64 are
identical on every rank, in ``[0, world_size * vocab_per_rank)``; ``weight`` ``(vocab_per_rank,
hidden)`` in the problem dtype is this rank's shard of the table: rows ``rank * vocab_per_rank``
up to the next rank's. Every rank returns the ``(tokens, hidden)`` tensor in the dtype whose row i
is row ``ids[i]`` of the full table. Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="vocab_parallel_embedding",
    name="Vocab-parallel embedding lookup",
    category="vocab",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="each output element has one non-zero term: the sum is exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="each output element has one non-zero term: the sum is exact"),
    },
    # tokens: ids to look up; vocab_per_rank: rows of each rank's shard (128256 / 8 for Llama 3 at TP 8);
    # hidden: embedding width.
    sizes={
        "small": dict(tokens=32, vocab_per_rank=64, hidden=32),
        "default": dict(tokens=8192, vocab_per_rank=16032, hidden=8192),
        "large": dict(tokens=32768, vocab_per_rank=32064, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    t, v, h = ctx.size["tokens"], ctx.size["vocab_per_rank"], ctx.size["hidden"]
    ids = torch.randint(0, ctx.world_size * v, (t,), generator=ctx.shared_generator()).to(ctx.device)
    return ids, ctx.randn(v, h)


def solution(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    vocab_per_rank = weight.shape[0]
    local = ids - dist.get_rank() * vocab_per_rank
    outside = (local < 0) | (local >= vocab_per_rank)
    out = F.embedding(local.masked_fill_(outside, 0), weight)
    out.masked_fill_(outside.unsqueeze(-1), 0)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, h = size["tokens"], size["hidden"]
    rows = t * h * dtype.itemsize
    # Only the owner holds a row: a rank must receive the (W-1)/W of the rows it does not own (and send its own
    # ~t/W rows to W-1 ranks), for uniform ids. Memory: read the rows it owns, write the full output.
    return Traffic(
        interconnect_bytes=(world_size - 1) / world_size * rows,
        flops=0.0,
        hbm_bytes=rows / world_size + rows + t * 8,
    )


def oracle(inputs, size, world_size):
    table = torch.cat([args[1] for args in inputs])
    ids = inputs[0][0]
    return [table[ids].clone() for _ in range(world_size)]
