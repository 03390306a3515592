"""Which sources get the torch.compile budget (pkb_ray.evaluate.deadlines.uses_torch_compile)."""

import pytest

from pkb_ray.evaluate.deadlines import uses_torch_compile


@pytest.mark.parametrize("source", [
    "f = torch.compile(g)",
    "@torch.compile\ndef f(x): ...",
    "@torch.compile(mode='max-autotune')\ndef f(x): ...",
    "import torch._dynamo\n",
    "from torch import compile as c\n",
    "from torch import nn, compile\n",
    "torch._inductor.config.freezing = True",
])
def test_sources_that_compile_get_the_budget(source):
    assert uses_torch_compile(source)


@pytest.mark.parametrize("source", [
    "out = x.clone()\ndist.all_reduce(out)",
    "code = compile(src, 'f', 'exec')",  # Python's own compile
    "torch.utils.cpp_extension.load_inline(name='compiled', cpp_sources=s)",
    "# torch.compiled kernels are faster",
])
def test_sources_that_do_not_compile_do_not(source):
    assert not uses_torch_compile(source)
