from pkb_ray.pipeline.compile import compile_sample
from pkb_ray.pipeline.validate import validate
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

GOOD = "import torch\n\ndef solution(x):\n    return x\n"


def row(**kw):
    base = dict(problem_id="all_reduce", model="m", sample_index=0, source=GOOD)
    base.update(kw)
    return base


def test_good_row_becomes_a_sample(problems):
    assert isinstance(validate(row(), problems, 2), Sample)


def test_bad_rows_become_invalid_sample_results(problems):
    cases = {
        "unknown problem id": row(problem_id="nope"),
        "sample field sample_index": row(sample_index=-1),
        "sample field source": {k: v for k, v in row().items() if k != "source"},
        "empty source": row(source="   "),
        "no top-level function solution": row(source="def other(x):\n    return x\n"),
        "must keep the reference's parameters": row(source="def solution(y, z):\n    return y\n"),
        "unknown backend": row(backend="fortran"),
        "not JSON": {"_error": "file.jsonl:3: not JSON (Expecting value)"},
    }
    for needle, r in cases.items():
        out = validate(r, problems, 2)
        assert not isinstance(out, Sample), needle
        assert out.status == Status.INVALID_SAMPLE and needle in out.message, (needle, out.message)


def test_world_size_the_problem_does_not_support(problems):
    out = validate(row(), problems, 1)
    assert out.status == Status.INVALID_SAMPLE and "world size 1" in out.message


def test_syntax_error_is_left_to_compile_which_names_the_line(problems):
    sample = validate(row(source="def solution(x):\n    return (x\n"), problems, 2)
    assert isinstance(sample, Sample)
    out = compile_sample(sample, 2)
    assert out.status == Status.COMPILE_ERROR
    assert "line 2" in out.message and "SyntaxError" in out.message


def test_compile_passes_good_source(problems):
    sample = validate(row(), problems, 2)
    assert compile_sample(sample, 2) is sample
