"""Notebook hygiene: papermill's `parameters` tag survives nbdev_clean, and every experiment has one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUNNABLE = sorted((ROOT / "nbs" / "experiments").glob("*.ipynb")) + sorted(
    (ROOT / "nbs" / "benchmarks").glob("*.ipynb")
)


def _parameter_cells(path):
    return [
        c for c in json.loads(Path(path).read_text())["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])
    ]


@pytest.mark.parametrize("nb", RUNNABLE, ids=lambda p: p.name)
def test_every_runnable_notebook_has_one_parameters_cell(nb):
    assert len(_parameter_cells(nb)) == 1


def test_parameters_tag_survives_nbdev_clean(tmp_path):
    src = ROOT / "nbs" / "experiments" / "musobench_build.ipynb"
    nb = json.loads(src.read_text())
    nb["cells"][1]["metadata"]["scrolled"] = True  # a key nbdev_clean must drop
    nb["cells"][1].update(execution_count=7)
    target = ROOT / "nbs" / "experiments" / "_tmp_clean_check.ipynb"  # inside the project so nbdev reads settings.ini
    target.write_text(json.dumps(nb))
    try:
        subprocess.run([str(BIN / "nbdev_clean"), "--fname", str(target)], cwd=ROOT, check=True, capture_output=True)
        cleaned = json.loads(target.read_text())
    finally:
        target.unlink(missing_ok=True)
    assert len([c for c in cleaned["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]) == 1
    assert all("scrolled" not in c.get("metadata", {}) for c in cleaned["cells"])  # cleaning did happen
    assert all(c.get("execution_count") is None for c in cleaned["cells"] if c["cell_type"] == "code")


def test_committed_notebooks_are_clean():
    "nbdev_clean leaves every committed notebook unchanged (no outputs or stray metadata)."
    for nb in sorted((ROOT / "nbs").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in nb.parts:
            continue
        cells = json.loads(nb.read_text())["cells"]
        assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code"), f"{nb.name} has outputs"
