"""The results folder: what any Parquet reader makes of it, the key every reader uses, the sink."""

import time

import duckdb
import pandas as pd
import pyarrow.dataset as ds

from pkb_ray.results.parquet import RESULT_KEY, ResultSink, finished, key_at, newest, read_results, write_results
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import Result, Sample, TrialRecord, Where


def _result(problem="all_reduce", model="m", status=Status.CORRECT, index=0, **kw):
    s = Sample(problem_id=problem, model=model, sample_index=index, source=f"def solution(x): return x  # {index}")
    return Result.for_sample(s, status, world_size=kw.pop("world_size", 2), trials=[TrialRecord(seed=0, rank=1, ok=True)],
                             ref_median_us=[1.0, 2.0], versions={"torch": "x"}, **kw)


def test_every_reader_opens_the_folder_as_is(tmp_path):
    results = [_result(), _result(problem="gather", status=Status.TIMEOUT, message="stuck"), _result(model="org/m b")]
    files = write_results(results, tmp_path)
    assert len(files) == 3 and not list(tmp_path.rglob("*.tmp"))
    # pandas on the folder: the partition columns once each (they were both columns and folder names)
    plain = pd.read_parquet(tmp_path)
    assert len(plain) == 3 and list(plain.columns).count("model") == 1
    assert sorted(plain["model"].astype(str)) == ["m", "m", "org/m b"]  # the folder name is encoded, not mangled
    assert ds.dataset(tmp_path, partitioning="hive").to_table().num_rows == 3
    got = duckdb.sql(f"select model, problem_id, status from read_parquet('{tmp_path}/**/*.parquet', "
                     "hive_partitioning=true) order by all").fetchall()
    assert got == [("m", "all_reduce", "correct"), ("m", "gather", "timeout"), ("org/m b", "all_reduce", "correct")]
    df = read_results(tmp_path)
    assert len(df) == 3 and df.loc[df["problem_id"] == "gather", "message"].item() == "stuck"
    assert df.iloc[0]["trials"][0]["rank"] == 1


def test_the_same_sample_at_another_size_dtype_or_round_is_another_result(tmp_path):
    # the bug: a sweep over eval.size=small,default read back as one job (newest kept one per sample)
    rows = [_result(size="small", dtype="float32"), _result(size="default", dtype="float32"),
            _result(size="default", dtype="bfloat16"), _result(size="default", dtype="bfloat16", round=1),
            _result(size="default", dtype="bfloat16", world_size=4)]
    write_results(rows, tmp_path)
    assert len(newest(read_results(tmp_path))) == 5
    assert len(finished(tmp_path)) == 5 and all(len(k) == len(RESULT_KEY) for k in finished(tmp_path))
    write_results([_result(size="small", dtype="float32", message="again")], tmp_path)  # a re-evaluation
    kept = newest(read_results(tmp_path))
    assert len(kept) == 5 and "again" in set(kept["message"])


def test_a_key_known_before_the_result_is_the_key_the_result_has(tmp_path):
    # a resumed run skips a (sample, where) by this key before evaluating; it must match what is read back
    where = Where(Layout(2, 8), hardware="h200_8", device_backend="nccl", size="small", dtype="bfloat16")
    written = _result(round=3, **where.fields)
    write_results([written], tmp_path)
    assert finished(tmp_path) == {key_at(written.sample_key, 3, where)}
    assert key_at(written.sample_key, 2, where) not in finished(tmp_path)


def test_the_sink_writes_within_a_second_and_the_rest_on_close(tmp_path):
    sink = ResultSink(tmp_path, max_rows=100, max_wait_s=0.5)
    sink.add(_result(index=0))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not len(read_results(tmp_path)):
        time.sleep(0.1)
    assert len(read_results(tmp_path)) == 1  # nothing else came, and it was written anyway
    for i in range(1, 4):
        sink.add(_result(index=i))
    sink.close()
    assert len(read_results(tmp_path)) == 4 and sink.written == 4
    full = ResultSink(tmp_path / "b", max_rows=3, max_wait_s=60)
    for i in range(3):
        full.add(_result(index=i))
    assert len(read_results(tmp_path / "b")) == 3  # max_rows reached: written at once
    full.close()


def test_an_empty_or_missing_folder_reads_as_no_rows(tmp_path):
    assert read_results(tmp_path / "nothing").empty and finished(tmp_path) == set()


def test_result_records_read_back_as_written(tmp_path):
    """read_result_records gives back the Results that were written, a file's missing columns as defaults."""
    from pkb_ray.results.parquet import read_result_records, write_results

    results = [Result.for_sample(Sample(problem_id="all_reduce", model="m", sample_index=i, source=f"s{i}"),
                                 Status.CORRECT, speedup=1.5, versions={"pkb_ray": "x"}, world_size=2)
               for i in range(3)]
    write_results(results, tmp_path)
    back = sorted(read_result_records(tmp_path), key=lambda r: r.sample_index)
    assert [(r.sample_key, r.speedup, r.versions, r.status) for r in back] == \
        [(r.sample_key, r.speedup, r.versions, r.status) for r in results]
    assert back[0].speedup_lo is None and read_result_records(tmp_path / "none") == []
