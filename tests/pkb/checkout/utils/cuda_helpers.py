"""What solutions import from the checkout (PKB's hold its load_inline wrapper)."""


def summed(x):
    import torch.distributed as dist

    out = x.clone()
    dist.all_reduce(out)
    return out


def compile_cuda_extension(name, cuda_src, extra_cuda_cflags=None):
    """PKB's helper builds CUDA with load_inline. CI's torch has no CUDA, so this stand-in builds the
    same way from C++ (the source must declare its functions with PYBIND11_MODULE). Without the
    torch/extension.h that load_inline would put first: the test solutions include ATen and
    pybind's casters alone, which compile in 11 s instead of 28 s on 2 cores."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(name=name, cpp_sources=cuda_src, extra_cflags=["-O1", *(extra_cuda_cflags or [])],
                       verbose=False, no_implicit_headers=True)
