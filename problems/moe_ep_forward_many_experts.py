"""Expert-parallel MoE layer forward with many experts (4 per rank): route, dispatch, SwiGLU experts, combine.

Models: the MoE block of fine-grained mixture-of-experts transformers (DeepSeek-V2/V3, Qwen-MoE,
Mixtral) under expert parallelism in training and serving (Megatron-LM, DeepSpeed-MoE, DeepEP,
vLLM/SGLang EP): a top-k softmax router, an all-to-all dispatch to the ranks owning the chosen
experts, each rank's experts applied to the tokens they received, and an all-to-all combine with
the renormalised gate weights.

Contract: ``solution(x, router_w, w_gate, w_up, w_down, topk)`` is called on every rank. ``x``
``(tokens, hidden)``: this rank's tokens. ``router_w`` ``(hidden, E)``, the same on every rank,
``E = 4 * W``; expert e lives on rank ``e // 4`` as local expert ``e % 4``. ``w_gate``, ``w_up``
``(4, hidden, ffn)`` and ``w_down`` ``(4, ffn, hidden)``: the weights of this rank's 4 experts.
Routing: ``logits = x.double() @ router_w.double()`` (float64, so that the choice is well
defined), ``ids`` = the ``topk`` largest logits of each token, gates = softmax of those ``topk``
logits (the top-k softmax probabilities renormalised to sum 1). Expert e on a row v:
``(silu(v @ w_gate[e]) * (v @ w_up[e])) @ w_down[e]``. Every rank returns a new
``(tokens, hidden)`` tensor in ``x``'s dtype: ``out[t] = sum_s gates[t, s] * expert_{ids[t, s]}(x[t])``.
Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

EXPERTS_PER_RANK = 4

META = dict(
    id="moe_ep_forward_many_experts",
    name="Expert-parallel MoE forward, 4 SwiGLU experts per rank",
    category="moe",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="three GEMMs over hidden/ffn and a k-term sum reassociate"),
        "bfloat16": dict(atol=3e-2, rtol=3e-2, reason="8-bit mantissa; GEMM outputs and activations rounded to bf16"),
    },
    # tokens_per_rank: tokens on each rank; hidden: model width; ffn: each expert's intermediate width;
    # topk: experts per token (at most 4 * W for every W: <= 8).
    sizes={
        "small": dict(tokens_per_rank=16, hidden=32, ffn=16, topk=2),
        "default": dict(tokens_per_rank=4096, hidden=4096, ffn=1536, topk=4),
        "large": dict(tokens_per_rank=8192, hidden=7168, ffn=2048, topk=8),
    },
)


def make_inputs(ctx: InputContext):
    s, w = ctx.size, ctx.world_size
    h, f, e = s["hidden"], s["ffn"], EXPERTS_PER_RANK
    router_w = torch.randn(h, e * w, generator=ctx.shared_generator()) * h ** -0.5
    x = ctx.randn(s["tokens_per_rank"], h)
    w_gate = ctx.randn(e, h, f) * h ** -0.5
    w_up = ctx.randn(e, h, f) * h ** -0.5
    w_down = ctx.randn(e, f, h) * f ** -0.5
    return x, router_w.to(ctx.device, ctx.dtype), w_gate, w_up, w_down, s["topk"]


def solution(x: torch.Tensor, router_w: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
             w_down: torch.Tensor, topk: int) -> torch.Tensor:
    w = dist.get_world_size()
    epr = w_gate.shape[0]
    tokens, hidden = x.shape
    top, ids = (x.double() @ router_w.double()).topk(topk, dim=-1)
    gates = torch.softmax(top, dim=-1).to(x.dtype)

    # dispatch: rows sorted by expert (destination rank, then local expert), token order kept
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    send_x = x.index_select(0, order // topk)
    per_expert = torch.bincount(flat, minlength=w * epr)
    from_each = torch.empty_like(per_expert)
    dist.all_to_all_single(from_each, per_expert)  # from_each[j * epr + e]: rows from rank j for local e
    sizes = torch.cat([per_expert.view(w, epr).sum(1), from_each]).tolist()  # one device sync
    send_splits, block_sizes = sizes[:w], sizes[w:]
    recv_splits = [sum(block_sizes[j * epr:(j + 1) * epr]) for j in range(w)]
    recv = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(recv, send_x, output_split_sizes=recv_splits, input_split_sizes=send_splits)

    # experts: received blocks are (source, local expert)-major; each expert runs on its blocks together
    blocks = recv.split(block_sizes)
    done = [None] * (w * epr)
    for e in range(epr):
        v = torch.cat([blocks[j * epr + e] for j in range(w)])
        y = (F.silu(v @ w_gate[e]) * (v @ w_up[e])) @ w_down[e]
        for j, part in enumerate(y.split([block_sizes[j * epr + e] for j in range(w)])):
            done[j * epr + e] = part

    # combine: send results back in the layout they came in, restore (token, k-slot) order, weight and sum
    back = x.new_empty(tokens * topk, hidden)
    dist.all_to_all_single(back, torch.cat(done), output_split_sizes=send_splits, input_split_sizes=recv_splits)
    rows = torch.empty_like(back).index_copy_(0, order, back)
    return torch.bmm(gates.unsqueeze(1), rows.view(tokens, topk, hidden)).squeeze(1)


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, t, k, h, f = world_size, size["tokens_per_rank"], size["topk"], size["hidden"], size["ffn"]
    e = EXPERTS_PER_RANK
    row = h * dtype.itemsize
    # Expected over a near-uniform router: a rank sends t*k*(W-1)/W rows out for dispatch and as many expert
    # results back for combine (and receives as much). Flops: router (t x hidden x 4W), three expert GEMMs on
    # the t*k rows it holds, the weighted sum. Memory: its experts' weights once, x, the t*k rows into and out
    # of the experts, the output.
    return Traffic(
        steps=2,  # dependent exchanges: the tokens to their experts, then the expert outputs back
        interconnect_bytes=2 * t * k * (w - 1) / w * row,
        flops=2 * t * h * e * w + t * k * 3 * 2 * h * f + 2 * t * k * h,
        hbm_bytes=3 * e * h * f * dtype.itemsize + (2 * t + 2 * t * k) * row,
    )


def oracle(inputs, size, world_size):
    epr = EXPERTS_PER_RANK
    topk = inputs[0][5]
    xs = torch.cat([args[0] for args in inputs]).double()
    top, ids = (xs @ inputs[0][1].double()).topk(topk, dim=-1)
    gates = torch.softmax(top, dim=-1)
    out = torch.zeros_like(xs)
    for g in range(epr * world_size):
        tok, slot = (ids == g).nonzero(as_tuple=True)
        _, _, w_gate, w_up, w_down, _ = inputs[g // epr]
        wg, wu, wd = (m[g % epr].double() for m in (w_gate, w_up, w_down))
        v = xs[tok]
        y = (F.silu(v @ wg) * (v @ wu)) @ wd
        out[tok] += gates[tok, slot].unsqueeze(-1) * y
    return [part.to(inputs[0][0].dtype) for part in out.chunk(world_size)]
