"""Results and generated samples at filesystem URIs: a real S3 server on loopback (moto's, over HTTP,
in a process of its own) and ``file://``. pkb_ray talks to it through pyarrow's own S3 client, as
it would to AWS; the tests look at the bucket with a client of their own."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs
import pytest

import wandb_files
from conftest import REPO
from pkb_ray.generate.samples import read_samples
from pkb_ray.generate.stage import ROW_SCHEMA, generate, read_generated, write_rows
from pkb_ray.pipeline.selection import run_folder
from pkb_ray.results.parquet import RESULT_KEY, ResultSink, finished, newest, read_results, write_results
from pkb_ray.spec.config import ConfigError, SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import NOT_THE_SAMPLES_FAULT, Result, Sample, TrialRecord
from pkb_ray.summary.cli import compare_main as compare
from pkb_ray.summary.cli import main as report

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on 127.0.0.1; yields its endpoint (http://127.0.0.1:PORT)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto's S3 server did not start")
            time.sleep(0.2)
    yield endpoint
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket on the server and the environment that reaches it (pyarrow reads
    AWS_ENDPOINT_URL_S3); yields (bucket, a filesystem of the test's own to look into it)."""
    for k, v in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3_server}.items():
        monkeypatch.setenv(k, v)
    host = s3_server.removeprefix("http://")
    fs = pafs.S3FileSystem(endpoint_override=host, scheme="http", access_key="testing", secret_key="testing",
                           region="us-east-1", allow_bucket_creation=True)
    bucket = f"b{time.monotonic_ns()}"
    fs.create_dir(bucket)
    return bucket, fs


def _objects(fs, prefix: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path.removeprefix(prefix + "/") for i in infos if i.type == pafs.FileType.File)


def _result(problem="all_reduce", model="m", status=Status.CORRECT, index=0, **kw):
    s = Sample(problem_id=problem, model=model, sample_index=index, source=f"def solution(x): return x  # {index}")
    return Result.for_sample(s, status, world_size=2, trials=[TrialRecord(seed=0, rank=1, ok=True)],
                             ref_median_us=[1.0, 2.0], versions={"torch": "x"}, **kw)


ROWS = [_result(), _result(problem="gather", status=Status.TIMEOUT, message="stuck"), _result(model="org/m b", index=1),
        _result(index=2, status=Status.CRASH, message=f"{NOT_THE_SAMPLES_FAULT[0]}: the harness failed")]


def _round_trip(target: str) -> pd.DataFrame:
    write_results(ROWS, target)
    df = read_results(target)
    assert sorted(df["sample_key"]) == sorted(r.sample_key for r in ROWS)
    assert df.loc[df["problem_id"] == "gather", "message"].item() == "stuck"
    assert df.iloc[0]["trials"][0]["rank"] == 1 and set(df["model"]) == {"m", "org/m b"}
    # resume skips final results only: the evaluator's fault is evaluated again
    final = {tuple(getattr(r, k) for k in RESULT_KEY) for r in ROWS if r.sample_index != 2}
    assert finished(target) == final and len(final) == 3
    return df


def test_results_round_trip_through_a_bucket_one_whole_object_per_partition(s3):
    bucket, fs = s3
    target = f"s3://{bucket}/runs/a"
    assert read_results(target).empty and finished(target) == set()  # nothing there yet: no error
    _round_trip(target)
    objects = _objects(fs, f"{bucket}/runs/a")
    assert len(objects) == 3 and all(o.rsplit("/", 1)[1].startswith("part-") for o in objects)  # no temporary names
    assert {o.rsplit("/", 1)[0] for o in objects} == {"model=m/problem_id=all_reduce", "model=m/problem_id=gather",
                                                      "model=org%2Fm%20b/problem_id=all_reduce"}
    # what another reader makes of the bucket: pandas over pyarrow's dataset, the partition columns once each
    plain = pd.read_parquet(f"{bucket}/runs/a", filesystem=fs)
    assert len(plain) == 4 and list(plain.columns).count("model") == 1
    # a re-evaluation is another object; readers keep the newest row per key
    write_results([_result(index=2, message="again")], target)
    assert len(_objects(fs, f"{bucket}/runs/a")) == 4 and len(finished(target)) == 4
    assert "again" in set(newest(read_results(target))["message"])


