"""MuSoBench: the public reference data, reproducible builds, and the build notebook end to end."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.tasks import subsetsum
from reasoning_study.tasks.core import level_of
from reasoning_study.tasks.musobench import build_task, read_jsonl, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference" / "musobench_subsetsum.jsonl"
BIN = Path(sys.executable).parent

needs_reference = pytest.mark.skipif(not REFERENCE.exists(), reason="shared/reference is not beside this checkout")


@needs_reference
@pytest.mark.slow
def test_reference_file_round_trips_byte_for_byte(tmp_path):
    items = read_jsonl(REFERENCE)
    assert len(items) == 700 and {it.task for it in items} == {"subsetsum"}
    assert sorted(pd.Series([it.level for it in items]).value_counts().to_dict().items()) == [
        (l, 100) for l in range(1, 8)
    ]
    out = write_jsonl(items, tmp_path / "again.jsonl", extra_fields=False)
    assert out.read_bytes() == REFERENCE.read_bytes()
    with_levels = write_jsonl(items, tmp_path / "levels.jsonl")
    assert [(b.instance, b.solutions, b.level) for b in read_jsonl(with_levels)] == [
        (a.instance, a.solutions, a.level) for a in items
    ]


@needs_reference
@pytest.mark.slow
def test_reenumerating_the_reference_reproduces_every_answer_set():
    for it in read_jsonl(REFERENCE):
        assert subsetsum.enumerate_solutions(it.instance) == it.solutions, it.question_id


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_same_seed_same_file_for_any_worker_count(tmp_path):
    for task in ("timetabling", "subsetsum"):
        one = write_jsonl(build_task(task, seed=5, per_level=2, workers=1), tmp_path / f"{task}-1.jsonl")
        two = write_jsonl(build_task(task, seed=5, per_level=2, workers=2, chunk=100), tmp_path / f"{task}-2.jsonl")
        assert _sha(one) == _sha(two)
        other = write_jsonl(build_task(task, seed=6, per_level=2), tmp_path / f"{task}-other.jsonl")
        assert _sha(one) != _sha(other)


# Pinned digests of small builds: a change means the benchmark a seed stands for has changed
# (on another machine, Python version, or after a code change). Update them only on purpose.
GOLDEN = {
    "timetabling": "6365b9d7969f96da1d56ae7bce66db35938bc31e7b5ac1098297fb96b610eb6f",
    "subsetsum": "75facfc8775a4db7da5ebb3718ade2547f12b6211ab592fdd1da0e03d3c496da",
}


@pytest.mark.parametrize("task", sorted(GOLDEN))
def test_small_build_matches_its_pinned_digest(task, tmp_path):
    path = write_jsonl(build_task(task, seed=0, per_level=3), tmp_path / f"{task}.jsonl")
    assert _sha(path) == GOLDEN[task]


def test_builds_have_no_duplicates_and_correct_levels():
    for task in ("timetabling", "subsetsum"):
        items = build_task(task, seed=1, per_level=4)
        keys = [it.instance for it in items]
        assert len(set(keys)) == len(keys)
        module = __import__(f"reasoning_study.tasks.{task}", fromlist=["LEVELS"])
        assert all(level_of(it.answer_count, module.LEVELS) == it.level for it in items)
        assert [it.question_id for it in items] == list(range(len(items)))


@pytest.mark.slow
def test_build_notebook_end_to_end_with_papermill(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    cmd = [
        str(BIN / "papermill"),
        str(ROOT / "nbs" / "experiments" / "musobench_build.ipynb"),
        str(out / "executed.ipynb"),
        "-p",
        "per_level",
        "2",
        "-p",
        "workers",
        "1",
        "-p",
        "out_dir",
        str(out),
        "-y",
        "levels: [1, 2]",
        "--cwd",
        str(ROOT / "nbs"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["task"]) == {"timetabling", "subsetsum"} and set(summary["level"]) == {1, 2}
    assert (summary["instances"] == 2).all()  # the -p values took effect (the parameters tag works)
    assert len(read_jsonl(out / "timetabling.jsonl")) == 4
    assert (out / "figures" / "solution_counts.png").stat().st_size > 1000
    assert json.loads((out / "params.json").read_text())["per_level"] == 2


@pytest.mark.slow
def test_build_notebook_rejects_a_bad_parameter_before_building(tmp_path):
    out = tmp_path / "bad"
    cmd = [
        str(BIN / "papermill"),
        str(ROOT / "nbs" / "experiments" / "musobench_build.ipynb"),
        str(tmp_path / "x.ipynb"),
        "-p",
        "per_level",
        "ten",
        "-p",
        "out_dir",
        str(out),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode != 0 and "'per_level' must be int" in result.stderr + result.stdout
    assert not (out / "timetabling.jsonl").exists()
