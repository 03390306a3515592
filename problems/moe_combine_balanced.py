"""MoE token combine (balanced routing): return expert outputs to their tokens and sum them by gate.

Models: the combine all-to-all of expert-parallel mixture-of-experts layers (DeepSpeed-MoE,
Megatron-LM's all-to-all token dispatcher, GShard/Switch, DeepEP combine, Mixtral/DeepSeek
serving): the inverse of the dispatch, followed by the gate-weighted sum of each token's k
expert outputs, with a router that spreads tokens evenly over the experts.

Contract: ``solution(expert_out, recv_counts, topk_ids, topk_weights)`` is called on every rank.
Experts: ``num_experts = W * experts_per_rank``, expert e lives on rank ``e // experts_per_rank``
as local expert ``e % experts_per_rank``. ``topk_ids`` ``(tokens, k)`` int64 (k distinct experts
per token) and ``topk_weights`` ``(tokens, k)`` (in the data dtype) are this rank's router
output. ``recv_counts`` ``(experts_per_rank, W)`` int64: ``recv_counts[e, j]`` = rows this rank
holds for its local expert e from rank j's tokens. ``expert_out`` ``(recv_counts.sum(), hidden)``
holds those rows in the dispatch layout: ordered by local expert, then by source rank, then by
the source's token index (the row of (source j, token t, expert g) is expert g's output for
rank j's token t). Every rank returns a new ``(tokens, hidden)`` tensor in ``expert_out``'s dtype:
``out[t] = sum_s topk_weights[t, s] * (row of (this rank, t, topk_ids[t, s]))``. Inputs must
not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="moe_combine_balanced",
    name="MoE combine all-to-all + gate-weighted sum (balanced routing)",
    category="moe",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="k-term weighted sums reassociate: a few ulp"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa; k-term weighted sum rounded in another order"),
    },
    # tokens_per_rank: tokens on each rank; hidden: row length; topk: experts per token (k);
    # experts_per_rank: experts each rank owns (num_experts = W * experts_per_rank).
    sizes={
        "small": dict(tokens_per_rank=16, hidden=32, topk=2, experts_per_rank=2),
        "default": dict(tokens_per_rank=4096, hidden=4096, topk=4, experts_per_rank=8),
        "large": dict(tokens_per_rank=8192, hidden=7168, topk=8, experts_per_rank=32),
    },
)


def _all_routes(ctx: InputContext) -> torch.Tensor:
    """(W, tokens, k) expert ids of every rank, identical on every rank: each rank's input shapes depend on all."""
    s, w = ctx.size, ctx.world_size
    probs = torch.ones(w * s["tokens_per_rank"], w * s["experts_per_rank"])  # uniform: k distinct experts
    ids = torch.multinomial(probs, s["topk"], replacement=False, generator=ctx.shared_generator())
    return ids.view(w, s["tokens_per_rank"], s["topk"])


def make_inputs(ctx: InputContext):
    s, w, r = ctx.size, ctx.world_size, ctx.rank
    routes = _all_routes(ctx)
    epr = s["experts_per_rank"]
    # recv_counts[e, j]: tokens of rank j that picked expert r * epr + e
    local = torch.arange(r * epr, (r + 1) * epr)
    recv_counts = (routes.unsqueeze(-1) == local).any(2).sum(1).t().contiguous()
    expert_out = ctx.randn(int(recv_counts.sum()), s["hidden"])
    gates = torch.softmax(ctx.randn(s["tokens_per_rank"], s["topk"], dtype=torch.float32), dim=-1)
    return expert_out, recv_counts.to(ctx.device), routes[r].to(ctx.device), gates.to(ctx.dtype)


def solution(expert_out: torch.Tensor, recv_counts: torch.Tensor, topk_ids: torch.Tensor,
             topk_weights: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    epr = recv_counts.shape[0]
    tokens, k = topk_ids.shape
    flat = topk_ids.flatten()
    # the order in which this rank's rows left in the dispatch: by expert, then token (stable sort)
    order = torch.argsort(flat, stable=True)
    per_expert = torch.bincount(flat, minlength=w * epr)
    sizes = torch.cat([per_expert.view(w, epr).sum(1), recv_counts.flatten()]).tolist()  # one device sync
    back_splits, block_sizes = sizes[:w], sizes[w:]
    # held blocks are (local expert, source)-major; the all-to-all wants them (source, local expert)-major
    blocks = expert_out.split(block_sizes)
    send = torch.cat([blocks[e * w + j] for j in range(w) for e in range(epr)])
    send_splits = [sum(block_sizes[e * w + j] for e in range(epr)) for j in range(w)]
    recv = expert_out.new_empty(tokens * k, expert_out.shape[1])
    dist.all_to_all_single(recv, send, output_split_sizes=back_splits, input_split_sizes=send_splits)
    rows = torch.empty_like(recv).index_copy_(0, order, recv)  # back to (token, k-slot) order
    return torch.bmm(topk_weights.unsqueeze(1), rows.view(tokens, k, -1)).squeeze(1)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, t, k, h = world_size, size["tokens_per_rank"], size["topk"], size["hidden"]
    row = h * dtype.itemsize
    # Expected over uniform routing: a rank holds t*k expert-output rows and sends (W-1)/W of them away, and gets
    # as many back; it reads the rows it holds, writes its t output rows, and does k multiply-adds per element.
    return Traffic(
        interconnect_bytes=t * k * (w - 1) / w * row,
        flops=2 * t * k * h,
        hbm_bytes=(t * k + t) * row,
    )


def oracle(inputs, size, world_size):
    w = world_size
    epr = inputs[0][1].shape[0]
    # rows[j][t, s]: the expert output for rank j's token t, k-slot s, found in its owner's dispatch layout
    rows = [torch.zeros(*ids.shape, args[0].shape[1], dtype=torch.float64, device=ids.device)
            for args in inputs for ids in [args[2]]]
    for owner in range(w):
        expert_out, counts = inputs[owner][0], inputs[owner][1]
        start = 0
        for e in range(epr):
            for j in range(w):
                t, s = (inputs[j][2] == owner * epr + e).nonzero(as_tuple=True)  # in token order
                n = int(counts[e, j])
                assert n == t.numel()
                rows[j][t, s] = expert_out[start:start + n].double()
                start += n
    out = []
    for j in range(w):
        gates = inputs[j][3].double()
        out.append((gates.unsqueeze(-1) * rows[j]).sum(1).to(inputs[j][0].dtype))
    return out
