"""Per-token cross-entropy loss over logits sharded along the vocabulary.

Models: the language-model loss of tensor-parallel training (Megatron-LM's
vocab_parallel_cross_entropy, NeMo, DeepSpeed's Megatron fork): the output projection is
column-parallel over the vocabulary, so each TP rank holds every token's logits for its own
vocabulary range; instead of gathering them, the ranks all-reduce the row maximum (MAX), then the
target logit and the sum of exponentials (SUM), and compute the loss from those.

Contract: ``solution(logits, target)`` is called on every rank. ``logits`` ``(tokens,
vocab_per_rank)`` in the problem dtype is this rank's slice of the columns of the full
``(tokens, world_size * vocab_per_rank)`` logits (rank r holds vocabulary ids ``r *
vocab_per_rank ...``); ``target`` ``(tokens,)`` int64 is identical on every rank, with ids in
``[0, world_size * vocab_per_rank)``. Every rank returns the ``(tokens,)`` float32 loss
``logsumexp(full[i]) - full[i, target[i]]``, computed in float32 whatever the logits' dtype (as
Megatron does unless fp16_lm_cross_entropy is set). Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="vocab_parallel_cross_entropy",
    name="Vocab-parallel cross-entropy",
    category="vocab",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-5, reason="sums of ~1e5 exponentials reassociate; the loss is ~10"),
        "bfloat16": dict(atol=1e-4, rtol=1e-5, reason="bf16 logits are exact in float32, where all the math is done"),
    },
    # tokens: rows (a micro-batch's tokens); vocab_per_rank: columns of each rank's slice (128256 / 8 for Llama 3).
    sizes={
        "small": dict(tokens=16, vocab_per_rank=64),
        "default": dict(tokens=4096, vocab_per_rank=16032),
        "large": dict(tokens=16384, vocab_per_rank=32064),
    },
)


def make_inputs(ctx: InputContext):
    t, v = ctx.size["tokens"], ctx.size["vocab_per_rank"]
    target = torch.randint(0, ctx.world_size * v, (t,), generator=ctx.shared_generator()).to(ctx.device)
    return 2 * ctx.randn(t, v), target


def solution(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    t, vocab_per_rank = logits.shape
    row_max = logits.amax(-1).float()
    dist.all_reduce(row_max, op=dist.ReduceOp.MAX)
    shifted = logits.float() - row_max.unsqueeze(-1)

    local = target - dist.get_rank() * vocab_per_rank
    outside = (local < 0) | (local >= vocab_per_rank)
    picked = shifted.gather(-1, local.masked_fill_(outside, 0).unsqueeze(-1)).squeeze(-1)
    # one all-reduce for both: the target logit (zero on the ranks that do not own it) and the sum of exponentials
    stats = torch.stack((picked.masked_fill_(outside, 0), shifted.exp_().sum(-1)))
    dist.all_reduce(stats, op=dist.ReduceOp.SUM)
    return torch.log(stats[1]) - stats[0]


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, v = size["tokens"], size["vocab_per_rank"]
    # All-reduces of 3 float32 per token (max, target logit, sum of exponentials): 2 (W-1)/W each way.
    # Memory: read the logits shard once. Flops: subtract, exponentiate, add: ~3 per logit.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * 3 * t * 4,
        flops=3 * t * v,
        hbm_bytes=t * v * dtype.itemsize + t * (8 + 4),
    )


def oracle(inputs, size, world_size):
    full = torch.cat([args[0] for args in inputs], dim=1).double()
    target = inputs[0][1]
    loss = torch.logsumexp(full, dim=-1) - full.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return [loss.float() for _ in range(world_size)]
