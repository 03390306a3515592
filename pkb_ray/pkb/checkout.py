"""A ParallelKernelBench checkout: its reference files, named stably, and what they depend on.

PKB numbers its problems ``reference/<N>_<name>.py`` and keys its input builder by N, but the
numbers have moved between versions (PKB.md: 54 of 87 historical outputs point at another problem
by number). pkb_ray therefore names a PKB problem ``pkb_<name>`` (lower case) and keeps N only to
call PKB's builder.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

REFERENCE = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.py$")
BUILDER = Path("utils") / "input_output_tensors.py"
PREFIX = "pkb_"

# PKB's problems by name, in the 9 groups of its paper's taxonomy (data about PKB, not its code);
# a name not listed is category "pkb"
CATEGORIES = {
    "collective": "allreduce allgather broadcast reduce scatter gather reducescatter alltoall",
    "gemm": "allgather_gemm_at allgather_gemm gemm_allreduce gemm_allgather combined_sharded_gemms "
            "gemm_reducescatter gemv_decode",
    "norm": "layernorm_backward embedding_lookup rope_allgather tp_rms_norm reducescatter_fused_rmsnorm",
    "low_precision": "blocked_fp8_quantize blocked_fp8_dequantize quantized_grad_allreduce "
                     "fp8_reduce_scatter_grads fp8_allgather_params",
    "vocab": "clip_grad_norm_no_ep clip_grad_norm_ep grad_acc_loss load_balancing_loss_fn importance_sampling_loss "
             "openclip_contrastive_loss vocab_parallel_cross_entropy_loss vocab_parallel_log_prob_topk "
             "vocab_parallel_log_prob_topk_chunked vocab_parallel_log_prob_topk_chunked_backward",
    "moe": "moe_token_preprocess moe_all2all_primitive moe_pre_all2all moe_post_all2all "
           "moe_epgroupgemm_lora_backward fused_moe_fwd fused_moe_fwd_lora moe_ep_balanced moe_ep_wide moe_ep_narrow",
    "sequence": "ulysses_all_to_all_tensor_primitive ulysses_all_gather_into_tensor_primitive "
                "ulysses_all_gather_variable_primitive ulysses_gather_seq_scatter_heads "
                "ulysses_gather_heads_scatter_seq ulysses_gather_seq_scatter_heads_qkv ulysses_attention_e2e "
                "ring_attention ring_attention_tp ring_attention_pp ring_attention_backward_dp "
                "hyena_conv1d_boundary_exchange hyena_forward_cp fla_kimi_delta_attention_cp_tp "
                "fla_gated_deltanet_cp magi1_cso_async_attention",
    "science": "physicsnemo_distributed_rfft physicsnemo_distributed_irfft gsplat_3d_gaussian_splatting "
               "torchharmonics_spherical_convolution gnn_neighbor_sampling gnn_feature_exchange_all2all "
               "gnn_feature_exchange_all2all_backward gnn_sparse_embedding_all2all gnn_sparse_feature_fetch_projection "
               "gnn_negative_scoring torchrec_kjt_all2all opensora_conv3d_allreduce magi1_tile_parallel_vae_decode "
               "dinov2_distributed_knn dinov2_distributed_sinkhorn_knopp sam3_allgather_iou_suppression "
               "distributed_sample_sort conv2d_boundary_exchange",
    "training": "ddp zero1_optimizer_shard zero2_optimizer_shard_grad fused_adam_grad_unshard_allgather "
                "fsdp_step_e2e fsdp_and_tp deepmd_kalman_filter_optimizer tp_muon_orthogonalization",
}
CATEGORY_OF = {name: cat for cat, names in CATEGORIES.items() for name in names.split()}

# where W=2 runs but the pattern the problem is about collapses (one rank per group): PKB.md 1.7
MIN_WORLD_SIZE = {"fsdp_and_tp": 4, "moe_ep_narrow": 4, "ring_attention_tp": 4, "ring_attention_pp": 4,
                  "ring_attention_backward_dp": 4, "torchharmonics_spherical_convolution": 4}


class CheckoutError(ValueError):
    """Not a usable PKB checkout; the message names the path."""


@dataclass(frozen=True)
class Reference:
    number: int
    name: str  # as in the file name, e.g. allgather_gemm_AT
    path: Path

    @property
    def key(self) -> str:
        """The stable lower-case name that samples are matched by."""
        return self.name.lower()

    @property
    def problem_id(self) -> str:
        return PREFIX + self.key

    @property
    def category(self) -> str:
        return CATEGORY_OF.get(self.key, "pkb")


def references(root: str | Path) -> list[Reference]:
    """Every ``reference/<N>_<name>.py`` of the checkout at ``root``, by number."""
    root = Path(root).expanduser().resolve()
    folder = root / "reference"
    if not folder.is_dir() or not (root / BUILDER).is_file():
        raise CheckoutError(f"pkb.root={root}: not a ParallelKernelBench checkout (needs reference/ and {BUILDER})")
    found = []
    for path in sorted(folder.glob("*.py")):
        m = REFERENCE.match(path.name)
        if m:
            found.append(Reference(int(m.group(1)), m.group(2), path))
    if not found:
        raise CheckoutError(f"pkb.root={root}: no reference/<N>_<name>.py files")
    seen: dict[str, Reference] = {}
    for ref in found:
        if ref.key in seen:
            raise CheckoutError(f"{ref.path}: name {ref.key!r} also used by {seen[ref.key].path.name}")
        seen[ref.key] = ref
    return sorted(found, key=lambda r: r.number)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
