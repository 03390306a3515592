"""Torch extensions of PKB-format samples: what the compile stage and the rank agree on (no builds
here; tests/test_pkb.py builds and imports real ones through a sweep)."""

import pytest

from pkb_ray.runner import extensions


def test_builder_calls_are_found_wherever_they_are():
    assert extensions.builds_inline("from utils.cuda_helpers import compile_cuda_extension\n"
                                    "def f():\n    return compile_cuda_extension(name='a', cuda_src=S)\n")
    assert extensions.builds_inline("import torch.utils.cpp_extension as ce\nm = ce.load_inline('a', '')\n")
    assert not extensions.builds_inline("import torch\ndef solution(x):\n    return x\n")
    assert not extensions.builds_inline("def broken(:\n")


@pytest.mark.parametrize("arch, expected", [("sm_90a", "9.0"), ("sm_80", "8.0"), ("sm_100a", "10.0"), ("9.0", "9.0")])
def test_the_arch_list_is_what_torch_picks_on_that_gpu(arch, expected):
    assert extensions.arch_list(arch) == expected


def test_a_call_is_keyed_by_everything_its_build_depends_on(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    base = extensions.call_key("ext", {"cpp_sources": "", "cuda_sources": "A", "extra_cuda_cflags": ["-O3"]})
    assert base == extensions.call_key("ext", {"cpp_sources": "", "cuda_sources": "A", "extra_cuda_cflags": ["-O3"],
                                               "verbose": True, "build_directory": "/elsewhere"})
    assert base != extensions.call_key("ext", {"cpp_sources": "", "cuda_sources": "B", "extra_cuda_cflags": ["-O3"]})
    assert base != extensions.call_key("ext2", {"cpp_sources": "", "cuda_sources": "A", "extra_cuda_cflags": ["-O3"]})
    assert base != extensions.call_key("ext", {"cpp_sources": "", "cuda_sources": "A", "extra_cuda_cflags": ["-O2"]})
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert base != extensions.call_key("ext", {"cpp_sources": "", "cuda_sources": "A", "extra_cuda_cflags": ["-O3"]})


def test_each_sample_has_a_folder_of_its_own(tmp_path):
    a, b = extensions.sample_folder(tmp_path, "x = 1"), extensions.sample_folder(tmp_path, "x = 2")
    assert a != b and a.parent == b.parent == tmp_path
    assert a == extensions.sample_folder(tmp_path, "x = 1")
