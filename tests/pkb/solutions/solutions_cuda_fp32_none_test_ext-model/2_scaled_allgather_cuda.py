# right, with a torch extension named at run time: only the rank can build it
import torch
import torch.distributed as dist
from utils.cuda_helpers import compile_cuda_extension

SRC = """
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>
at::Tensor scaled(at::Tensor x, at::Tensor s) { return x * s; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scaled", &scaled); }
"""


def solution(x, scale):
    ext = compile_cuda_extension(name=f"pkb_test_scaled_w{dist.get_world_size()}", cuda_src=SRC)
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, ext.scaled(x, torch.as_tensor(scale, dtype=x.dtype)))
    return torch.cat(parts)
