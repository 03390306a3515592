"""MoE layer with expert parallelism inside data parallelism: token all-to-all only within EP pairs.

Models: MoE training and serving where the expert-parallel degree is smaller than the world
(DeepSpeed-MoE ep_size < world size, Megatron-LM expert_model_parallel_size inside data
parallelism, GShard/Switch replicas): the ranks form W/2 data-parallel replicas of an EP group
of 2; each replica holds all experts split over its 2 ranks, and tokens are exchanged only
inside their replica's pair.

Contract: ``solution(x, topk_ids, topk_weights, w_expert)`` is called on every rank (W even). EP
group i is ranks {2i, 2i+1}; each group has ``E = 2 * experts_per_rank`` experts, expert e of a
group lives on its rank ``2i + e // experts_per_rank`` as local expert ``e % experts_per_rank``.
``x`` ``(tokens, hidden)``: this rank's tokens; ``topk_ids`` ``(tokens, k)`` int64: k distinct
expert ids in ``[0, E)`` per token (experts of this rank's own group); ``topk_weights``
``(tokens, k)`` in the data dtype: their gates; ``w_expert`` ``(experts_per_rank, hidden, hidden)``:
this rank's experts (identical on the same position of every replica: rank r holds the same
weights as rank r + 2). Expert e on a row v is ``v @ w_expert_of_e``. Every rank returns a new
``(tokens, hidden)`` tensor in ``x``'s dtype: ``out[t] = sum_s topk_weights[t, s] *
(x[t] @ W[topk_ids[t, s]])``, W the weights of the expert in this rank's group. Inputs must not
be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

EP = 2  # ranks per expert-parallel group

META = dict(
    id="moe_ep_within_dp",
    name="MoE layer, expert parallelism (2) inside data parallelism",
    category="moe",
    world_sizes=dict(min=2, multiple_of=EP),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="a GEMM over hidden and a k-term weighted sum reassociate"),
        "bfloat16": dict(atol=3e-2, rtol=3e-2, reason="8-bit mantissa; GEMM output and weighted sum rounded to bf16"),
    },
    # tokens_per_rank: tokens on each rank; hidden: model width (each expert is hidden x hidden);
    # topk: experts per token (<= 2 * experts_per_rank); experts_per_rank: experts each rank owns.
    sizes={
        "small": dict(tokens_per_rank=16, hidden=32, topk=2, experts_per_rank=2),
        "default": dict(tokens_per_rank=4096, hidden=4096, topk=2, experts_per_rank=4),
        "large": dict(tokens_per_rank=16384, hidden=4096, topk=4, experts_per_rank=8),
    },
)

_EP_GROUPS: dict[int, list] = {}  # world size -> the W/2 EP groups


def _ep_group():
    w = dist.get_world_size()
    if w not in _EP_GROUPS:
        _EP_GROUPS[w] = [dist.new_group(list(range(i, i + EP))) for i in range(0, w, EP)]  # every rank, same order
    return _EP_GROUPS[w][dist.get_rank() // EP]


def make_inputs(ctx: InputContext):
    s = ctx.size
    t, h, k, epr = s["tokens_per_rank"], s["hidden"], s["topk"], s["experts_per_rank"]
    x = ctx.randn(t, h)
    probs = torch.ones(t, EP * epr, device=ctx.device)  # uniform: k distinct experts of the group
    topk_ids = torch.multinomial(probs, k, replacement=False, generator=ctx.generator)
    topk_weights = torch.softmax(ctx.randn(t, k, dtype=torch.float32), dim=-1).to(ctx.dtype)
    # expert weights are replicated across the data-parallel replicas: seeded per position in the EP group
    seeds = torch.randint(0, 1 << 62, (EP,), generator=ctx.shared_generator())
    g = torch.Generator(device=ctx.device).manual_seed(int(seeds[ctx.rank % EP]))
    w_expert = torch.randn(epr, h, h, generator=g, device=ctx.device, dtype=ctx.dtype) * h ** -0.5
    return x, topk_ids, topk_weights, w_expert


def solution(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
             w_expert: torch.Tensor) -> torch.Tensor:
    group = _ep_group()
    epr = w_expert.shape[0]
    tokens, hidden = x.shape
    k = topk_ids.shape[1]

    # dispatch inside the EP pair: rows sorted by expert (destination, then local expert), token order kept
    flat = topk_ids.flatten()
    order = torch.argsort(flat, stable=True)
    send_x = x.index_select(0, order // k)
    per_expert = torch.bincount(flat, minlength=EP * epr)
    from_each = torch.empty_like(per_expert)
    dist.all_to_all_single(from_each, per_expert, group=group)  # [j * epr + e]: rows from group rank j
    sizes = torch.cat([per_expert.view(EP, epr).sum(1), from_each]).tolist()  # one device sync
    send_splits, block_sizes = sizes[:EP], sizes[EP:]
    recv_splits = [sum(block_sizes[j * epr:(j + 1) * epr]) for j in range(EP)]
    recv = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(recv, send_x, output_split_sizes=recv_splits, input_split_sizes=send_splits, group=group)

    # experts: each runs once on its rows from both sources
    blocks = recv.split(block_sizes)
    done = [None] * (EP * epr)
    for e in range(epr):
        y = torch.cat([blocks[j * epr + e] for j in range(EP)]) @ w_expert[e]
        for j, part in enumerate(y.split([block_sizes[j * epr + e] for j in range(EP)])):
            done[j * epr + e] = part

    # combine inside the pair, back to (token, k-slot) order, gate-weighted sum
    back = x.new_empty(tokens * k, hidden)
    dist.all_to_all_single(back, torch.cat(done), output_split_sizes=send_splits, input_split_sizes=recv_splits,
                           group=group)
    rows = torch.empty_like(back).index_copy_(0, order, back)
    return torch.bmm(topk_weights.unsqueeze(1), rows.view(tokens, k, hidden)).squeeze(1)


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, h, k, epr = size["tokens_per_rank"], size["hidden"], size["topk"], size["experts_per_rank"]
    row = h * dtype.itemsize
    # Expected over uniform routing: half of a rank's t*k rows go to its EP partner and come back as results
    # (and as many of the partner's rows come in and go out); nothing crosses EP groups. Flops: the expert GEMM
    # on the t*k rows it holds and the weighted sum. Memory: its experts' weights, x, rows in and out, output.
    return Traffic(
        steps=2,  # dependent exchanges: the tokens to their experts, then the expert outputs back
        interconnect_bytes=2 * t * k * (EP - 1) / EP * row,
        flops=2 * t * k * h * h + 2 * t * k * h,
        hbm_bytes=epr * h * h * dtype.itemsize + (2 * t + 2 * t * k) * row,
    )


def oracle(inputs, size, world_size):
    out = []
    for r in range(world_size):
        x, ids, gates, _ = inputs[r]
        base = r - r % EP
        epr = inputs[r][3].shape[0]
        acc = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
        for e in range(EP * epr):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            weight = inputs[base + e // epr][3][e % epr].double()
            acc[tok] += gates[tok, slot].double().unsqueeze(-1) * (x[tok].double() @ weight)
        out.append(acc.to(x.dtype))
    return out