def test_the_sink_puts_results_in_the_bucket_within_a_second(s3):
    bucket, fs = s3
    target = f"s3://{bucket}/sink"
    with ResultSink(target, max_rows=100, max_wait_s=0.5) as sink:
        sink.add(ROWS[0])
        deadline = time.monotonic() + 5
        while not _objects(fs, f"{bucket}/sink") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_objects(fs, f"{bucket}/sink")) == 1 and time.monotonic() < deadline
        sink.add(ROWS[1])
    assert len(read_results(target)) == 2


def test_a_uri_with_its_endpoint_in_the_query_works_without_the_environment(s3, monkeypatch):
    bucket, fs = s3
    endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    target = f"s3://{bucket}/q?endpoint_override={endpoint.removeprefix('http://')}&scheme=http"
    assert run_folder(target, "results_dir") == target  # it is writable: kept as given
    _round_trip(target)
    assert len(_objects(fs, f"{bucket}/q")) == 3  # the check's probe is gone


def test_results_round_trip_at_a_file_uri(tmp_path):
    folder = tmp_path / "res"
    df = _round_trip(f"file://{folder}")
    assert len(df) == 4 and len(list(folder.rglob("part-*.parquet"))) == 3 and not list(folder.rglob("*.tmp"))
    assert len(read_results(folder)) == 4  # the same folder by its path
    assert run_folder(f"file://{folder}", "results_dir") == folder  # a local folder: hidden from ranks, made by the run


def test_generated_rows_round_trip_through_a_bucket(s3):
    bucket, fs = s3
    meta = dict.fromkeys((f.name for f in ROW_SCHEMA.field("metadata").type), "")
    rows = [{"problem_id": "all_reduce", "model": "m", "sample_index": i, "backend": "torch",
             "source": f"def solution(x): return x  # {i}", "metadata": {**meta, "round": "0"}} for i in range(3)]
    target = f"s3://{bucket}/generated"
    assert read_generated(target) == []
    write_rows(rows[:2], target, 0)
    write_rows(rows[2:], target, 0)
    assert sorted(r["sample_index"] for r in read_generated(target)) == [0, 1, 2]
    assert all(o.startswith("round=0/part-") for o in _objects(fs, f"{bucket}/generated"))
    # a run naming the bucket again reuses what is there: no endpoint is asked (none exists here)
    asks = [{"model": "m", "problem_id": "all_reduce", "sample_index": i, "round": 0} for i in range(3)]
    assert generate(asks, SweepConfig(), target) == sorted(read_generated(target), key=lambda r: r["sample_index"])


def test_a_folder_that_cannot_be_written_fails_at_start_naming_its_key(s3, s3_server):
    bucket, _ = s3
    cases = {f"s3://nope-{bucket}/x": "cannot write", "ftp://host/x": "cannot open",
             f"s3://KEY:SECRET@{bucket}/x": "credentials in the URI"}
    for target, said in cases.items():
        with pytest.raises(ConfigError) as err:
            run_folder(target, "results_dir")
        assert str(err.value).startswith("results_dir: ") and said in str(err.value), str(err.value)
        assert "SECRET" not in str(err.value)
    closed = f"s3://{bucket}/x?endpoint_override=127.0.0.1:{_free_port()}&scheme=http"  # nothing listens there
    with pytest.raises(ConfigError, match="^generated_dir: cannot write"):
        run_folder(closed, "generated_dir")


