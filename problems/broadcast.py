"""Broadcast of one tensor from a root rank to every rank.

Models: distributing initial model weights from rank 0 at the start of DDP / FSDP training
(``sync_module_states``), and sending a pipeline or tensor-parallel group the batch, the sampled
tokens or the config that one rank produced (Megatron-LM, vLLM). The root is drawn per seed.

Contract: ``solution(x, root)`` is called on every rank with that rank's ``x`` (same shape and
dtype on every rank) and the same ``root``. Only the root's ``x`` matters; the other ranks' values
are arbitrary and must be ignored. Every rank, the root included, returns a new tensor holding the
root's ``x``; no rank's ``x`` may be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="broadcast",
    name="Broadcast",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
        "bfloat16": dict(atol=0, rtol=0, reason="pure data movement: bit-exact"),
    },
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 27)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    root = int(torch.randint(0, ctx.world_size, (1,), generator=ctx.shared_generator()).item())
    return ctx.randn(ctx.size["numel"]), root


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    # Only the root's values are sent; the others receive into a fresh buffer.
    out = x.clone() if dist.get_rank() == root else torch.empty_like(x)
    dist.broadcast(out, src=root)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    nbytes = size["numel"] * dtype.itemsize
    # Pipelined: the root sends the buffer once and every other rank receives it once; write out (+ root reads x).
    return Traffic(
        interconnect_bytes=nbytes,
        flops=0.0,
        hbm_bytes=2 * nbytes,
    )


def oracle(inputs, size, world_size):
    root = inputs[0][1]
    return [inputs[root][0].clone() for _ in range(world_size)]
