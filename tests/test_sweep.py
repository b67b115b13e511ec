"""Sweeps end to end: real papermill runs of an experiment notebook (the MuSoBench build, seconds per cell).

A 3-cell sweep is interrupted part-way (SIGINT, then SIGTERM) and rerun: only the missing cells run, no
half-written run folder and no notebook process is left behind; a failing cell is recorded and does not
stop the others; every kind of mistake in a sweep file fails before anything starts; the Ray executor
runs the same sweep on a local Ray instance; the compiled report draws what the runs support.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from reasoning_study.cli import main, rescore_sweep
from reasoning_study.sweep.index import DONE_FILE, WORK, finished_runs
from reasoning_study.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
# three cells of the benchmark build, three seeds: a real study notebook whose cells take seconds (about 10 s each, long
# enough to be interrupted mid-cell), with no model: what these tests check is the sweep, not what a model says
TINY_SWEEP = """
name: tiny
experiments:
  - notebook: musobench_build
    parameters: {tasks: [subsetsum, timetabling], per_level: 30, workers: 1}
    grid:
      seed: [0, 1, 2]
"""
CELLS = ["musobench_build__seed=0", "musobench_build__seed=1", "musobench_build__seed=2"]


def sweep_command(spec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "reasoning_study.cli", str(spec), "--out", str(out), *extra]


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def summary(out: Path, name: str = "tiny") -> pd.DataFrame:
    path = out / name / "sweep_summary.csv"
    return (
        pd.read_csv(path, dtype=str, keep_default_na=False)
        if path.is_file()
        else pd.DataFrame(columns=["cell", "status"])
    )


def statuses(out: Path, name: str = "tiny") -> dict:
    return dict(zip(summary(out, name)["cell"], summary(out, name)["status"]))


def notebook_processes(folder: Path) -> list[psutil.Process]:
    "Processes (papermill, kernels) whose command line mentions the folder."
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(folder) in part for part in (p.info["cmdline"] or [])) and p.pid != os.getpid():
                found.append(p)
        except psutil.Error:
            pass
    return found


def interrupt_after(spec: Path, out: Path, done: int, signum: int, timeout: float = 600) -> subprocess.CompletedProcess:
    "Start the sweep, send `signum` once `done` cells are finished and the next one is running, return the finished process."
    process = subprocess.Popen(
        sweep_command(spec, out),
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        finished = len(list((out / "tiny").glob(f"*/{DONE_FILE}")))
        running = [p for p in (out / "tiny" / WORK).glob("*/notebook.ipynb")] if finished >= done else []
        if finished >= done and running:
            break
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.5)
    time.sleep(3)  # the next notebook is well under way
    process.send_signal(signum)
    output, _ = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, output)


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory) -> Path:
    spec = tmp_path_factory.mktemp("spec") / "tiny.yaml"
    spec.write_text(TINY_SWEEP)
    return spec


@pytest.mark.slow
def test_interrupted_sweep_resumes_only_missing_cells(tiny_spec, tmp_path):
    out = tmp_path / "outputs"
    first = interrupt_after(tiny_spec, out, done=1, signum=signal.SIGINT)
    assert first.returncode == 130, first.stdout
    assert statuses(out) == {CELLS[0]: "done", CELLS[1]: "interrupted", CELLS[2]: "not started"}, first.stdout
    # no half-written run folder
    assert sorted(p.name for p in (out / "tiny").iterdir() if p.name.startswith("musobench")) == [CELLS[0]]
    # the interrupted run kept its work folder (and store) for the next start
    assert (out / "tiny" / WORK / CELLS[1]).is_dir()
    time.sleep(1)
    assert notebook_processes(out) == []  # papermill and its kernel were stopped too
    record = (out / "tiny" / CELLS[0] / DONE_FILE).read_text()
    assert json.loads(record)["ignored_parameters"] == []  # a model we serve ignores nothing

    second = interrupt_after(tiny_spec, out, done=2, signum=signal.SIGTERM)
    assert second.returncode == 130, second.stdout
    assert statuses(out) == {CELLS[0]: "skipped", CELLS[1]: "done", CELLS[2]: "interrupted"}, second.stdout
    time.sleep(1)
    assert notebook_processes(out) == []

    third = subprocess.run(
        sweep_command(tiny_spec, out), cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert third.returncode == 0, third.stdout + third.stderr
    assert statuses(out) == {CELLS[0]: "skipped", CELLS[1]: "skipped", CELLS[2]: "done"}
    assert "[start] " + CELLS[2] in third.stdout and "[start] " + CELLS[0] not in third.stdout  # one line per cell
    assert (out / "tiny" / CELLS[0] / DONE_FILE).read_text() == record  # the finished cell was not run again
    runs = finished_runs(out / "tiny")
    assert sorted(runs["cell"]) == CELLS and not (out / "tiny" / WORK).exists()  # the empty work area is removed
    for folder in runs["folder"]:
        assert (Path(folder) / "instances.parquet").is_file() and (Path(folder) / "notebook.ipynb").is_file()
        assert json.loads((Path(folder) / "params.json").read_text())["seed"] in (0, 1, 2)
    # every run folder's declared tables are reproduced exactly, no model (check: nothing written)
    assert rescore_sweep(out / "tiny") == {}

    # the compiled report: the build's figure is drawn, the experiments not in this sweep are listed as such
    report = subprocess.run(
        sweep_command(tiny_spec, out, "--report-only"),
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    folder = out / "tiny" / "report"
    inventory = pd.read_csv(folder / "figures.csv").set_index(["paper", "item"])
    assert inventory.loc[("MuSoBench", "Benchmark"), "status"] == "drawn"
    assert inventory.loc[("MuSoBench", "Figure 7"), "status"] == "not in sweep"
    assert inventory.loc[("MuSoBench", "Figure 2"), "status"] == "not in sweep"
    assert inventory.loc[("Overthinking", "Figure 7"), "status"] == "not in sweep"
    # the three runs pooled in one figure
    assert (folder / "musobench_build" / "figures" / "solution_counts.png").is_file()
    assert sorted(pd.read_csv(folder / "runs.csv")["cell"]) == CELLS  # the provenance of every run
    html = (folder / "report.html").read_text()
    assert html.count("data:image/png;base64") >= 1 and "not in sweep" in html


def throwaway_project(root: Path, name: str, parameters: str, code: str) -> Path:
    """A project root holding one experiment notebook `name` (a parameters cell, then `code`): sweeps of notebooks
    that fail, store error rows or report what they found, without a model."""
    (root / "settings.ini").write_text("[DEFAULT]\nlib_name = reasoning_study\n")
    (root / "nbs" / "experiments").mkdir(parents=True)
    cell = lambda i, text, tags=(): dict(
        cell_type="code", id=f"c{i}", metadata={"tags": list(tags)}, source=text, outputs=[], execution_count=None
    )
    notebook = dict(
        nbformat=4,
        nbformat_minor=5,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        cells=[cell(0, parameters, ["parameters"]), cell(1, code)],
    )
    path = root / "nbs" / "experiments" / f"{name}.ipynb"
    path.write_text(json.dumps(notebook))
    return path


@pytest.mark.slow
def test_failed_cell_is_recorded_and_the_others_run(tmp_path):
    # a notebook in a throw-away project root that fails when asked (a value every config check lets through)
    throwaway_project(
        tmp_path,
        "flaky",
        "out_dir = '.'  # the run folder\nfail = False  # raise in the notebook",
        "from pathlib import Path\nassert not fail, 'asked to fail'\n(Path(out_dir) / 'result.txt').write_text('ok')",
    )
    spec = tmp_path / "mixed.yaml"
    spec.write_text("name: mixed\nexperiments:\n  - notebook: flaky\n    grid: {fail: [true, false]}\n")
    done = subprocess.run(
        sweep_command(spec, tmp_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1, done.stdout + done.stderr
    table = summary(tmp_path, "mixed").set_index("cell")
    assert table.loc["flaky__fail=True", "status"] == "failed"
    assert "asked to fail" in table.loc["flaky__fail=True", "error"]
    assert table.loc["flaky__fail=False", "status"] == "done"
    assert (tmp_path / "mixed" / "flaky__fail=False" / "result.txt").read_text() == "ok"
    failed = Path(table.loc["flaky__fail=True", "folder"])
    assert (failed / "notebook.ipynb").is_file() and "asked to fail" in (failed / "error.txt").read_text()
    assert not (tmp_path / "mixed" / "flaky__fail=True").exists()
    assert "failed" in (tmp_path / "mixed" / "sweep_summary.md").read_text()


STORE_NOTEBOOK = """from pathlib import Path
import time
from reasoning_study.store import RUN_STORE, GenerationRecord, GenerationStore
marker = Path(out_dir) / 'ran_before'
first = not marker.exists()
marker.write_text('')
def row(k, error):
    return GenerationRecord(key=f'k{k}', model_id='m', revision='r', backend='b', prompt_json='{}', sampling_json='{}',
                            sample_index=0, seed=0, tag='', text='' if error else 'ok', reasoning='', answer='',
                            prompt_tokens=1, completion_tokens=1, cached_prompt_tokens=None,
                            finish_reason='error' if error else 'stop', status='error' if error else 'answered',
                            error='HTTP 429: rate limited' if error else None, latency_s=0.0, created_at=time.time())
