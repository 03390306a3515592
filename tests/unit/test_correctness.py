import math

import torch

from pkb_ray.measure.correctness import (aliases, compare, entry_span, from_layout, layout, layout_aliases, poison_like, rebuild,
                                  structure, to_cpu)


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


def test_layout_aliases_find_what_each_call_compared_alone_finds():
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
    def found(outs):  # from the layouts a rank reports, as the parent sees them
        return layout_aliases([(layout(out), layout(inp)) for out, inp in zip(outs, inputs)])

    for name, outs in cases.items():
        alone = [aliases(out, inputs[n], outs[:n]) for n, out in enumerate(outs)]
        assert found(outs) == alone, name
    assert found(cases["a cached second output"])[1] == ["output 1 shares memory with an earlier call's output"]
    assert found(cases["honest"]) == [[]] * 6


def test_tensors_rebuilt_from_the_bytes_the_trusted_side_read():
    import ctypes

    def read(t):  # what the parent reads at an entry (here from this process's own memory)
        start, size = entry_span(layout(t)[0])
        return torch.frombuffer(bytearray(ctypes.string_at(start, size)), dtype=torch.uint8)

    x = torch.arange(12.0).reshape(3, 4)
    for t in (x, x.t(), x[:, 1:3]):  # contiguous, transposed, a strided slice
        assert torch.equal(from_layout(read(t), layout(t)[0], t.contiguous()), t)
    value, why = rebuild((x, 3, [x.t()]), [read(x), read(x.t())], [*layout(x), *layout(x.t())])
    assert why == "" and value[1] == 3 and torch.equal(value[2][0], x.t())
    # what does not fit the reference's value is said, never guessed
    assert "expected 12" in from_layout(read(x[:2]), layout(x[:2])[0], x)
    wide = from_layout(read(x.double()), layout(x.double())[0], x)  # another dtype: the comparison says so
    assert wide.dtype == torch.float64 and "dtype torch.float64" in str(compare(x, wide, 0, 0))
    assert "1 tensors, expected 2" in rebuild((x, x), [read(x)], layout(x))[1]
