# right, with a torch extension whose arguments are known at import: the compile stage builds it
import torch
import torch.distributed as dist
from utils.cuda_helpers import compile_cuda_extension

SRC = """
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>
at::Tensor copy(at::Tensor x) { return x.clone(); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("copy", &copy); }
"""
_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        _ext = compile_cuda_extension(name="pkb_test_copy", cuda_src=SRC)
    return _ext


def solution(tensor):
    out = _get_ext().copy(tensor)
    dist.all_reduce(out)
    return out