with GenerationStore(Path(out_dir) / RUN_STORE) as store:  # a rerun answers what failed before (as generate_cached does)
    store.put_many([row(k, first and k < errors) for k in range(100)])"""


@pytest.mark.slow
def test_a_cell_with_too_many_error_rows_is_incomplete_and_rerun(tmp_path):
    "Issue 30, point 6: error rows above the threshold (1 % by default) leave the cell unfinished; a rerun retries it."
    throwaway_project(
        tmp_path, "api", "out_dir = '.'  # the run folder\nerrors = 0  # error rows among 100", STORE_NOTEBOOK
    )
    spec = tmp_path / "api.yaml"
    spec.write_text("name: api\nexperiments:\n  - notebook: api\n    grid: {errors: [1, 2]}\n")
    first = subprocess.run(
        sweep_command(spec, tmp_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 1, first.stdout + first.stderr
    table = summary(tmp_path, "api").set_index("cell")
    assert table.loc["api__errors=1", "status"] == "done"  # 1 of 100: at the threshold, not above it
    assert table.loc["api__errors=2", "status"] == "incomplete"
    assert (
        "2 of 100 generations are errors" in table.loc["api__errors=2", "error"]
        and "HTTP 429" in table.loc["api__errors=2", "error"]
    )
    assert list(finished_runs(tmp_path / "api")["cell"]) == ["api__errors=1"]  # not counted as finished
    assert (tmp_path / "api" / WORK / "api__errors=2" / "generations.sqlite").is_file()  # its store waits for the rerun
    assert "1 incomplete" in (tmp_path / "api" / "sweep_summary.md").read_text()

    second = subprocess.run(
        sweep_command(spec, tmp_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "[start] api__errors=2" in second.stdout and "[start] api__errors=1" not in second.stdout
    assert statuses(tmp_path, "api") == {"api__errors=1": "skipped", "api__errors=2": "done"}
    assert sorted(finished_runs(tmp_path / "api")["cell"]) == ["api__errors=1", "api__errors=2"]


BAD_FILES = {
    "unknown notebook": (
        "experiments:\n  - notebook: musobench_study\n",
        "experiments[0] (musobench_study): unknown notebook 'musobench_study'",
    ),
    "unknown parameter": (
        "experiments:\n  - notebook: overthinking\n    parameters: {n_item: 2}\n",
        "experiments[0] (overthinking) cell overthinking: unknown parameter 'n_item' (did you mean 'n_items'?) (OverthinkingConfig)",
    ),
    "unknown parameter in grid": (
        "experiments:\n  - notebook: musobench\n    grid: {temprature: [0.2]}\n",
        "cell musobench__temprature=0.2: unknown parameter 'temprature' (did you mean 'temperature'?)",
    ),
    "wrong type": (
        "experiments:\n  - notebook: musobench\n    parameters: {per_level: ten}\n",
        "cell musobench: parameter 'per_level' must be int, got 'ten' (str) (MuSoBenchConfig)",
    ),
    "wrong type in grid": (
        "experiments:\n  - notebook: overthinking\n    grid: {n_items: [2, 2.5]}\n",
        "parameter 'n_items' must be int",
    ),
    "bool for a number": (
        "experiments:\n  - notebook: musobench_build\n    parameters: {workers: true}\n",
        "parameter 'workers' must be int",
    ),
    "unknown preset": (
        "experiments:\n  - notebook: musobench\n    cases:\n      x: {long_preset: gpt-5}\n",
        "cell musobench__x: parameter 'long_preset': 'gpt-5' is not one of ['",
    ),
    "unknown extractor preset": (
        "experiments:\n  - notebook: overthinking\n    parameters: {extractors: [rules, 'llm:qwen9']}\n",
        "parameter 'extractors': 'llm:qwen9' is not one of ['rules', ",
    ),
    "rejected by the provider": (
        "experiments:\n  - notebook: musobench\n    cases:\n      x: {short_preset: gpt-4o-mini, long_preset: o4-mini, reflection_ks: []}\n",
        "preset 'o4-mini' (OpenAI model 'o4-mini-2025-04-16'): temperature=0.7 is rejected by the provider",
    ),
    "over the provider's cap": (
        "experiments:\n  - notebook: musobench\n    parameters: {short_preset: deepseek-v3, long_preset: deepseek-r1, max_tokens: 20480}\n",
        "max_tokens=20480 is above the provider's cap of 8192",
    ),
    "out_dir set": (
        "experiments:\n  - notebook: musobench_build\n    parameters: {out_dir: x}\n",
        "parameter 'out_dir' is set by the sweep",
    ),
    "empty grid": (
        "experiments:\n  - notebook: musobench_build\n    grid: {seed: []}\n",
        "'seed' must be a non-empty list",
    ),
    "unknown key": (
        "experiments:\n  - notebook: musobench_build\n    parameter: {seed: 1}\n",
        "unknown key(s) ['parameter']",
    ),
    "no experiments": ("name: x\n", "'experiments' must be a non-empty list"),
    "invalid YAML": ("experiments: [\n", "not valid YAML"),
    "duplicate cells": (
        "experiments:\n  - notebook: musobench_build\n  - notebook: musobench_build\n",
        "2 cells share the run folder",
    ),
}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_bad_sweep_file_fails_before_anything_starts(kind, tmp_path, capsys):
    text, message = BAD_FILES[kind]
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        text + "\n  - notebook: musobench_build\n    label: fine\n" if text.startswith("experiments:\n") else text
    )
    assert main([str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "nothing was run" in err, err
    assert not (tmp_path / "out").exists()  # no sweep folder, no run


def test_bad_value_is_rejected_with_the_configs_message(tmp_path, capsys):
    "Issue #14 point 3: a study with a config is judged by it; the sweep repeats the config's own words, naming cell and parameter."
    from reasoning_study.config import ConfigError, config_from
    from reasoning_study.studies.registry import study_config

    values = {"n_items": 0, "temperature": -0.5, "benchmarks": ["champ", "nope"]}
    with pytest.raises(ConfigError) as own:
        config_from(study_config("overthinking"), {**values, "seed": 1})
    assert len(own.value.problems) == 3
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "experiments:\n  - notebook: overthinking\n    parameters: {n_items: 0, temperature: -0.5, benchmarks: [champ, nope]}\n"
        "    grid: {seed: [1, 2]}\n"
    )
    assert main([str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    for problem in own.value.problems:  # one line per problem, for both cells that share it
        assert (
            f"  - experiments[0] (overthinking) cells overthinking__seed=1, overthinking__seed=2: {problem} (OverthinkingConfig)\n"
            in err
        ), err
    assert "3 problem(s), nothing was run" in err and not (tmp_path / "out").exists()


def test_notebook_without_a_config_is_checked_against_its_parameters_cell(tmp_path):
    "Where no config is registered, the sweep still reads types from the notebook's parameters cell."
    (tmp_path / "nbs" / "experiments").mkdir(parents=True)
    notebook = dict(
        nbformat=4,
        nbformat_minor=5,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        cells=[
            dict(
                cell_type="code",
                id="p",
                metadata={"tags": ["parameters"]},
                outputs=[],
                execution_count=None,
                source="out_dir = '.'  # the run folder\nitems = 3  # items\n",
            )
        ],
    )
    (tmp_path / "nbs" / "experiments" / "plain.ipynb").write_text(json.dumps(notebook))
    spec = tmp_path / "plain.yaml"
    spec.write_text("experiments:\n  - notebook: plain\n    parameters: {items: three, colour: 1}\n")
    with pytest.raises(ValueError) as e:
        load_sweep(spec, root=tmp_path)
    assert sorted(e.value.problems) == [
        "experiments[0] (plain) parameters: parameter 'items' must be int like its default 3, got 'three' (str)",
        "experiments[0] (plain) parameters: unknown parameter 'colour' for plain (its parameters: out_dir, items)",
    ]


def test_all_problems_are_listed_at_once(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "experiments:\n  - notebook: musobench\n    parameters: {per_level: ten, short_preset: gpt-5, colour: 1}\n"
    )
    with pytest.raises(ValueError) as e:
        load_sweep(spec)
    assert len(e.value.problems) == 3


def test_shipped_sweep_files_are_valid():
    for path in sorted((ROOT / "nbs" / "sweeps").glob("*.yaml")):
        sweep = load_sweep(path)
        assert sweep.cells, path


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # never beside tests/test_ray_cluster.py's cluster: one Ray at a time on two cores
def test_ray_executor_runs_the_sweep_on_a_local_instance(tiny_spec, tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise  # CI installs the dev extra, which includes ray: the test must run there
        pytest.skip("the Ray executor needs the 'ray' extra")
    done = subprocess.run(
        sweep_command(tiny_spec, tmp_path, "--executor", "ray", "--ray-cpus", "2"),
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert statuses(tmp_path) == {c: "done" for c in CELLS}
    runs = finished_runs(tmp_path / "tiny")
    assert sorted(runs["cell"]) == CELLS
    assert all((Path(f) / "instances.parquet").is_file() for f in runs["folder"])


STALE_NOTEBOOK = """from pathlib import Path
import time
from reasoning_study.store import RUN_STORE, GenerationRecord, GenerationStore
with GenerationStore(Path(out_dir) / RUN_STORE) as store:
    found = len(store.keys())  # generations found stored when the run starts
    store.put_many([GenerationRecord(key='k0', model_id='m', revision='r', backend='b', prompt_json='{}', sampling_json='{}',
                                     sample_index=0, seed=0, tag='', text='ok', reasoning='', answer='', prompt_tokens=1,
                                     completion_tokens=1, cached_prompt_tokens=None, finish_reason='stop', status='answered',
                                     error=None, latency_s=0.0, created_at=time.time())])
