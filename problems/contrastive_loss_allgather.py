"""CLIP-style contrastive (InfoNCE) loss with all-gathered negatives: each rank's rows against the global batch.

Models: data-parallel contrastive image-text pretraining (CLIP, OpenCLIP with local_loss, ALIGN, and the
gathered-negatives losses of SimCLR/MoCo-style training): every rank all-gathers the normalised image
and text embeddings so that its rows see the whole global batch as negatives, then computes the
symmetric cross-entropy for its own rows.

Contract: ``solution(img, txt)`` is called on every rank with ``img`` and ``txt`` of shape
``(batch_per_rank, dim)``; row i of rank r is global pair ``g = r * batch_per_rank + i``. With ``I`` and
``T`` the row-wise L2-normalised embeddings of all ranks stacked in rank order and
``L = LOGIT_SCALE * I @ T.T`` (LOGIT_SCALE = 1 / 0.07), rank r returns a new float32 tensor of shape
``(1,)``: the mean over its rows g of ``(CE(L[g, :], g) + CE(L[:, g], g)) / 2``, where ``CE(v, g) =
logsumexp(v) - v[g]`` (image-to-text and text-to-image). Under bfloat16 the embeddings may be normalised
and multiplied in bf16; the loss itself is float32. Inputs must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

LOGIT_SCALE = 1 / 0.07  # CLIP's initial temperature

META = dict(
    id="contrastive_loss_allgather",
    name="Contrastive (CLIP) loss with all-gathered embeddings",
    category="retrieval",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="dot products and log-sum-exps over W * batch terms reassociate"),
        "bfloat16": dict(atol=1e-2, rtol=1e-2,
                         reason="bf16 embeddings and logits (8-bit mantissa), averaged over the rows in fp32"),
    },
    # batch_per_rank: image-text pairs per rank; dim: embedding width.
    sizes={
        "small": dict(batch_per_rank=4, dim=16),
        "default": dict(batch_per_rank=4096, dim=1024),
        "large": dict(batch_per_rank=8192, dim=1024),
    },
)


def make_inputs(ctx: InputContext):
    b, dim = ctx.size["batch_per_rank"], ctx.size["dim"]
    img = ctx.randn(b, dim)
    txt = img + ctx.randn(b, dim)  # matching pairs are correlated (cosine about 0.7), as after some training
    return img, txt


def solution(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    b, dim = img.shape
    local = torch.cat([F.normalize(img.float(), dim=1), F.normalize(txt.float(), dim=1)]).to(img.dtype)
    gathered = local.new_empty(world * 2 * b, dim)  # one collective for both: [img_r; txt_r] per rank
    all_gather_single(gathered, local)
    both = gathered.view(world, 2, b, dim)
    labels = torch.arange(rank * b, (rank + 1) * b, device=img.device)
    img_to_txt = (local[:b] @ both[:, 1].reshape(world * b, dim).T).float() * LOGIT_SCALE
    txt_to_img = (local[b:] @ both[:, 0].reshape(world * b, dim).T).float() * LOGIT_SCALE
    loss = (F.cross_entropy(img_to_txt, labels) + F.cross_entropy(txt_to_img, labels)) / 2
    return loss.reshape(1)


def speed_of_light(size, world_size, dtype) -> Traffic:
    b, dim = size["batch_per_rank"], size["dim"]
    emb = b * dim * dtype.itemsize
    # All-gather of both embeddings: W-1 remote blocks of each. Two (b x W*b x dim) GEMMs. A fused kernel
    # need not store the logits: read all gathered embeddings once.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) * emb,
        flops=2 * 2.0 * b * world_size * b * dim,
        hbm_bytes=2 * world_size * emb,
    )


def oracle(inputs, size, world_size):
    img = F.normalize(torch.cat([args[0] for args in inputs]).double(), dim=1)
    txt = F.normalize(torch.cat([args[1] for args in inputs]).double(), dim=1)
    logits = LOGIT_SCALE * img @ txt.T
    b = size["batch_per_rank"]
    out = []
    for r in range(world_size):
        g = torch.arange(r * b, (r + 1) * b)
        i2t = torch.logsumexp(logits[g], dim=1) - logits[g, g]
        t2i = torch.logsumexp(logits[:, g], dim=0) - logits[g, g]
        out.append(((i2t + t2i) / 2).mean().reshape(1).float())
    return out
