"""MoE routing metadata: per-rank send/receive row counts and per-expert token counts, exchanged.

Models: the first step of expert-parallel MoE dispatch (DeepSpeed-MoE, Megatron-LM token
dispatcher, GShard/Switch, DeepEP's get_dispatch_layout + notify), where every rank turns its
router's top-k decisions into split sizes before the token all-to-all can be issued.

Contract: ``solution(topk_ids, num_experts)`` is called on every rank. ``topk_ids`` is a
``(tokens, k)`` int64 tensor of this rank's router choices (k distinct expert ids per token, in
``[0, num_experts)``); ``num_experts = W * experts_per_rank`` and expert e lives on rank
``e // experts_per_rank`` (local index ``e % experts_per_rank``). Every rank returns a tuple of
three new int64 tensors on the input's device:
``send_counts`` (W,): ``send_counts[j]`` = number of (token, k-slot) rows this rank routes to
experts on rank j; ``recv_counts`` (W,): ``recv_counts[j]`` = rank j's ``send_counts[rank]``;
``tokens_per_local_expert`` (experts_per_rank,): rows routed to each local expert of this rank,
summed over all source ranks (this rank included). ``topk_ids`` must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="moe_routing_metadata",
    name="MoE routing metadata (count exchange)",
    category="moe",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="integer counts: exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="integer counts: exact"),
    },
    # tokens_per_rank: tokens routed on each rank; topk: experts per token (k);
    # experts_per_rank: experts each rank owns (num_experts = W * experts_per_rank).
    sizes={
        "small": dict(tokens_per_rank=24, topk=2, experts_per_rank=3),
        "default": dict(tokens_per_rank=4096, topk=8, experts_per_rank=16),
        "large": dict(tokens_per_rank=16384, topk=8, experts_per_rank=32),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    num_experts = ctx.world_size * s["experts_per_rank"]
    # balanced router: k distinct experts per token, uniformly (per rank and seed)
    probs = torch.ones(s["tokens_per_rank"], num_experts, device=ctx.device)
    topk_ids = torch.multinomial(probs, s["topk"], replacement=False, generator=ctx.generator)
    return topk_ids, num_experts


def solution(topk_ids: torch.Tensor, num_experts: int):
    w = dist.get_world_size()
    per_expert = torch.bincount(topk_ids.flatten(), minlength=num_experts)  # (E,) int64
    # rank j gets the counts of its own experts: row i of the result = rank i's counts for my experts
    from_each = torch.empty_like(per_expert)
    dist.all_to_all_single(from_each, per_expert)
    from_each = from_each.view(w, -1)
    send_counts = per_expert.view(w, -1).sum(1)
    return send_counts, from_each.sum(1), from_each.sum(0)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, epr = world_size, size["experts_per_rank"]
    # Each rank sends its per-expert counts (8 bytes each) for the W-1 other ranks' experts and receives as many;
    # it reads its top-k ids once and writes 2W + experts_per_rank counts.
    return Traffic(
        interconnect_bytes=(w - 1) * epr * 8,
        flops=size["tokens_per_rank"] * size["topk"],
        hbm_bytes=size["tokens_per_rank"] * size["topk"] * 8 + (2 * w + epr) * 8,
    )


def oracle(inputs, size, world_size):
    w = world_size
    num_experts = inputs[0][1]
    epr = num_experts // w
    # count[i, e]: rows rank i routes to expert e
    count = torch.stack([torch.stack([(ids == e).sum() for e in range(num_experts)]) for ids, _ in inputs])
    count = count.to(torch.int64)
    out = []
    for r in range(w):
        send = torch.stack([count[r, j * epr:(j + 1) * epr].sum() for j in range(w)])
        recv = torch.stack([count[j, r * epr:(r + 1) * epr].sum() for j in range(w)])
        local = count[:, r * epr:(r + 1) * epr].sum(0)
        out.append((send, recv, local))
    return out
