"""The hand-over format between rank processes: what a writer puts in, a reader gets out, and a
hostile writer's file is an error, never a crash or a hang of the (clean) reader."""

import hashlib
import os

import pytest
import torch

from pkb_ray.measure.correctness import compare
from pkb_ray.runner import tensor_io
from pkb_ray.runner.tensor_io import DigestMismatch, TensorFileError

VALUE = {"outputs": (torch.randn(3, 5), torch.arange(7, dtype=torch.int16), [torch.zeros(0), None, 3, 2.5, "x"],
                     torch.tensor([True, False]), torch.randn(4, 4, dtype=torch.bfloat16).t(),
                     torch.randn(2, dtype=torch.complex64), torch.randn(2, 3)[:, 1]),
         "inputs_after": (torch.ones(2, 2),)}


def test_values_round_trip_bit_exactly_with_their_digest(tmp_path):
    digest = tensor_io.write(tmp_path / "a", VALUE, digest=True)
    assert digest == hashlib.sha256((tmp_path / "a").read_bytes()).hexdigest()
    back = tensor_io.read(tmp_path / "a", sha256=digest)
    assert compare(VALUE["outputs"], back["outputs"], 0, 0) is None
    assert compare(VALUE["inputs_after"], back["inputs_after"], 0, 0) is None
    assert isinstance(back["outputs"], tuple) and isinstance(back["outputs"][2], list)
    # the same value gives the same bytes (a regenerated reference keeps its hash)
    assert tensor_io.write(tmp_path / "b", VALUE, digest=True) == digest


def test_values_it_cannot_carry_compare_as_what_they_were(tmp_path):
    tensor_io.write(tmp_path / "a", {"outputs": (object(), torch.zeros(3), torch.bfloat16, torch.device("cpu"))})
    back = tensor_io.read(tmp_path / "a")["outputs"]
    assert str(compare((torch.zeros(3), torch.zeros(3)), back[:2], 0, 0)) == "output[0]: expected a tensor, got object"
    assert back[0] == tensor_io.Unsupported("object") and back[0] != tensor_io.Unsupported("Foo")
    assert back[2:] == (torch.bfloat16, torch.device("cpu"))  # dtypes and devices are carried


def test_modules_and_sparse_tensors_travel_as_what_they_hold(tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    sparse = torch.sparse_coo_tensor([[0, 2], [1, 0]], [1.0, 2.0], (3, 2))
    tensor_io.write(tmp_path / "a", {"outputs": (layer, sparse)})
    back_layer, back_sparse = tensor_io.read(tmp_path / "a")["outputs"]
    assert back_layer["module"] == "Linear" and torch.equal(back_layer["state.weight"], layer.weight.detach())
    assert back_sparse[0] == "sparse_coo" and torch.equal(back_sparse[2], torch.tensor([1.0, 2.0]))
    with torch.no_grad():
        layer.weight[0, 0] += 1  # an in-place update of a module input is a change the check sees
    tensor_io.write(tmp_path / "b", {"outputs": (layer, sparse)})
    assert compare(tensor_io.read(tmp_path / "a"), tensor_io.read(tmp_path / "b"), 0, 0) is not None


def test_a_changed_byte_fails_the_digest(tmp_path):
    digest = tensor_io.write(tmp_path / "a", VALUE, digest=True)
    data = bytearray((tmp_path / "a").read_bytes())
    data[-1] ^= 1
    (tmp_path / "a").write_bytes(bytes(data))
    with pytest.raises(DigestMismatch):
        tensor_io.read(tmp_path / "a", sha256=digest)


@pytest.mark.parametrize("forge", ["cut", "fifo", "symlink", "missing", "garbage", "huge_header", "past_end",
                                   "bad_dtype", "deep_tree", "bad_index"])
def test_forged_files_are_errors(tmp_path, forge):
    path = tmp_path / "f"
    tensor_io.write(tmp_path / "good", VALUE)
    good = (tmp_path / "good").read_bytes()
    header_len = int.from_bytes(good[8:16], "little")

    def with_header(text: str) -> bytes:
        raw = text.encode()
        return tensor_io.MAGIC + len(raw).to_bytes(8, "little") + raw + bytes(64)

    if forge == "cut":
        path.write_bytes(good[:-5])
    elif forge == "fifo":  # a reader that opened it plainly would block for ever
        os.mkfifo(path)
    elif forge == "symlink":
        path.symlink_to(tmp_path / "good")
    elif forge == "garbage":
        path.write_bytes(os.urandom(1000))
    elif forge == "huge_header":
        path.write_bytes(good[:8] + (1 << 40).to_bytes(8, "little") + good[16:])
    elif forge == "past_end":
        path.write_bytes(with_header('{"tree": {"t": 0}, "tensors": [{"dtype": "float32", "shape": [1000], '
                                     '"offset": 0, "nbytes": 4000}]}'))
    elif forge == "bad_dtype":
        path.write_bytes(with_header('{"tree": {"t": 0}, "tensors": [{"dtype": "object", "shape": [1], '
                                     '"offset": 0, "nbytes": 8}]}'))
    elif forge == "deep_tree":
        path.write_bytes(with_header('{"tree": ' + '{"list": [' * 100 + ']}' * 100 + ', "tensors": []}'))
    elif forge == "bad_index":
        path.write_bytes(with_header('{"tree": {"t": 3}, "tensors": []}'))
    assert header_len > 0
    with pytest.raises(TensorFileError):
        tensor_io.read(path)
