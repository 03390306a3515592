"""Per-token top-k log-probabilities and their token ids over logits sharded along the vocabulary.

Models: the logprobs that serving engines return (vLLM's and SGLang's top-k logprobs) and that RL
trainers record for rollouts (OpenRLHF, verl, NeMo-RL), computed where the output projection is
vocab-parallel: each TP rank holds its vocabulary range of every token's logits; instead of
gathering them, each rank finds its own top k and its softmax statistics, and only those are
exchanged.

Contract: ``solution(logits, k)`` is called on every rank. ``logits`` ``(tokens, vocab_per_rank)``
in the problem dtype is this rank's slice of the columns of the full ``(tokens, world_size *
vocab_per_rank)`` logits (rank r holds vocabulary ids ``r * vocab_per_rank ...``); ``k`` is an
int. Every rank returns ``(logprobs, ids)``: for each token, the k largest logits of the full row,
ordered by decreasing logit and, among equal logits, increasing id; ``ids`` ``(tokens, k)`` int64
are their global vocabulary ids and ``logprobs`` ``(tokens, k)`` float32 their log-softmax values
``logit - logsumexp(full row)``, computed in float32. Ties are real (bf16 logits often repeat;
some rows hold a repeated maximum on every rank) and must follow that order. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="vocab_parallel_logprob_topk",
    name="Vocab-parallel top-k log-probabilities",
    category="vocab",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-5, reason="log-sum-exp over ~1e5 logits reassociates; ids are exact"),
        "bfloat16": dict(atol=1e-4, rtol=1e-5, reason="bf16 logits are exact in float32, where all the math is done"),
    },
    # tokens: rows; vocab_per_rank: columns of each rank's slice (128256 / 8 for Llama 3); k: logprobs per token.
    sizes={
        "small": dict(tokens=16, vocab_per_rank=64, k=4),
        "default": dict(tokens=4096, vocab_per_rank=16032, k=8),
        "large": dict(tokens=8192, vocab_per_rank=32064, k=20),
    },
)


def make_inputs(ctx: InputContext):
    t, v = ctx.size["tokens"], ctx.size["vocab_per_rank"]
    logits = 2 * ctx.randn(t, v)
    # A quarter of the rows hold one value above every other logit, the same on every rank, at two random
    # columns of each rank: the top of those rows is a tie that spans ranks.
    g = ctx.shared_generator()
    rows = torch.randperm(t, generator=g)[: max(1, t // 4)]
    top = (12 + torch.rand(rows.numel(), 1, generator=g)).to(ctx.device, ctx.dtype)
    cols = ctx.randint(0, v, rows.numel(), 2)
    logits[rows.to(ctx.device).unsqueeze(-1), cols] = top
    return logits, ctx.size["k"]


def _order_key(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """int64 keys that sort like (value, -id): larger value first, then lower id. values are float32."""
    bits = values.view(torch.int32).long()
    bits ^= (bits >> 31).bitwise_and_(0x7FFFFFFF)  # IEEE order -> integer order (negative floats flipped)
    return bits.bitwise_left_shift_(32).add_(0xFFFFFFFF - ids)


def solution(logits: torch.Tensor, k: int):
    t, vocab_per_rank = logits.shape
    w, rank = dist.get_world_size(), dist.get_rank()
    x = logits.float()
    cols = torch.arange(vocab_per_rank, device=x.device)
    # topk on plain floats leaves the order (and choice) among equal logits unspecified: select on unique keys.
    idx = _order_key(x, cols).topk(k, dim=-1).indices
    vals = x.gather(-1, idx)
    row_max = vals[:, :1]
    sum_exp = (x - row_max).exp_().sum(-1, keepdim=True)
    ids = (idx + rank * vocab_per_rank).float()  # exact: vocabularies are far below 2**24
    packed = torch.cat((vals, ids, row_max, sum_exp), dim=1)
    gathered = packed.new_empty(w * t, packed.shape[1])
    all_gather_single(gathered, packed)
    gathered = gathered.view(w, t, -1)

    cand_vals = gathered[..., :k].transpose(0, 1).reshape(t, w * k)
    cand_ids = gathered[..., k:2 * k].transpose(0, 1).reshape(t, w * k).long()
    maxes, sums = gathered[..., 2 * k], gathered[..., 2 * k + 1]
    global_max = maxes.amax(0)
    lse = global_max + torch.log((sums * torch.exp(maxes - global_max)).sum(0))
    best = _order_key(cand_vals, cand_ids).topk(k, dim=-1).indices
    return cand_vals.gather(-1, best) - lse.unsqueeze(-1), cand_ids.gather(-1, best)


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, v, k = size["tokens"], size["vocab_per_rank"], size["k"]
    # Each rank receives the other ranks' candidates (k values, k ids) and two softmax statistics per token,
    # 4 bytes each. Memory: read the logits shard once. Flops: compare, subtract, exponentiate, add: ~4 per logit.
    return Traffic(
        interconnect_bytes=(world_size - 1) * t * (2 * k + 2) * 4,
        flops=4 * t * v,
        hbm_bytes=t * v * dtype.itemsize + t * k * (4 + 8),
    )


def oracle(inputs, size, world_size):
    k = inputs[0][1]
    full = torch.cat([args[0] for args in inputs], dim=1).double()
    # a stable descending sort keeps equal logits in increasing id order
    order = torch.sort(full, dim=-1, descending=True, stable=True).indices[:, :k]
    logprobs = torch.log_softmax(full, dim=-1).gather(-1, order).float()
    return [(logprobs.clone(), order.clone()) for _ in range(world_size)]
