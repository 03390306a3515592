# a C++ error in its extension: compile_error in the compile stage, before any rank starts
from utils.cuda_helpers import compile_cuda_extension

SRC = """
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>
at::Tensor broken(at::Tensor x) { return x.no_such_method(); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("broken", &broken); }
"""
_ext = compile_cuda_extension(name="pkb_test_broken", cuda_src=SRC)


def solution(x, layer, group):
    return _ext.broken(x)