(Path(out_dir) / 'answer.txt').write_text(f'{budget} {found}')"""


@pytest.mark.slow
def test_a_cell_whose_parameters_changed_runs_again_and_keeps_the_old_folder(tmp_path):
    "A finished cell answers only for the parameters it ran with: changed, it is stale; the old folder is set aside, its store reused."
    throwaway_project(tmp_path, "api", "out_dir = '.'  # the run folder\nbudget = 0  # a token budget", STALE_NOTEBOOK)
    spec = tmp_path / "api.yaml"
    spec.write_text("name: api\nexperiments:\n  - notebook: api\n    parameters: {budget: 8192}\n")
    first = subprocess.run(
        sweep_command(spec, tmp_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "api" / "api" / "answer.txt").read_text() == "8192 0"
    again = subprocess.run(
        sweep_command(spec, tmp_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert statuses(tmp_path, "api") == {"api": "skipped"}, again.stdout  # unchanged: finished
    # the grid's budget changed
    spec.write_text("name: api\nexperiments:\n  - notebook: api\n    parameters: {budget: 20480}\n")
    third = subprocess.run(
        sweep_command(spec, tmp_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600
    )
    assert third.returncode == 0, third.stdout + third.stderr
    assert statuses(tmp_path, "api") == {"api": "done"} and "[stale] api: changed since it ran: budget" in third.stderr
    # the new budget; the old store was reused
    assert (tmp_path / "api" / "api" / "answer.txt").read_text() == "20480 1"
    [aside] = list((tmp_path / "api" / ".stale").iterdir())
    assert (aside / "answer.txt").read_text() == "8192 0" and (aside / DONE_FILE).is_file()  # kept, not deleted
    record = json.loads((tmp_path / "api" / "api" / DONE_FILE).read_text())
    assert record["parameters"]["budget"] == 20480 and record["replaced"] == {
        "folder": str(aside),
        "changed": ["budget"],
    }
    assert list(finished_runs(tmp_path / "api")["cell"]) == ["api"]
