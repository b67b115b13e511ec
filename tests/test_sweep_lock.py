"""Issue #14 point 7: a sweep never runs a cell twice, and no run outlives its sweep.

A tiny experiment notebook in a throw-away project root (it sleeps between items and appends each
item to a resumable store, the way the real stores do) makes each cell take a few seconds:
- the sweep is killed with SIGKILL mid-cell and rerun at once: the rerun waits for the killed run's
  processes to be gone, resumes the cell in its work folder; every store holds each item once,
  the finished folder is untouched, no process is left over;
- two sweeps on one output folder at once: the second waits for the cells the first holds (and says
  so in its log), then skips them as finished; each cell runs once.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_sweep import notebook_processes as leftovers  # guard, papermill and kernel processes naming a folder

from reasoning_study.sweep.index import DONE_FILE, WORK
from reasoning_study.sweep.locks import lock_path

pytestmark = pytest.mark.slow  # sweeps killed and rerun (real processes)

ITEMS = 6
CELLS = [f"tiny__seed={s}" for s in range(3)]
SPEC = "name: locks\nexperiments:\n  - notebook: tiny\n    grid: {seed: [0, 1, 2]}\n"


def code(text: str, tags=()) -> dict:
    return dict(
        cell_type="code",
        id=f"c{len(tags)}",
        metadata={"tags": list(tags)},
        source=text,
        outputs=[],
        execution_count=None,
    )


TINY = dict(
    nbformat=4,
    nbformat_minor=5,
    metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    cells=[
        code(
            f"out_dir = '.'  # the run folder\nseed = 0  # a grid parameter\nitems = {ITEMS}  # items to store\n"
            "pause = 0.3  # seconds per item",
            tags=["parameters"],
        ),
        code(
            "import json, os, time\nfrom pathlib import Path\n"
            "store = Path(out_dir) / 'store.jsonl'\n"
            "with open(Path(out_dir) / 'starts.txt', 'a') as f: f.write(f'{os.getpid()}\\n')\n"
            "have = {json.loads(l)['item'] for l in store.read_text().splitlines()} if store.exists() else set()\n"
            "for i in range(items):\n"
            "    if i in have: continue  # resumed: what was stored is kept\n"
            "    time.sleep(pause)\n"
            "    with open(store, 'a') as f: f.write(json.dumps({'item': i, 'pid': os.getpid()}) + '\\n')"
        ),
    ],
)


@pytest.fixture
def project(tmp_path) -> Path:
    "A project root holding only the tiny experiment notebook and the sweep file."
    (tmp_path / "settings.ini").write_text("[DEFAULT]\nlib_name = reasoning_study\n")
    (tmp_path / "nbs" / "experiments").mkdir(parents=True)
    (tmp_path / "nbs" / "experiments" / "tiny.ipynb").write_text(json.dumps(TINY))
    (tmp_path / "locks.yaml").write_text(SPEC)
    return tmp_path


def start(project: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "reasoning_study.cli", "locks.yaml", "--out", "outputs"],
        cwd=project,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(condition, process: subprocess.Popen | None = None, timeout: float = 180):
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout, "timed out"
        assert process is None or process.poll() is None, process.stdout.read()
        time.sleep(0.1)


def rows(folder: Path) -> list[int]:
    store = folder / "store.jsonl"
    return [json.loads(line)["item"] for line in store.read_text().splitlines()] if store.exists() else []


def test_sigkill_mid_cell_then_rerun_at_once(project):
    sweep = project / "outputs" / "locks"
    first = start(project)
    wait_for(lambda: (sweep / CELLS[0] / DONE_FILE).is_file() and len(rows(sweep / WORK / CELLS[1])) >= 2, first)
    record = (sweep / CELLS[0] / DONE_FILE).read_text()
    first.send_signal(signal.SIGKILL)
    first.wait()
    rerun = subprocess.run(
        [sys.executable, "-m", "reasoning_study.cli", "locks.yaml", "--out", "outputs"],
        cwd=project,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"[start] {CELLS[0]}" not in rerun.stdout and f"[start] {CELLS[1]}" in rerun.stdout
    assert (sweep / CELLS[0] / DONE_FILE).read_text() == record  # the finished folder is intact, not run again
    for cell in CELLS:
        # every item once: no orphan wrote beside the rerun
        assert sorted(rows(sweep / cell)) == list(range(ITEMS)), cell
    starts = (sweep / CELLS[1] / "starts.txt").read_text().split()
    assert len(starts) == 2  # the killed run and the one that resumed it (2 items were kept)
    assert not psutil.pid_exists(int(starts[0])) or psutil.Process(int(starts[0])).status() == psutil.STATUS_ZOMBIE
    assert len((sweep / CELLS[2] / "starts.txt").read_text().split()) == 1
    assert not (sweep / WORK).exists()  # no lock file, no work folder left
    time.sleep(0.5)
    assert leftovers(project) == []


def test_killed_sweep_takes_its_runs_along(project):
    "Without a rerun: the killed sweep's papermill run and kernel are gone within seconds, and the lock is free."
    sweep = project / "outputs" / "locks"
    first = start(project)
    wait_for(lambda: len(rows(sweep / WORK / CELLS[0])) >= 1, first)
    kernel = int((sweep / WORK / CELLS[0] / "starts.txt").read_text().split()[0])
    first.send_signal(signal.SIGKILL)
    first.wait()
    wait_for(lambda: leftovers(project) == [] and not psutil.pid_exists(kernel), timeout=20)
    kept = rows(sweep / WORK / CELLS[0])
    time.sleep(1.5)
    assert rows(sweep / WORK / CELLS[0]) == kept  # nothing writes any more


def test_two_sweeps_at_once_share_the_cells(project):
    sweep = project / "outputs" / "locks"
    first = start(project)
    wait_for(lambda: lock_path(sweep, CELLS[0]).is_file() and (sweep / WORK / CELLS[0] / "starts.txt").is_file(), first)
    second = start(project)
    out_first, _ = first.communicate(timeout=300)
    out_second, _ = second.communicate(timeout=300)
    assert first.returncode == 0 and second.returncode == 0, out_first + out_second
    waited = [line for line in out_second.splitlines() if line.startswith("[wait] ")]
    assert waited and f": locked by pid {first.pid} on " in waited[0], out_second  # it says that it waits, and for whom
    assert "waiting for it (a cell runs in one sweep at a time)" in waited[0]
    for cell in CELLS:
        assert (sweep / cell / DONE_FILE).is_file()
        assert len((sweep / cell / "starts.txt").read_text().split()) == 1, cell  # one run per cell
        assert sorted(rows(sweep / cell)) == list(range(ITEMS)), cell
    started = [
        line.split()[1] for out in (out_first, out_second) for line in out.splitlines() if line.startswith("[start] ")
    ]
    assert sorted(started) == CELLS  # each cell started by one of the two sweeps (a cell it waited for is only skipped)
    assert not (sweep / WORK).exists()
