"""Expert-parallel MoE layer forward with fewer experts than ranks: each expert tensor-parallel over a pair.

Models: large-expert MoE models (Mixtral 8x7B/8x22B, Grok, DBRX) run on more GPUs than experts, with
expert tensor parallelism inside expert parallelism (Megatron-LM expert_tensor_parallel_size,
DeepSpeed-MoE expert slicing, vLLM/SGLang EP x TP): tokens go to their expert's group of ranks,
each rank holds a column-/row-parallel half of the expert's SwiGLU FFN, and the halves' partial
outputs are summed inside the group.

Contract: ``solution(x, router_w, w_gate, w_up, w_down, topk)`` is called on every rank (W even).
There are ``E = W // 2`` experts; expert g is sharded over ranks 2g and 2g+1. ``x``
``(tokens, hidden)``: this rank's tokens. ``router_w`` ``(hidden, E)``, the same on every rank.
Rank ``2g + i`` holds half i of expert g: ``w_gate``, ``w_up`` ``(hidden, ffn // 2)`` are columns
``[i * ffn // 2, (i + 1) * ffn // 2)`` of the expert's ``(hidden, ffn)`` gate and up projections,
``w_down`` ``(ffn // 2, hidden)`` the same rows of its ``(ffn, hidden)`` down projection. ``topk``
(``<= E``) experts per token. Routing: ``logits = x.double() @ router_w.double()`` (float64, so
that the choice is well defined), ``ids`` = the ``topk`` largest logits of each token, gates =
softmax of those ``topk`` logits. Expert g on a row v: ``(silu(v @ Wg) * (v @ Wu)) @ Wd`` with
its full (concatenated) weights. Every rank returns a new ``(tokens, hidden)`` tensor in ``x``'s
dtype: ``out[t] = sum_s gates[t, s] * expert_{ids[t, s]}(x[t])``. Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="moe_ep_forward_few_experts",
    name="Expert-parallel MoE forward, W/2 experts each tensor-parallel over 2 ranks",
    category="moe",
    world_sizes=dict(min=2, multiple_of=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="three GEMMs, a 2-way partial-sum all-reduce and a k-term sum"),
        "bfloat16": dict(atol=3e-2, rtol=3e-2, reason="8-bit mantissa; GEMM outputs and partial sums rounded to bf16"),
    },
    # tokens_per_rank: tokens on each rank; hidden: model width; ffn: each expert's full intermediate width
    # (even: two halves); topk: experts per token, capped at W // 2 (so W = 2 routes top-1 to the only expert).
    sizes={
        "small": dict(tokens_per_rank=16, hidden=32, ffn=32, topk=2),
        "default": dict(tokens_per_rank=4096, hidden=4096, ffn=14336, topk=2),
        "large": dict(tokens_per_rank=8192, hidden=6144, ffn=16384, topk=2),
    },
)

_PAIRS: dict[int, list] = {}  # world size -> the W/2 expert groups {2g, 2g+1}


def _pair_group():
    w = dist.get_world_size()
    if w not in _PAIRS:
        _PAIRS[w] = [dist.new_group([2 * g, 2 * g + 1]) for g in range(w // 2)]  # every rank, same order
    return _PAIRS[w][dist.get_rank() // 2]


def make_inputs(ctx: InputContext):
    s, w = ctx.size, ctx.world_size
    h, half = s["hidden"], s["ffn"] // 2
    router_w = torch.randn(h, w // 2, generator=ctx.shared_generator()) * h ** -0.5
    x = ctx.randn(s["tokens_per_rank"], h)
    w_gate = ctx.randn(h, half) * h ** -0.5
    w_up = ctx.randn(h, half) * h ** -0.5
    w_down = ctx.randn(half, h) * s["ffn"] ** -0.5
    return x, router_w.to(ctx.device, ctx.dtype), w_gate, w_up, w_down, min(s["topk"], w // 2)


def solution(x: torch.Tensor, router_w: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
             w_down: torch.Tensor, topk: int) -> torch.Tensor:
    w, rank = dist.get_world_size(), dist.get_rank()
    tokens, hidden = x.shape
    top, ids = (x.double() @ router_w.double()).topk(topk, dim=-1)
    gates = torch.softmax(top, dim=-1).to(x.dtype)

    # dispatch: rows sorted by expert (token order kept); each expert's rows go to both ranks of its pair
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    per_expert = torch.bincount(flat, minlength=w // 2)
    send_counts = per_expert.repeat_interleave(2)  # to rank d: the rows of expert d // 2
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sizes = torch.cat([per_expert, recv_counts]).tolist()  # one device sync
    mine, from_each = sizes[:w // 2], sizes[w // 2:]
    to_each = [n for n in mine for _ in range(2)]
    segments = (order // topk).split(mine)
    send = x.index_select(0, torch.cat([seg for seg in segments for _ in range(2)]))
    recv = x.new_empty(sum(from_each), hidden)
    dist.all_to_all_single(recv, send, output_split_sizes=from_each, input_split_sizes=to_each)

    # this rank's half of the expert (column-parallel gate/up, row-parallel down), partial sums added in the pair
    y = (F.silu(recv @ w_gate) * (recv @ w_up)) @ w_down
    dist.all_reduce(y, group=_pair_group())

    # combine: rank 2g returns the first ceil(n/2) of each source's n rows, rank 2g+1 the rest, so a source
    # receives each expert's rows back in the order it sent them
    first = rank % 2 == 0
    back_split = [n - n // 2 if first else n // 2 for n in from_each]
    parts = [blk[:n - n // 2] if first else blk[n - n // 2:] for blk, n in zip(y.split(from_each), from_each)]
    got_split = [n - n // 2 if i == 0 else n // 2 for n in mine for i in range(2)]
    back = x.new_empty(tokens * topk, hidden)
    dist.all_to_all_single(back, torch.cat(parts), output_split_sizes=got_split, input_split_sizes=back_split)
    rows = torch.empty_like(back).index_copy_(0, order, back)  # (token, k-slot) order
    return torch.bmm(gates.unsqueeze(1), rows.view(tokens, topk, hidden)).squeeze(1)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, t, h, f = world_size, size["tokens_per_rank"], size["hidden"], size["ffn"]
    k = min(size["topk"], w // 2)
    row = h * dtype.itemsize
    # Expected over a near-uniform router (2*t*k rows per expert pair): every row must reach both halves of its
    # expert (a rank takes in its pair's 2*t*k rows) and the two halves' partial results must meet (2*t*k rows per
    # rank, whether summed in the pair or at the source); the (W-1)/W cross-rank part of that. Flops: router,
    # this half's three GEMMs on 2*t*k rows, the weighted sum. Memory: this half's weights, x, rows in and out, output.
    return Traffic(
        steps=2,  # dependent exchanges: the tokens to their experts, then the expert outputs back
        interconnect_bytes=4 * t * k * (w - 1) / w * row,
        flops=2 * t * h * (w // 2) + 2 * t * k * 3 * h * f + 2 * t * k * h,
        hbm_bytes=3 * h * (f // 2) * dtype.itemsize + (2 * t + 4 * t * k) * row,
    )


def oracle(inputs, size, world_size):
    topk = inputs[0][5]
    xs = torch.cat([args[0] for args in inputs]).double()
    top, ids = (xs @ inputs[0][1].double()).topk(topk, dim=-1)
    gates = torch.softmax(top, dim=-1)
    out = torch.zeros_like(xs)
    for g in range(world_size // 2):
        a, b = inputs[2 * g], inputs[2 * g + 1]
        wg = torch.cat([a[2], b[2]], dim=1).double()
        wu = torch.cat([a[3], b[3]], dim=1).double()
        wd = torch.cat([a[4], b[4]], dim=0).double()
        tok, slot = (ids == g).nonzero(as_tuple=True)
        v = xs[tok]
        out[tok] += gates[tok, slot].unsqueeze(-1) * ((F.silu(v @ wg) * (v @ wu)) @ wd)
    return [part.to(inputs[0][0].dtype) for part in out.chunk(world_size)]
