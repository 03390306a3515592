"""A bad problem file fails at load with a message naming the file and the field."""

import textwrap

import pytest

from pkb_ray.problem import ProblemError, load_problem, load_problems

GOOD = textwrap.dedent('''
    import torch
    from pkb_ray.problem import Traffic
    META = dict(
        id="{id}", name="Copy", category="collective", dtypes=["float32"],
        tolerances={{"float32": dict(atol=0, rtol=0, reason="exact")}},
        sizes={{"small": dict(n=4), "default": dict(n=8)}},
    )
    def make_inputs(ctx):
        return (ctx.randn(ctx.size["n"]),)
    def solution(x):
        return x.clone()
    def speed_of_light(size, world_size, dtype):
        return Traffic(interconnect_bytes=1.0)
''')


def write(tmp_path, text, name="copy"):
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace("{id}", name) if "{id}" in text else text)
    return path


def test_good_file_loads(tmp_path):
    p = load_problem(write(tmp_path, GOOD.format(id="copy")))
    assert p.id == "copy" and p.signature == ["x"]
    assert p.size("small") == ("small", {"n": 4})
    assert p.size({"n": 99})[1] == {"n": 99}


@pytest.mark.parametrize(
    "old, new, field",
    [
        ('dtypes=["float32"]', 'dtypes=["float33"]', "META.dtypes"),
        ('"float32": dict(atol=0, rtol=0, reason="exact")', '"float32": dict(atol=0, rtol=0)', "META.tolerances.float32.reason"),
        ('dtypes=["float32"]', 'dtypes=["float32", "bfloat16"]', "META: "),
        ('"default": dict(n=8)', '"large": dict(n=8)', "META.sizes"),
        ('"default": dict(n=8)', '"default": dict(m=8)', "META.sizes"),
        ('"default": dict(n=8)},', '"default": dict(n=8)}, ladder=[dict(n=16), dict(m=1)],', "ladder.1: knobs ['m']"),
        ('"default": dict(n=8)},', '"default": dict(n=8)}, ladder=[dict(n=0)],', "ladder.0: knob values must be positive"),
        ('category="collective"', 'category="Bad Name"', "META.category"),
        ('def make_inputs(ctx):', 'def make_input(ctx):', "make_inputs: missing"),
        ('def make_inputs(ctx):', 'def make_inputs(size, rank):', "make_inputs: signature"),
        ('def speed_of_light(', 'def speed_of_lite(', "speed_of_light"),
        ('name="Copy", ', 'name="Copy", colour="red", ', "META.colour"),
        ('import torch', 'import torch\nraise RuntimeError("boom")', "import: RuntimeError: boom"),
    ],
)
def test_bad_file_names_file_and_field(tmp_path, old, new, field):
    text = GOOD.format(id="copy")
    assert old in text
    path = write(tmp_path, text.replace(old, new))
    with pytest.raises(ProblemError) as err:
        load_problem(path)
    assert str(path) in str(err.value) and field in str(err.value), str(err.value)


def test_a_size_sweep_names_presets_knobs_and_the_ladder(tmp_path):
    p = load_problem(write(tmp_path, GOOD.format(id="copy")))
    # without a ladder of its own, 'ladder' is the presets; a size named twice is evaluated once
    assert p.sizes_of(["ladder", {"n": 8}, "small"]) == [("small", {"n": 4}), ("default", {"n": 8}),
                                                         ("n=8", {"n": 8})]
    text = GOOD.format(id="copy").replace('"default": dict(n=8)},', '"default": dict(n=8)}, ladder=[dict(n=2), dict(n=64)],')
    laddered = load_problem(write(tmp_path, text))
    assert laddered.sizes_of(["ladder"]) == [("n=2", {"n": 2}), ("n=64", {"n": 64})]
    assert laddered.knobs_of("n=64") == {"n": 64}


def test_id_must_match_file_name(tmp_path):
    path = write(tmp_path, GOOD.format(id="other"), name="copy")
    with pytest.raises(ProblemError, match="META.id"):
        load_problem(path)


def test_loader_discovers_folder_and_skips_private_files(tmp_path):
    write(tmp_path, GOOD.format(id="copy"))
    (tmp_path / "_helpers.py").write_text("raise SystemExit('never imported')\n")
    assert list(load_problems(tmp_path)) == ["copy"]
    empty = tmp_path / "_empty"
    empty.mkdir()
    with pytest.raises(ProblemError, match="no problem files"):
        load_problems(empty)
