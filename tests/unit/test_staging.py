"""Whether a candidate's staged input buffers fit the reference's (pkb_ray.evaluate.staging): the trusted
side writes each round's inputs only into tensors that do."""

from pkb_ray.evaluate.staging import Copies, misfit

F32 = 7  # a dtype code (the value does not matter here: both sides must agree on it)


def entry(address: int, shape: tuple[int, ...], code: int = F32) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    numel = step
    return [address, numel, code, len(shape), *shape, *strides]


REF = [[entry(0x1000, (4, 8)), entry(0x2000, (16,))], [entry(0x3000, (4, 8)), entry(0x4000, (16,))]]
DEVICE = [[True, True], [True, True]]  # the clean rank says every reference tensor is in device memory


def cand(offset: int = 0x10000, shapes=((4, 8), (16,))) -> list:
    return [[entry(offset + 0x100 * (2 * n + i), shape) for i, shape in enumerate(shapes)] for n in range(2)]


def test_the_candidates_own_buffers_fit_wherever_they_lie():
    assert misfit(REF, None, cand(), None) == ""


def test_a_count_a_shape_or_a_dtype_that_differs_does_not():
    assert "1 calls' inputs staged, expected 2" in misfit(REF, None, cand()[:1], None)
    assert "call 0: 1 input tensors staged" in misfit(REF, None, [c[:1] for c in cand()], None)
    assert "input tensor 0" in misfit(REF, None, cand(shapes=((8, 4), (16,))), None)
    bad = cand()
    bad[1][1] = entry(bad[1][1][0], (16,), code=F32 + 1)
    assert "call 1, input tensor 1" in misfit(REF, None, bad, None)
    assert "staged as" in misfit(REF, None, [["garbage", 1], [1]], None)


def test_host_and_device_memory_must_match_the_reference():
    candidate = cand(offset=0x90000)
    theirs = {str(0x90000): [0x180, "bb"]}  # holds only its first call's tensors
    assert "staged outside every device allocation its rank exported, expected device" in misfit(REF, DEVICE, candidate, theirs)
    assert "staged in device memory, expected host" in misfit(REF, None, candidate, theirs)
    everything = {str(0x90000): [0x10000, "bb"]}
    assert misfit(REF, DEVICE, candidate, everything) == ""


def test_copies_are_the_host_tensors_of_both_sides_in_order():
    copies = Copies.of(REF, None, cand())
    assert copies.reference == [e for call in REF for e in call]
    assert copies.candidate == [e for call in cand() for e in call]
    assert Copies.of(REF, DEVICE, cand()) == Copies([], [], [])
    assert Copies.of(REF, None, cand()).indexes == [0, 1, 2, 3]
