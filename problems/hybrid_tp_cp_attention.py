"""Attention under tensor x context parallelism: heads split over a TP pair, K/V all-gathered over the CP group.

Models: long-context training and serving that combine tensor parallelism with context parallelism
(Megatron-LM ``--tensor-model-parallel-size`` with ``--context-parallel-size``, NeMo, Llama 3's 4D
parallelism, TorchTitan): the attention heads are split over the TP ranks, the sequence over the CP ranks,
and each rank gathers the keys and values of its heads from the ranks that share its head group.

Contract: W = 2 * cp ranks; rank ``cp_idx * 2 + tp_idx`` holds sequence slice cp_idx (tokens
``cp_idx * seq_per_rank`` onward of ``cp * seq_per_rank``) for head group tp_idx (heads
``tp_idx * heads_per_tp`` onward of ``2 * heads_per_tp``). ``solution(q, k, v)`` is called on every rank;
each of ``q``, ``k``, ``v`` has shape ``(seq_per_rank, heads_per_tp, head_dim)``. Every rank returns a new
``(seq_per_rank, heads_per_tp, head_dim)`` tensor in the input dtype: for each of its tokens t and local head
h, ``softmax(q[t, h] . K[:, h] / sqrt(head_dim)) @ V[:, h]`` (non-causal) over the keys K and values V of the
full sequence for its head group (the k, v of the ranks with the same tp_idx, in cp_idx order). Inputs must
not be modified. With W = 2 there is one CP rank and the attention is local.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

_TP = 2

META = dict(
    id="hybrid_tp_cp_attention",
    name="TP x CP attention: all-gather K/V inside the context-parallel group",
    category="sequence",
    world_sizes=dict(min=2, multiple_of=_TP),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="blocked/online softmax reassociates the fp32 sums over keys"),
        "bfloat16": dict(atol=1e-2, rtol=2e-2,
                         reason="8-bit mantissa: bf16 output rounding and bf16 probabilities in fused kernels"),
    },
    # seq_per_rank: tokens per CP rank (cp * seq_per_rank in the sequence); heads_per_tp: heads of each TP rank
    # (2 * heads_per_tp in all); head_dim: per-head width.
    sizes={
        "small": dict(seq_per_rank=8, heads_per_tp=2, head_dim=16),
        "default": dict(seq_per_rank=4096, heads_per_tp=16, head_dim=128),
        "large": dict(seq_per_rank=16384, heads_per_tp=16, head_dim=128),
    },
)

# Queries are drawn with std 2 (logits of std 2) so that the softmax is peaked as in trained models; with
# near-uniform attention over long sequences every output would be close to zero and check little.
_Q_STD = 2.0

_CP_GROUPS: dict[int, list] = {}  # world size -> the CP group of each tp_idx


def _cp_group():
    w = dist.get_world_size()
    if w not in _CP_GROUPS:
        # every rank creates every group, in the same order
        _CP_GROUPS[w] = [dist.new_group([c * _TP + t for c in range(w // _TP)]) for t in range(_TP)]
    return _CP_GROUPS[w][dist.get_rank() % _TP]


def make_inputs(ctx: InputContext):
    s = ctx.size
    shape = (s["seq_per_rank"], s["heads_per_tp"], s["head_dim"])
    return ctx.randn(*shape).mul_(_Q_STD), ctx.randn(*shape), ctx.randn(*shape)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(0, 1).unsqueeze(0)  # (tokens, heads, dim) -> (1, heads, tokens, dim) view


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    group = _cp_group()
    cp = dist.get_world_size() // _TP
    seq, heads, dim = q.shape
    # one all-gather of K and V interleaved per token: rows of rank cp_idx land at cp_idx * seq
    kv = torch.stack((k, v), dim=1)
    gathered = kv.new_empty(cp * seq, 2, heads, dim)
    all_gather_single(gathered, kv, group=group)
    o = F.scaled_dot_product_attention(_heads_first(q), _heads_first(gathered[:, 0]), _heads_first(gathered[:, 1]))
    return o[0].transpose(0, 1).contiguous()


def speed_of_light(size, world_size, dtype) -> Traffic:
    cp, s, h, d = world_size // _TP, size["seq_per_rank"], size["heads_per_tp"], size["head_dim"]
    block = s * h * d * dtype.itemsize  # one of q, k, v, o on one rank
    # Receive the K and V of the cp-1 other ranks of the CP group; QK^T and PV over cp * s keys are
    # 2 * s * (cp * s) * d flops each per head; q, the full K/V and the output read or written once, the
    # received K/V written once on arrival.
    return Traffic(
        interconnect_bytes=(cp - 1) * 2 * block,
        flops=4 * s * (cp * s) * d * h,
        hbm_bytes=(2 + 2 * cp + 2 * (cp - 1)) * block,
    )


def oracle(inputs, size, world_size):
    outs = []
    for rank, (q, _, _) in enumerate(inputs):
        peers = [inputs[c * _TP + rank % _TP] for c in range(world_size // _TP)]
        k, v = (torch.cat([args[i] for args in peers]).double() for i in (1, 2))
        scores = torch.einsum("qhd,khd->hqk", q.double(), k) / q.shape[-1] ** 0.5
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v).to(q.dtype))
    return outs
