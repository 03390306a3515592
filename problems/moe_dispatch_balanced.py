"""MoE token dispatch (balanced routing): send every token copy to the rank owning its expert.

Models: the dispatch all-to-all of expert-parallel mixture-of-experts layers (DeepSpeed-MoE,
Megatron-LM's all-to-all token dispatcher, GShard/Switch, DeepEP dispatch, Mixtral/DeepSeek
serving), with a router that spreads tokens evenly over the experts.

Contract: ``solution(x, topk_ids, num_experts)`` is called on every rank. ``x`` is this rank's
``(tokens, hidden)`` activations; ``topk_ids`` a ``(tokens, k)`` int64 tensor of k distinct
expert ids per token; ``num_experts = W * experts_per_rank``, expert e lives on rank
``e // experts_per_rank`` as its local expert ``e % experts_per_rank``. Every (token, k-slot)
pair is one row, a copy of ``x[token]``. Every rank returns a tuple of new tensors
``(recv_x, recv_counts)``: ``recv_x`` is ``(rows, hidden)`` in ``x``'s dtype holding every row
routed to this rank's experts, ordered by local expert, then by source rank, then by token
index (a token picks an expert at most once); ``recv_counts`` is ``(experts_per_rank, W)``
int64, ``recv_counts[e, j]`` = rows of local expert e that came from rank j (so ``recv_x`` is
``recv_counts.flatten()`` consecutive blocks). Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="moe_dispatch_balanced",
    name="MoE dispatch all-to-all (balanced routing)",
    category="moe",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    # tokens_per_rank: tokens on each rank; hidden: row length; topk: experts per token (k);
    # experts_per_rank: experts each rank owns (num_experts = W * experts_per_rank).
    sizes={
        "small": dict(tokens_per_rank=16, hidden=32, topk=2, experts_per_rank=2),
        "default": dict(tokens_per_rank=4096, hidden=4096, topk=4, experts_per_rank=8),
        "large": dict(tokens_per_rank=8192, hidden=7168, topk=8, experts_per_rank=32),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    num_experts = ctx.world_size * s["experts_per_rank"]
    probs = torch.ones(s["tokens_per_rank"], num_experts, device=ctx.device)  # uniform: k distinct experts
    topk_ids = torch.multinomial(probs, s["topk"], replacement=False, generator=ctx.generator)
    x = ctx.randn(s["tokens_per_rank"], s["hidden"])
    return x, topk_ids, num_experts


def solution(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int):
    w = dist.get_world_size()
    epr = num_experts // w
    k = topk_ids.shape[1]
    flat = topk_ids.flatten()
    # rows sorted by expert (hence by destination rank, then local expert); stable keeps token order
    order = torch.argsort(flat, stable=True)
    send_x = x.index_select(0, order // k)
    per_expert = torch.bincount(flat, minlength=num_experts)
    from_each = torch.empty_like(per_expert)
    dist.all_to_all_single(from_each, per_expert)  # from_each[j * epr + e]: rows from rank j for local e
    sizes = torch.cat([per_expert.view(w, epr).sum(1), from_each]).tolist()  # one device sync
    send_splits, block_sizes = sizes[:w], sizes[w:]
    recv_splits = [sum(block_sizes[j * epr:(j + 1) * epr]) for j in range(w)]
    recv = x.new_empty(sum(recv_splits), x.shape[1])
    dist.all_to_all_single(recv, send_x, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    # received blocks are (source rank, local expert)-major; regroup them (local expert, source rank)-major
    blocks = recv.split(block_sizes)
    recv_x = torch.cat([blocks[j * epr + e] for e in range(epr) for j in range(w)])
    return recv_x, from_each.view(w, epr).t().contiguous()


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, t, k, h = world_size, size["tokens_per_rank"], size["topk"], size["hidden"]
    row = h * dtype.itemsize
    # Expected over uniform routing: a rank sends (and receives) t*k*(W-1)/W rows over the interconnect;
    # it must read its t tokens and write the t*k rows it receives.
    return Traffic(
        interconnect_bytes=t * k * (w - 1) / w * row,
        flops=0.0,
        hbm_bytes=(t + t * k) * row,
    )


def oracle(inputs, size, world_size):
    w = world_size
    num_experts = inputs[0][2]
    epr = num_experts // w
    out = []
    for r in range(w):
        rows, counts = [], torch.zeros(epr, w, dtype=torch.int64)
        for e in range(epr):
            for j in range(w):
                x, ids, _ = inputs[j]
                hit = (ids == r * epr + e).any(1)
                rows.append(x[hit])
                counts[e, j] = int(hit.sum())
        out.append((torch.cat(rows), counts.to(inputs[r][0].device)))
    return out
