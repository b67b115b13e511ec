"""One door per study: a fourth study, written outside the package (`tests/fixtures/tally_study`: its own task, counting
letters, and its own metric, exact-match accuracy with an interval), registered through the registry alone
(`REASONING_STUDY_STUDIES`), goes through every layer above the studies with no edit there: `rs-sweep --dry-run`, a
rehearsal, `rs-report` (its section and its rows of the figure catalogue), the sample browser and `rs-rescore --check`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).parent / "fixtures"
ENTRY = "tally=tally_study.study:TallyConfig"


def environment() -> dict:
    "This environment with the fixture package importable and the tally study registered (kernels inherit both)."
    path = os.pathsep.join(p for p in [str(FIXTURES), os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONPATH": path, "REASONING_STUDY_STUDIES": ENTRY, "OMP_NUM_THREADS": "1"}


def command(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(BIN / args[0]), *args[1:]], cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=timeout
    )
    return done


def test_the_registry_takes_a_study_from_outside(monkeypatch):
    "The entry names the study, its module and its config; its module ships its own experiment notebook."
    monkeypatch.syspath_prepend(str(FIXTURES))
    from reasoning_study.studies import registry

    monkeypatch.setitem(registry.STUDIES, "musobench", registry.STUDIES["musobench"])  # restored after the test
    try:
        assert registry.register_plugins({registry.STUDIES_ENV: ENTRY}) == ["tally"]
        entry = registry.STUDIES["tally"]
        assert registry.contract_problems(entry.load(), entry) == []
        assert registry.study_notebook("tally") == FIXTURES / "tally_study" / "tally.ipynb"
        assert [f.experiment for f in registry.paper_figures() if f.paper == "Tally"] == ["tally"]
        assert registry.sample_kinds()["tally"].view == "texts"
    finally:
        registry.STUDIES.pop("tally", None)


@pytest.mark.slow
def test_a_fourth_study_through_every_door(tmp_path):
    grid = tmp_path / "tally.yaml"
    grid.write_text(
        yaml.safe_dump(
            {
                "name": "tally-grid",
                "experiments": [{"notebook": "tally", "parameters": {"n_items": 6}, "grid": {"seed": [0, 1]}}],
            }
        )
    )
    # the sweep checks its cells with the study's config and roles, and lists them
    dry = command("rs-sweep", str(grid), "--dry-run", "--out", str(tmp_path / "out"))
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "tally__seed=0" in dry.stdout and "tally__seed=1" in dry.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"experiments": [{"notebook": "tally", "parameters": {"n_item": 6}}]}))
    refused = command("rs-sweep", str(bad), "--dry-run")
    assert (
        refused.returncode == 2 and "unknown parameter 'n_item'" in refused.stderr and "TallyConfig" in refused.stderr
    )

    # a rehearsal: its sizes cut by the study, its model's stand-in (the embedded model stands for itself), the report
    rehearsed = command("rs-sweep", str(grid), "--rehearse", "--report", "--out", str(tmp_path / "rehearsal"))
    assert rehearsed.returncode == 0, (rehearsed.stdout + rehearsed.stderr)[-4000:]
    sweep = tmp_path / "rehearsal" / "tally-grid"
    table = (sweep / "rehearsal.md").read_text()
    assert "2 ran" in table and "model: smollm2-135m (transformers)" in table and "no vLLM engine" in table, table
    run = sweep / "tally__seed=0"
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "finished" and record["study"] == "tally" and record["config"]["n_items"] == 2  # cut
    answers = pd.read_parquet(run / "answers.parquet")
    assert len(answers) == 2 and set(answers["status"]) <= {"answered", "truncated"}

    # rs-report over the rehearsed sweep: the study's section and its row of the catalogue
    report_dir = tmp_path / "report"
    reported = command("rs-report", str(sweep), "--out", str(report_dir))
    assert reported.returncode == 0, (reported.stdout + reported.stderr)[-4000:]
    figures = (report_dir / "figures.md").read_text()
    assert "## Tally" in figures and "**Table 1** (exact-match accuracy of counted letters): drawn" in figures, figures
    accuracy = (report_dir / "tally" / "tables" / "table1_accuracy.md").read_text()
    assert "smollm2-135m" in accuracy and "[" in accuracy  # the accuracy with its interval
    page = (report_dir / "report.html").read_text()
    assert "Tally: counting letters" in page and 'href="browser/tally.html"' in page

    # the sample browser: one page of its kind, every answer of both runs in it, shown in the plain `texts` view
    browser = report_dir / "browser" / "tally.html"
    manifest = json.loads(browser.read_text().split('id="manifest">')[1].split("</script>")[0])
    assert sum(c["n"] for c in manifest["chunks"]) == 4  # two runs x two words
    data = "".join(p.read_text() for p in (report_dir / "browser" / "tally").glob("*.js"))
    assert '"view":"texts"' in data.replace(" ", "") and "How many times does the letter" in data

    # rs-rescore --check: the run folder scored again from its raw table and run.json, every stored table the same
    checked = command("rs-rescore", "--check", str(run))
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]
