"""Context-parallel causal attention with all-gathered K/V and zigzag load balancing (Llama 3 style).

Models: the context parallelism Meta used to train Llama 3 on long sequences (all-gather K and V, then
attention for the local queries), also Megatron-LM / TransformerEngine's all-gather CP and torch
``context_parallel``: the sequence is cut into 2W chunks and rank r holds chunks r and 2W-1-r, so that
every rank has the same amount of causal attention work (one early, cheap chunk and one late, costly one).

Contract: ``solution(q, k, v)`` is called on every rank r. Each of ``q``, ``k``, ``v`` has shape
``(2 * chunk, heads, head_dim)``: rows ``0 .. chunk - 1`` are chunk r of the sequence (global positions
``r * chunk`` onward) and rows ``chunk .. 2 * chunk - 1`` are chunk 2W-1-r (positions ``(2W-1-r) * chunk``
onward); the full sequence has ``2W * chunk`` tokens. Rank r returns a new ``(2 * chunk, heads, head_dim)``
tensor in the input dtype, rows in the same order as its q: for a query at global position p and head h,
``softmax(q . K[:p + 1, h] / sqrt(head_dim)) @ V[:p + 1, h]`` where K and V are the full sequence's keys
and values in global order (causal). Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="cp_allgather_kv_attention",
    name="Context-parallel causal attention: all-gather K/V, zigzag chunks (Llama 3)",
    category="sequence",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="blocked/online softmax reassociates the fp32 sums over keys"),
        "bfloat16": dict(atol=1e-2, rtol=2e-2,
                         reason="8-bit mantissa: bf16 output rounding and bf16 probabilities in fused kernels"),
    },
    # chunk: tokens per chunk (each rank holds 2 chunks; the sequence has 2W chunks); heads; head_dim.
    sizes={
        "small": dict(chunk=4, heads=2, head_dim=16),
        "default": dict(chunk=2048, heads=32, head_dim=128),
        "large": dict(chunk=8192, heads=32, head_dim=128),
    },
)

# Queries are drawn with std 2 (logits of std 2) so that the softmax is peaked as in trained models; with
# near-uniform attention over long sequences every output would be close to zero and check little.
_Q_STD = 2.0


def make_inputs(ctx: InputContext):
    s = ctx.size
    shape = (2 * s["chunk"], s["heads"], s["head_dim"])
    return ctx.randn(*shape).mul_(_Q_STD), ctx.randn(*shape), ctx.randn(*shape)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(0, 1).unsqueeze(0)  # (tokens, heads, dim) -> (1, heads, tokens, dim) view


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # imported here, not at the top: it imports torch._dynamo (1 s), and every process that loads
    # the problem set would pay it
    from torch.nn.attention.bias import causal_lower_right

    w, rank = dist.get_world_size(), dist.get_rank()
    tokens, heads, dim = q.shape
    c = tokens // 2
    # one all-gather of K and V interleaved per token: gathered[j] is rank j's (2 * chunk, 2, heads, dim)
    kv = torch.stack((k, v), dim=1)
    gathered = kv.new_empty(w * tokens, 2, heads, dim)
    all_gather_single(gathered, kv)
    # global chunk m sits in slot 0 of rank m (m < W) or slot 1 of rank 2W-1-m; only the chunks before and
    # including our later chunk 2W-1-r are ever looked at
    last = 2 * w - 1 - rank
    m = torch.arange(last + 1, device=q.device)
    slots = torch.where(m < w, 2 * m, 2 * (2 * w - 1 - m) + 1)
    kv_seq = gathered.view(2 * w, c, 2, heads, dim).index_select(0, slots)
    kv_seq = kv_seq.view((last + 1) * c, 2, heads, dim)
    out = torch.empty_like(q)
    for rows, m in ((slice(0, c), rank), (slice(c, tokens), last)):
        # queries of chunk m are positions m*c .. (m+1)*c - 1 and see keys 0 .. (m+1)*c - 1: causal with the
        # diagonal aligned to the bottom-right corner
        n = (m + 1) * c
        o = F.scaled_dot_product_attention(_heads_first(q[rows]), _heads_first(kv_seq[:n, 0]),
                                           _heads_first(kv_seq[:n, 1]), attn_mask=causal_lower_right(c, n))
        out[rows] = o[0].transpose(0, 1)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    w, c, h, d = world_size, size["chunk"], size["heads"], size["head_dim"]
    block = 2 * c * h * d * dtype.itemsize  # one of q, k, v, o on one rank
    # Receive the other ranks' K and V; causal attention for chunks r and 2W-1-r sees (r+1)*c and (2W-r)*c keys,
    # 2W+1 chunks of keys in all, whatever r (the point of the zigzag): QK^T and PV are 2*c*keys*d flops each per
    # head (minus the masked half of the diagonal blocks, ignored); q, the full K/V and the output read or
    # written once, the received K/V written once on arrival.
    return Traffic(
        interconnect_bytes=(w - 1) * 2 * block,
        flops=4 * c * (2 * w + 1) * c * d * h,
        hbm_bytes=(2 + 2 * w + 2 * (w - 1)) * block,
    )


def oracle(inputs, size, world_size):
    w, c = world_size, size["chunk"]
    # reassemble the sequence: chunk m is the first half of rank m's tensors (m < W) or the second half of rank
    # 2W-1-m's
    def full(i):
        chunks = [inputs[m][i][:c] if m < w else inputs[2 * w - 1 - m][i][c:] for m in range(2 * w)]
        return torch.cat(chunks).double()

    q, k, v = full(0), full(1), full(2)
    n = q.shape[0]
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    p = torch.softmax(scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")), dim=-1)
    out = torch.einsum("hqk,khd->qhd", p, v).to(inputs[0][0].dtype)
    return [torch.cat([out[r * c:(r + 1) * c], out[(2 * w - 1 - r) * c:(2 * w - r) * c]]) for r in range(w)]
