"""Column-parallel linear with a bias shard, then gather_output: all-gather along the feature dimension.

Models: Megatron-LM ``ColumnParallelLinear(gather_output=True)`` and vLLM's vocab-parallel LM head
(``tensor_model_parallel_all_gather`` of the logits): the input is replicated, each rank computes
its slice of the output features, and every rank ends with the full feature dimension.

Contract: ``solution(x, w, b)`` is called on every rank r. ``x`` is the ``(tokens, hidden)`` input, identical
on every rank; ``w`` is rank r's ``(hidden, n_per_rank)`` weight shard and ``b`` its ``(n_per_rank,)`` bias
shard. Every rank returns the same new ``(tokens, W * n_per_rank)`` tensor of x's dtype: columns
``j * n_per_rank`` to ``(j + 1) * n_per_rank`` hold ``x @ w_j + b_j``. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="column_parallel_linear_gather",
    name="Column-parallel linear + bias, gather output",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4,
                        reason="fp32 accumulation over hidden terms in another order: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2,
                         reason="fp32-accumulated GEMM + bias rounded once to bf16 (8-bit mantissa): ~1 ulp"),
    },
    # tokens: GEMM rows; hidden: model dim (GEMM k); n_per_rank: output features per rank (large: a Llama-3
    # vocab-parallel LM head, 128256 / 8 = 16032).
    sizes={
        "small": dict(tokens=16, hidden=64, n_per_rank=24),
        "default": dict(tokens=2048, hidden=4096, n_per_rank=4096),
        "large": dict(tokens=8192, hidden=8192, n_per_rank=16032),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    g = ctx.shared_generator()  # the replicated activation: the same on every rank
    x = torch.randn(s["tokens"], s["hidden"], generator=g).to(ctx.device, ctx.dtype)
    w = ctx.randn(s["hidden"], s["n_per_rank"], dtype=torch.float32).mul_(s["hidden"] ** -0.5).to(ctx.dtype)
    b = ctx.randn(s["n_per_rank"])
    return x, w, b


def solution(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    y = torch.addmm(b, x, w)
    gathered = y.new_empty(world * y.shape[0], y.shape[1])
    all_gather_single(gathered, y)
    # (W * tokens, n) rank-major -> (tokens, W * n): shard j becomes column block j
    return gathered.view(world, y.shape[0], y.shape[1]).permute(1, 0, 2).reshape(y.shape[0], world * y.shape[1])


def speed_of_light(size, world_size, dtype) -> Traffic:
    m, k, n = size["tokens"], size["hidden"], size["n_per_rank"]
    b = dtype.itemsize
    # Receive the W-1 other (m x n) output shards; one (m x k) @ (k x n) GEMM plus the bias; read x, w, b once,
    # write the (m x W n) output once.
    return Traffic(
        interconnect_bytes=(world_size - 1) * m * n * b,
        flops=2 * m * k * n + m * n,
        hbm_bytes=(m * k + k * n + n + world_size * m * n) * b,
    )


def oracle(inputs, size, world_size):
    x = inputs[0][0].double()
    w_full = torch.cat([w for _, w, _ in inputs], dim=1).double()
    b_full = torch.cat([b for _, _, b in inputs]).double()
    out = (x @ w_full + b_full).to(inputs[0][0].dtype)
    return [out.clone() for _ in range(world_size)]
