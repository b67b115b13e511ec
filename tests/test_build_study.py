"""The MuSoBench build as a study (issue #14): its config rejects bad values, `rescore` reproduces the stored tables,
and the full default build is byte-identical to the build before point 9 (every attempt enumerated in the workers)."""

import hashlib

import pandas as pd
import pytest

from reasoning_study.config import ConfigError, config_from, parameters_source
from reasoning_study.studies.musobench import build as study
from reasoning_study.studies.runner import execute
from reasoning_study.tasks.musobench import read_jsonl

# sha256 of the files of the full default build (seed 0, 100 per level), written by commit 0d58b84 (before point 9)
FULL_BUILD_SHA256 = {
    "timetabling.jsonl": "61be2af58903e95adad704cc454d86058fa6b4fc66f8eac29a77667b65111cc6",
    "subsetsum.jsonl": "1b3669586052eb414f1c762d2d40e7ac205e9d328078c899b35f7be7c1669387",
}


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(per_level=0), "'per_level'"),
        (dict(workers="2"), "'workers'"),
        (dict(tasks=["timetabling", "sudoku"]), "sudoku"),
        (dict(tasks=[]), "'tasks' must not be empty"),
        (dict(tasks=["subsetsum"], levels=[7, 8]), "subsetsum has levels 1..7, got [8]"),
        (dict(perlevel=3), "did you mean 'per_level'"),
    ],
)
def test_bad_config_rejected(values, message):
    with pytest.raises(ConfigError, match=None) as e:
        config_from(study.MuSoBenchBuildConfig, values)
    assert message in str(e.value)


def test_config_defaults_and_papermill_strings():
    cfg = config_from(study.MuSoBenchBuildConfig, dict(tasks="subsetsum", levels=[7]))
    assert (cfg.tasks, cfg.levels, cfg.per_level, cfg.seed) == (["subsetsum"], [7], 100, 0)
    assert (
        parameters_source(study.MuSoBenchBuildConfig).splitlines()[1].startswith("seed = 0  # ")
    )  # under `# fmt: off`


def test_rescore_reproduces_the_stored_tables(tmp_path):
    cfg = config_from(study.MuSoBenchBuildConfig, dict(per_level=3, levels=[1, 2], workers=2, out_dir=str(tmp_path)))
    done = execute("musobench_build", cfg, tmp_path)
    results, written = done.results, done.written
    assert done.record["status"] == "finished" and done.record["counts"] == {
        "generated": 12,
        "reused": 0,
    }  # 2 tasks x 2 levels x 3
    assert [p.name for p in written["solution_counts"]] == ["solution_counts.png", "solution_counts.pdf"]
    assert list(results["summary"]["instances"]) == [3, 3, 3, 3]
    again = study.rescore(tmp_path)
    pd.testing.assert_frame_equal(again["summary"], pd.read_parquet(tmp_path / "summary.parquet"))
    pd.testing.assert_frame_equal(again["instances"], results["instances"])
    items = read_jsonl(tmp_path / "subsetsum.jsonl")  # the files agree with the raw table
    assert [it.answer_count for it in items] == list(results["instances"].query("task == 'subsetsum'").answer_count)


@pytest.mark.slow
def test_full_build_is_byte_identical(tmp_path):
    cfg = config_from(study.MuSoBenchBuildConfig, dict(out_dir=str(tmp_path)))
    raw = study.run(cfg, folder=tmp_path)
    assert raw["instances"].groupby("task").size().to_dict() == {"subsetsum": 700, "timetabling": 1000}
    assert {
        name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in FULL_BUILD_SHA256
    } == FULL_BUILD_SHA256
