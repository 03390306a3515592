"""What a user can find out before a run: the keys and their descriptions, the problems a run sees,
and a run capped by model.limit_per_problem marked partial in every view."""

import pytest

from conftest import REPO
from pkb_ray.spec.compose import compose_config, keys_help
from pkb_ray.spec.config import SweepConfig, key_docs


def _leaves(model, prefix=""):
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _leaves(ann, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field.description


def test_the_keys_help_lists_every_key_with_its_type_default_and_description():
    docs = {key: (kind, default, description) for key, kind, default, description in key_docs()}
    leaves = dict(_leaves(SweepConfig))
    assert set(docs) == set(leaves) and len(docs) > 80
    assert all(docs[k][2] == (d or "") for k, d in leaves.items())
    assert docs["hardware.device"][0] == "cpu|cuda" and docs["model.limit_per_problem"][0] == "int | null"
    text = keys_help()
    assert "  eval.trials  (int, default 3)\n      correctness trials, each on fresh random inputs" in text
    assert "  eval.max_round_calls  (int, default 1)" in text  # the default as conf/eval/cpu.yaml composes it
    assert "  model.limit_per_problem  (int | null, default null)" in text


def test_limit_per_problem_keeps_the_lowest_sample_indices_of_each_problem(problems):
    from pkb_ray.generate.samples import read_samples
    from pkb_ray.pipeline.selection import first_samples, select_rows

    rows = [{"model": "m", "problem_id": "a", "sample_index": i} for i in (3, 0, 2, 1)] + \
           [{"model": "m", "problem_id": "b", "sample_index": 5}, {"model": "m", "problem_id": "b"},
            {"model": "n", "problem_id": "a", "sample_index": 9}]
    kept = first_samples(rows, 2)
    assert [(r["model"], r["problem_id"], r.get("sample_index")) for r in kept] == \
        [("m", "a", 0), ("m", "a", 1), ("m", "b", 5), ("m", "b", None), ("n", "a", 9)]
    assert first_samples(rows, None) is rows
    replay = read_samples(REPO / "samples" / "replay")
    one = select_rows(replay, compose_config(["model.limit_per_problem=1"]), problems)
    assert len(one) == len({r["problem_id"] for r in replay}) < len(replay)
    assert all(r["sample_index"] == min(s["sample_index"] for s in replay if s["problem_id"] == r["problem_id"])
               for r in one)
    model = compose_config(["model.limit_per_problem=2", "model.samples_per_problem=4"]).model
    assert model.samples_asked == 2 and model.partial_note == "at most 2 samples per problem (model.limit_per_problem)"
    assert compose_config([]).model.partial_note is None


def test_a_capped_run_is_marked_partial_in_the_table_and_the_pages(tmp_path):
    from test_report import results

    from pkb_ray.results.parquet import read_results, write_results
    from pkb_ray.summary import pages, render_text
    from pkb_ray.summary.run import PARTIAL_RUN, RunSummary

    write_results(results(), tmp_path / "results")
    note = "at most 1 samples per problem (model.limit_per_problem)"
    summary = RunSummary.of(read_results(tmp_path / "results"), run_info={PARTIAL_RUN: note})
    assert summary.partial == note
    assert f"partial run: {note}" in render_text.table(summary).splitlines()
    html, md = pages.write(summary, tmp_path / "out", title="capped")
    assert f"partial run: {note}" in html.read_text() and f"partial run: {note}" in md.read_text()
    whole = RunSummary.of(read_results(tmp_path / "results"))
    assert whole.partial is None and "partial run" not in render_text.table(whole)


@pytest.mark.parametrize("overrides, ids", [(["problems=smoke"], ["all_gather", "all_reduce"]),
                                            (["problems.ids=[broadcast]", "hardware=h200_2"], ["broadcast"])])
def test_the_problem_listing_shows_what_a_run_would_see(overrides, ids):
    from pkb_ray.commands.listing import COLUMNS, problem_rows, table
    from pkb_ray.pipeline.selection import job_inputs

    cfg = compose_config(overrides)
    rows = problem_rows(cfg, job_inputs(cfg, REPO).chosen)
    assert [r[0] for r in rows] == ids and all(len(r) == len(COLUMNS) for r in rows)
    first = dict(zip(COLUMNS, rows[0]))
    assert first["category"] == "collective" and first["W"] == "2+" and first["dtypes"] == "f32, bf16"
    size = "numel=4096" if cfg.hardware.device == "cpu" else None
    assert first["size (eval.size)"].startswith("numel=") and (size is None or first["size (eval.size)"] == size)
    assert first["SOL us"].endswith(", W=2") and first["sizes"].startswith("standard")
    lines = table(rows).splitlines()
    assert lines[0].split() == ["id", "category", "W", "dtypes", "sizes", "size", "(eval.size)", "SOL", "us"]
    assert max(map(len, lines)) <= 100  # a terminal's width: long cells wrap at their commas
