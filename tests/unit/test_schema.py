from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import RESULT_SCHEMA, Result, Sample, TrialRecord, results_to_table, trim


def _result(problem="all_reduce", model="m", status=Status.CORRECT, **kw):
    s = Sample(problem_id=problem, model=model, sample_index=0, source="def solution(x): return x")
    return Result.for_sample(s, status, world_size=2, trials=[TrialRecord(seed=0, rank=1, ok=True)],
                             ref_median_us=[1.0, 2.0], versions={"torch": "x"}, **kw)


def test_arrow_schema_has_every_result_field_in_order():
    assert RESULT_SCHEMA.names == list(Result.model_fields)


def test_status_taxonomy_is_closed_and_ordered():
    assert [s.value for s in Status] == ["invalid_sample", "unsupported_hardware", "compile_error", "import_error", "runtime_error",
                                         "timeout", "crash", "wrong_output", "tampering", "correct"]


def test_sample_key_is_stable_and_depends_on_source():
    a = Sample(problem_id="p", model="m", sample_index=3, source="x")
    assert a.key == Sample(problem_id="p", model="m", sample_index=3, source="x").key
    assert a.key != Sample(problem_id="p", model="m", sample_index=3, source="y").key


def test_trim_keeps_head_and_tail():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = trim(text, 100)
    assert len(out) < 200 and out.startswith("HEAD") and out.endswith("TAIL") and "chars cut" in out
    assert results_to_table([_result(message=text)]).column("message")[0].as_py().endswith("TAIL")