def test_the_report_reads_a_bucket_of_results_or_of_run_folders(s3, tmp_path):
    bucket, _ = s3
    write_results(ROWS, f"s3://{bucket}/r/results")
    for target in (f"s3://{bucket}/r/results", f"s3://{bucket}/r", f"s3://{bucket}"):  # results, run, runs
        assert report([target, "--out", str(tmp_path / "page")]) == 0
        assert (tmp_path / "page" / "report.html").is_file()
    assert report([f"s3://{bucket}/empty", "--out", str(tmp_path / "page")]) == 2


def test_a_sweep_writes_into_the_bucket_and_a_rerun_resumes_from_it(s3, s3_server, tmp_path, shared_ray):
    bucket, fs = s3
    shipped = [r for r in read_samples(REPO / "samples" / "replay") if r["problem_id"] == "broadcast"]
    target = f"s3://{bucket}/sweep"
    env = shared_ray.env(dict(os.environ, **CREDENTIALS, AWS_ENDPOINT_URL_S3=s3_server, RAY_DISABLE_USAGE_STATS="1"))

    def sweep(run: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={tmp_path / run}",
                               "ray.include_dashboard=false", "eval.timeout_s=30", "eval.rounds=10",
                               f"cache_dir={tmp_path / 'cache'}", "problems.ids=[broadcast]", f"results_dir={target}",
                               *shared_ray.overrides(2)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    first = sweep("run1")
    assert first.returncode == 0, first.stderr[-3000:]
    objects = _objects(fs, f"{bucket}/sweep")
    rows = [o for o in objects if o.endswith(".parquet")]
    assert rows and all(o.startswith("model=replay/problem_id=broadcast/part-") for o in rows)
    assert len(read_results(target)) == len(shipped) and len(finished(target)) == len(shipped)
    # the report beside the results (the run folder of a Ray job is a temporary copy), not among them
    assert {"_report/report.html", "_report/report.md"} <= set(objects)
    assert not (tmp_path / "run1" / "results").exists()
    run_file = next((tmp_path / "run1" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert wandb_files.summary(run_file)["results_uri"] == target  # W&B says where the results are
    again = sweep("run2")
    assert again.returncode == 0, again.stderr[-3000:]
    said = again.stdout + again.stderr
    assert f"{len(shipped)} (sample, layout, size) evaluations already have a final result" in said
    assert "nothing left to evaluate" in said
    assert [o for o in _objects(fs, f"{bucket}/sweep") if o.endswith(".parquet") and "_report" not in o] == rows


def test_compare_reads_buckets_and_names_a_missing_or_unreachable_one(s3, capsys):
    bucket, _ = s3
    write_results(ROWS, f"s3://{bucket}/old/results")  # a run folder
    write_results([r.model_copy(update={"status": Status.WRONG_OUTPUT}) for r in ROWS], f"s3://{bucket}/new")
    assert compare([f"s3://{bucket}/old", f"s3://{bucket}/old/results"]) == 0  # the same rows: nothing flagged
    out = capsys.readouterr().out
    assert "no regression" in out and "paired" in out
    assert compare([f"s3://{bucket}/old", f"s3://{bucket}/new"]) == 0  # every sample wrong, but 3 are too few to flag
    out = capsys.readouterr().out
    assert "-1.00" in out and "-0.25" in out and "no regression" in out  # org/m b, m's ALL row
    closed = f"s3://{bucket}/old?endpoint_override=127.0.0.1:{_free_port()}&scheme=http"  # nothing listens there
    for argv, side, said in (([f"s3://{bucket}/old", f"s3://nope-{bucket}/x"], "B", f"no such bucket 'nope-{bucket}'"),
                             ([f"s3://{bucket}/empty", f"s3://{bucket}/old"], "A", "no such folder"),
                             ([closed, f"s3://{bucket}/old"], "A", "Could not connect")):
        assert compare(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: run {side} ({argv[side == 'B']}): ") and said in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert report([f"s3://nope-{bucket}/x", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: s3://nope-{bucket}/x: ") and len(err.strip().splitlines()) == 1, err
