"""Llama-style SwiGLU MLP under tensor + sequence parallelism: all-gather, gate/up, SiLU*up, down, reduce-scatter.

Models: the MLP of Llama/Mistral/Qwen layers trained or served with tensor + sequence parallelism
(Megatron-LM ``--sequence-parallel --swiglu``, NeMo, TensorRT-LLM, torch async-TP): tokens arrive
sharded across ranks, are all-gathered, go through this rank's column shard of the merged gate/up
projection (vLLM MergedColumnParallelLinear layout) and its row shard of the down projection, and
the partial outputs are reduce-scattered back to token shards.

Contract: ``solution(x, w_gate_up, w_down)`` is called on every rank r. ``x`` is rank r's
``(tokens_per_rank, hidden)`` token shard (rows r * tokens_per_rank onward of the sequence);
``w_gate_up`` is rank r's ``(hidden, 2 * ffn_per_rank)`` shard, gate columns first then up columns;
``w_down`` is rank r's ``(ffn_per_rank, hidden)`` shard. With ``X = cat([x_0, ..., x_{W-1}])`` and
``g_j, u_j = (X @ w_gate_up_j).chunk(2, -1)``, every rank returns a new ``(tokens_per_rank, hidden)`` tensor of
x's dtype: rows ``r * tokens_per_rank`` to ``(r + 1) * tokens_per_rank`` of
``sum_j (silu(g_j) * u_j) @ w_down_j``. Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single, reduce_scatter_single

META = dict(
    id="tp_swiglu_mlp_sp",
    name="Tensor + sequence-parallel SwiGLU MLP",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="two fp32 GEMMs and a W-term sum reassociate: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: gate/up, silu*up, W partials and each reduction hop round"),
    },
    # tokens_per_rank: sequence shard per rank; hidden: model dim; ffn_per_rank: intermediate columns per rank
    # (Llama-70B 28672 / 8 = 3584).
    sizes={
        "small": dict(tokens_per_rank=8, hidden=64, ffn_per_rank=32),
        "default": dict(tokens_per_rank=1024, hidden=8192, ffn_per_rank=3584),
        "large": dict(tokens_per_rank=4096, hidden=8192, ffn_per_rank=7168),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    h, f = s["hidden"], s["ffn_per_rank"]
    x = ctx.randn(s["tokens_per_rank"], h)
    # weights scaled by 1/sqrt(fan_in) (down's fan-in is the full W * ffn_per_rank), so activations are O(1)
    w_gate_up = ctx.randn(h, 2 * f, dtype=torch.float32).mul_(h ** -0.5).to(ctx.dtype)
    w_down = ctx.randn(f, h, dtype=torch.float32).mul_((ctx.world_size * f) ** -0.5).to(ctx.dtype)
    return x, w_gate_up, w_down


def solution(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    full = x.new_empty(world * x.shape[0], x.shape[1])
    all_gather_single(full, x)
    gate, up = (full @ w_gate_up).chunk(2, dim=-1)
    partial = (F.silu(gate) * up) @ w_down
    out = partial.new_empty(x.shape[0], partial.shape[1])
    reduce_scatter_single(out, partial, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, h, f = size["tokens_per_rank"], size["hidden"], size["ffn_per_rank"]
    m = world_size * t
    b = dtype.itemsize
    # All-gather receives W-1 token shards and the ring reduce-scatter sends W-1 partial shards; gate/up and down
    # GEMMs are 4 m h f + 2 m f h flops (elementwise work ignored); read x and the shards once, write the output.
    return Traffic(
        steps=2,  # dependent exchanges: the gathered tokens, then the partial outputs to their token shards
        interconnect_bytes=2 * (world_size - 1) * t * h * b,
        flops=6 * m * h * f,
        hbm_bytes=(t * h + 3 * h * f + t * h) * b,
    )


def oracle(inputs, size, world_size):
    x_full = torch.cat([a[0] for a in inputs]).double()
    total = 0
    for _, w_gate_up, w_down in inputs:
        gate, up = (x_full @ w_gate_up.double()).chunk(2, dim=-1)
        total = total + (F.silu(gate) * up) @ w_down.double()
    dtype = inputs[0][0].dtype
    return [chunk.to(dtype) for chunk in total.chunk(world_size)]
