"""MoE dispatch with an expert capacity (GShard/Switch): fixed-size per-expert slots, overflow dropped.

Models: capacity-factor token dispatch of GShard, Switch Transformer, DeepSpeed-MoE and
Megatron-LM's capacity mode (and the static-shape dispatch of TPU/XLA MoE): every expert accepts
at most ``capacity`` rows from each source rank, extra rows are dropped, and the fixed-size
buffers are exchanged with an even all-to-all so that shapes do not depend on the routing.

Contract: ``solution(x, topk_ids, num_experts, capacity)`` is called on every rank. ``x`` is
this rank's ``(tokens, hidden)`` activations; ``topk_ids`` a ``(tokens, k)`` int64 tensor of k
distinct expert ids per token; ``num_experts = W * experts_per_rank``, expert e lives on rank
``e // experts_per_rank`` as local expert ``e % experts_per_rank``; ``capacity`` =
``ceil(capacity_factor * tokens * k / num_experts)``. Every (token, k-slot) pair is a row, a copy
of ``x[token]``; of the rows a source rank routes to expert e, the first ``capacity`` in token
order are kept and the rest dropped. Every rank returns a tuple of new tensors ``(buf, mask)``:
``buf`` ``(experts_per_rank, W, capacity, hidden)`` in ``x``'s dtype, ``buf[e, j, c]`` = the
c-th kept row rank j sent to this rank's local expert e, zeros in unused slots; ``mask``
``(experts_per_rank, W, capacity)`` bool, True exactly at used slots. Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="moe_capacity_dispatch",
    name="MoE capacity-factor dispatch (GShard/Switch)",
    category="moe",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement and zero fill: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement and zero fill: bit-exact"),
    },
    # tokens_per_rank: tokens on each rank; hidden: row length; topk: experts per token (k); experts_per_rank:
    # experts each rank owns (num_experts = W * experts_per_rank); capacity_factor_pct: capacity factor in percent.
    sizes={
        "small": dict(tokens_per_rank=16, hidden=32, topk=2, experts_per_rank=2, capacity_factor_pct=100),
        "default": dict(tokens_per_rank=4096, hidden=4096, topk=2, experts_per_rank=4, capacity_factor_pct=125),
        "large": dict(tokens_per_rank=8192, hidden=4096, topk=2, experts_per_rank=16, capacity_factor_pct=125),
    },
)


def _capacity(size, world_size) -> int:
    rows, num_experts = size["tokens_per_rank"] * size["topk"], world_size * size["experts_per_rank"]
    return -(-size["capacity_factor_pct"] * rows // (100 * num_experts))


def make_inputs(ctx: InputContext):
    s = ctx.size
    num_experts = ctx.world_size * s["experts_per_rank"]
    probs = torch.ones(s["tokens_per_rank"], num_experts, device=ctx.device)  # uniform: k distinct experts
    topk_ids = torch.multinomial(probs, s["topk"], replacement=False, generator=ctx.generator)
    x = ctx.randn(s["tokens_per_rank"], s["hidden"])
    return x, topk_ids, num_experts, _capacity(s, ctx.world_size)


def solution(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, capacity: int):
    w = dist.get_world_size()
    epr = num_experts // w
    hidden = x.shape[1]
    k = topk_ids.shape[1]
    flat = topk_ids.flatten()
    order = torch.argsort(flat, stable=True)  # by expert, then token
    expert = flat[order]
    per_expert = torch.bincount(flat, minlength=num_experts)
    pos = torch.arange(flat.numel(), device=x.device) - (per_expert.cumsum(0) - per_expert)[expert]
    # scatter into the (expert, slot) buffer without a host sync: dropped rows land in one spare row at the end
    slot = torch.where(pos < capacity, expert * capacity + pos, num_experts * capacity)
    buf = x.new_zeros(num_experts * capacity + 1, hidden)
    buf.index_copy_(0, slot, x.index_select(0, order // k))
    recv = x.new_empty(w, epr, capacity, hidden)
    dist.all_to_all_single(recv, buf[:-1].view(w, epr, capacity, hidden))
    used = torch.empty_like(per_expert)
    dist.all_to_all_single(used, per_expert.clamp(max=capacity))
    mask = torch.arange(capacity, device=x.device) < used.view(w, epr).t().unsqueeze(-1)
    return recv.transpose(0, 1).contiguous(), mask


def _expected_kept(n: int, p: float, cap: int) -> float:
    """E[min(X, cap)] for X ~ Binomial(n, p)."""
    if cap >= n:
        return n * p
    total, below = 0.0, 0.0
    for i in range(cap):
        pmf = math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                       + i * math.log(p) + (n - i) * math.log1p(-p))
        total += i * pmf
        below += pmf
    return total + cap * (1.0 - below)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, t, k, h, epr = world_size, size["tokens_per_rank"], size["topk"], size["hidden"], size["experts_per_rank"]
    cap = _capacity(size, w)
    row = h * dtype.itemsize
    kept = _expected_kept(t, k / (w * epr), cap)  # rows kept per (source rank, expert): each token picks it w.p. k/E
    # Only kept rows (plus counts) need to cross: a rank receives kept rows from W-1 sources for each local expert,
    # and sends as many. It reads its t tokens and writes the whole dense buffer (zeros included) and mask.
    return Traffic(
        interconnect_bytes=(w - 1) * epr * (kept * row + 8),
        flops=0.0,
        hbm_bytes=t * row + epr * w * cap * (row + 1),
    )


def oracle(inputs, size, world_size):
    w = world_size
    _, _, num_experts, cap = inputs[0]
    epr = num_experts // w
    out = []
    for r in range(w):
        x0 = inputs[r][0]
        buf = torch.zeros(epr, w, cap, x0.shape[1], dtype=x0.dtype, device=x0.device)
        mask = torch.zeros(epr, w, cap, dtype=torch.bool, device=x0.device)
        for e in range(epr):
            for j in range(w):
                x, ids = inputs[j][0], inputs[j][1]
                rows = x[(ids == r * epr + e).any(1)][:cap]
                buf[e, j, :len(rows)] = rows
                mask[e, j, :len(rows)] = True
        out.append((buf, mask))
    return out
