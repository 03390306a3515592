import math

import torch

from pkb_ray.correctness import aliases, compare, fingerprint, poison_like, structure, to_cpu


def test_equal_tensors_agree():
    x = torch.randn(10)
    assert compare(x, x.clone(), 0.0, 0.0) is None


def test_values_outside_tolerance_are_reported_with_location():
    e = torch.zeros(2, 3)
    a = e.clone()
    a[1, 2] = 0.5
    m = compare(e, a, atol=0.1, rtol=0.0)
    assert m and "1 of 6 elements differ" in m.message and "(1, 2)" in m.message
    assert math.isclose(m.max_abs_error, 0.5)
    assert compare(e, a, atol=0.6, rtol=0.0) is None


def test_rtol_scales_with_expected_magnitude():
    e = torch.full((4,), 100.0)
    assert compare(e, e + 0.5, atol=0.0, rtol=0.01) is None
    assert compare(e, e + 2.0, atol=0.0, rtol=0.01) is not None


def test_nan_where_a_number_is_expected_is_an_unwritten_element():
    e = torch.ones(4)
    a = e.clone()
    a[3] = float("nan")
    m = compare(e, a, atol=1e9, rtol=1e9)
    assert m and "unwritten" in m.message


def test_structure_shape_and_dtype_must_match():
    x = torch.ones(3)
    assert "dtype" in compare(x, x.double(), 1, 1).message
    assert "shape" in compare(x, torch.ones(4), 1, 1).message
    assert "expected a tensor" in compare(x, [x], 1, 1).message
    assert "2 items" in compare((x, x), (x,), 1, 1).message
    assert compare((x, [x, 3]), (x, [x, 3]), 0, 0) is None
    assert compare((x, [x, 3]), (x, [x, 4]), 0, 0).where == "output[1][1]"


def test_poison_matches_expected_outputs():
    bufs = poison_like(structure((torch.ones(3), [torch.ones(2, dtype=torch.int32)])), torch.device("cpu"))
    assert torch.isnan(bufs[0]).all()
    assert bufs[1].dtype == torch.int32 and (bufs[1] == 0x5A5A5A5A).all()


def test_fingerprint_is_exact_and_sees_one_changed_element():
    x = torch.randn(1001, dtype=torch.bfloat16)
    assert fingerprint(x) == fingerprint(x.clone())
    y = x.clone()
    y[500] += 1
    assert fingerprint(x) != fingerprint(y)
    assert fingerprint((x, torch.arange(3))) == fingerprint((x.clone(), torch.arange(3)))
    assert fingerprint(x.float()) != fingerprint(x)  # dtype is part of it


def test_aliasing_is_found_by_storage_on_cpu_as_on_gpu():
    x, y = torch.zeros(8), torch.zeros(8)
    assert aliases(y, (x,)) == []
    assert aliases(x[2:], (x,)) == ["output 0 shares memory with an input"]
    assert aliases((y,), (x,), earlier=[(y,)]) == ["output 0 shares memory with an earlier call's output"]


def test_to_cpu_copies_so_later_writes_do_not_leak():
    x = torch.zeros(2)
    saved = to_cpu((x, [x]))
    x += 1
    assert saved[0].sum() == 0 and saved[1][0].sum() == 0


def test_region_aliases_find_what_each_call_compared_alone_finds():
    from pkb_ray.correctness import region_aliases

    base = torch.zeros(64)
    inputs = [(base[8 * n: 8 * n + 8],) for n in range(6)]  # all views of one storage
    fresh = [(torch.ones(4), torch.ones(2)) for _ in range(6)]
    cached = torch.ones(3)
    cases = {
        "honest": fresh,
        "returns its input": [(inp[0],) for inp in inputs],
        "a cached second output": [(torch.ones(4), cached) for _ in range(6)],
        "same tensor twice in one call": [(t, t) for t in (torch.ones(2) for _ in range(6))],
        "only the last call reuses": fresh[:5] + [(torch.ones(4), fresh[2][0])],
    }
    for name, outs in cases.items():
        alone = sorted({a for n, out in enumerate(outs) for a in aliases(out, inputs[n], outs[:n])})
        assert region_aliases(outs, inputs) == alone, name
    assert region_aliases(cases["a cached second output"], inputs) == ["output 1 shares memory with an earlier call's output"]
    assert region_aliases(cases["honest"], inputs) == []
