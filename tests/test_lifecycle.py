"""Issue #42: a grid or a run with a hosted model its provider has retired is refused before anything runs (exit 2, one
line per cell and model: the model, since when and by whose date, what to use instead), unless --allow-retired; a
model that retires within 30 days is warned about. The day is pinned with REASONING_STUDY_TODAY, the retirement
dates are the installed model map's (or a preset's own), so the lines are asserted on what the issue guarantees:
the paper grid's o4-mini and DeepSeek models are retired on 2026-12-05."""

import json
from datetime import date, timedelta
from pathlib import Path

import pytest

from reasoning_study.backends.lifecycle import TODAY_ENV, preset_lifecycle
from reasoning_study.cli import main, run_main, run_problems
from reasoning_study.sweep.index import DONE_FILE, recorded_parameters
from reasoning_study.sweep.spec import cell_roles, load_sweep

ROOT = Path(__file__).resolve().parents[1]
PAPER_GRID = ROOT / "nbs" / "sweeps" / "musobench.yaml"
ISSUE_DAY = "2026-12-05"
DEEPSEEK_RUN = "{short_preset: deepseek-v3, long_preset: deepseek-r1, max_tokens: 8192, reflection_ks: []}"


@pytest.fixture(scope="module")
def o4_mini_retires() -> date:
    "o4-mini's retirement date as this checkout knows it (the installed map's, or its preset's own)."
    retires = preset_lifecycle("o4-mini").retires
    if retires is None:
        pytest.skip("no retirement date for o4-mini: LiteLLM's model map is not installed (make install adds it)")
    return retires


def cells_using(*presets: str) -> list:
    "The paper grid's cells with a role on one of `presets`."
    return [
        c
        for c in load_sweep(PAPER_GRID).cells
        if {r.preset for r in cell_roles(c.notebook, c.parameters)} & set(presets)
    ]


def dry_run(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    status = main([str(PAPER_GRID), "--dry-run", "--out", str(tmp_path / "out"), *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def retired_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "retired since" in line]


def test_the_paper_grid_is_refused_on_the_issue_day(o4_mini_retires, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(TODAY_ENV, ISSUE_DAY)
    status, out, err = dry_run(tmp_path, capsys)
    assert status == 2, err
    lines = retired_lines(err)
    o4 = [line for line in lines if "preset 'o4-mini'" in line]
    assert o4 and all(f"retired since {o4_mini_retires}" in line and "instead: " in line for line in o4), lines
    assert {c.id for c in cells_using("o4-mini")} == {line.split(":")[0].strip(" -") for line in o4}  # each cell named
    assert any("preset 'deepseek-r1' (DeepSeek model 'deepseek-reasoner')" in line for line in lines), lines
    assert any("preset 'deepseek-v3' (DeepSeek model 'deepseek-chat')" in line for line in lines), lines
    assert "--allow-retired runs them anyway" in err
    assert "| **total** |" in out  # a refused dry run still shows the cells and their bill
    assert not (tmp_path / "out").exists()
    # the user who still reaches them: the same lines, as a note, and the grid passes
    status, out, err = dry_run(tmp_path, capsys, "--allow-retired")
    assert status == 0, err
    assert sorted(retired_lines(err)) == sorted(lines) and "run anyway" in err
    assert all(c.id in out for c in cells_using("o4-mini"))  # listed


def test_a_day_before_retirement_refuses_nothing_and_ten_days_before_warns(
    o4_mini_retires, tmp_path, capsys, monkeypatch
):
    # well before every date: no line at all
    monkeypatch.setenv(TODAY_ENV, "2026-01-01")
    status, _, err = dry_run(tmp_path, capsys)
    assert status == 0 and "retire" not in err, err
    # ten days before o4-mini's date, its cells only (the DeepSeek cells are not chosen): a warning, not a refusal
    monkeypatch.setenv(TODAY_ENV, (o4_mini_retires - timedelta(days=10)).isoformat())
    o4 = [c.id for c in cells_using("o4-mini")]
    status, _, err = dry_run(tmp_path, capsys, "--only", ",".join(o4))
    assert status == 0, err
    warned = [line for line in err.splitlines() if "preset 'o4-mini'" in line]
    assert len(warned) == len(o4) and all(f"retires on {o4_mini_retires}, in 10 days" in w for w in warned), err
    assert "retired since" not in err and "retire soon" in err


def test_only_the_cells_still_to_run_count(tmp_path, capsys, monkeypatch):
    "A retired model's cells that finished (their done record is current) are not refused: nothing of them runs."
    monkeypatch.setenv(TODAY_ENV, ISSUE_DAY)
    status, _, err = dry_run(tmp_path, capsys)
    retired = {line.split(":")[0].strip(" -") for line in retired_lines(err)}
    if not retired:
        pytest.skip("no retired model in the grid on the issue day (LiteLLM's model map is not installed)")
    sweep = load_sweep(PAPER_GRID)
    for cell in sweep.cells:
        if cell.id in retired:
            folder = sweep.folder(tmp_path / "out") / cell.id
            folder.mkdir(parents=True)
            record = {"parameters": recorded_parameters(cell), "fingerprint": cell.fingerprint}
            (folder / DONE_FILE).write_text(json.dumps(record))
    status, out, err = dry_run(tmp_path, capsys)
    assert status == 0 and not retired_lines(err), err


def test_rs_run_refuses_a_retired_model(o4_mini_retires, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(TODAY_ENV, ISSUE_DAY)
    keys = {"DEEPSEEK_API_KEY": "sk-" + "d" * 32}
    params = {"short_preset": "deepseek-v3", "long_preset": "deepseek-r1", "max_tokens": 8192, "reflection_ks": []}
    problems = run_problems("musobench", params, env=keys)
    assert len(problems) == 2 and all("retired since" in p and "--allow-retired" in p for p in problems), problems
    assert run_problems("musobench", params, env=keys, allow_retired=True) == []
    assert run_problems("musobench", params, env=keys, today=date(2026, 1, 1)) == []
    # the command: refused before papermill starts, the models named
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    assert run_main(["musobench", str(tmp_path / "run" / "run.ipynb"), "-y", DEEPSEEK_RUN]) == 2
    err = capsys.readouterr().err
    assert "preset 'deepseek-r1'" in err and "preset 'deepseek-v3'" in err and "retired since" in err, err
    # --allow-retired lifts only that refusal: the unset key still stops it
    assert run_main(["musobench", str(tmp_path / "run" / "run.ipynb"), "-y", DEEPSEEK_RUN, "--allow-retired"]) == 2
    err = capsys.readouterr().err
    assert "DEEPSEEK_API_KEY is not set" in err and "retired since" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_day_that_is_no_date_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(TODAY_ENV, "05.12.2026")
    status, _, err = dry_run(tmp_path, capsys)
    assert status == 2 and f"rs-sweep: {TODAY_ENV}: '05.12.2026' is not an ISO date" in err, err
