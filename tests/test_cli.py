"""Issue #14 point 8: `rs-rescore FOLDER...` and `rs-report FOLDER... [--out DIR]`, run as commands (subprocess) on a
small run folder: a one-instance MuSoBench build with its run.json."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.studies.musobench.build import MuSoBenchBuildConfig
from reasoning_study.studies.runner import execute

pytestmark = pytest.mark.slow  # console scripts in fresh processes on a built run folder

ROOT = Path(__file__).resolve().parents[1]


def command(name: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    "A console script as settings.ini declares it (`rs-rescore=reasoning_study.cli:rescore_main`, ...), run in a fresh process."
    code = f"import sys; from reasoning_study.cli import {name}; sys.exit({name}(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def build_folder(tmp_path) -> Path:
    folder = tmp_path / "build"
    folder.mkdir()
    config = MuSoBenchBuildConfig(tasks=["subsetsum"], levels=[1], per_level=1, workers=1, out_dir=str(folder))
    execute("musobench_build", config, folder)  # run.json, raw table, results, report
    return folder


def test_rescore_says_what_changed_and_writes_it_back(build_folder, tmp_path):
    done = command("rescore_main", str(build_folder))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{build_folder} (musobench_build): instances unchanged, summary unchanged"
    stored = pd.read_parquet(build_folder / "summary.parquet")
    # a stale table
    pd.read_parquet(build_folder / "summary.parquet").iloc[:0].to_parquet(build_folder / "summary.parquet")
    again = command("rescore_main", str(build_folder))
    assert again.stdout.strip() == f"{build_folder} (musobench_build): instances unchanged, summary changed", (
        again.stdout
    )
    # written back as the run made it
    pd.testing.assert_frame_equal(pd.read_parquet(build_folder / "summary.parquet"), stored)
    files = sorted(p.name for p in build_folder.iterdir())

    # stale again: --check says so, writes nothing, exits 1
    stored.iloc[:0].to_parquet(build_folder / "summary.parquet")
    checked = command("rescore_main", "--check", str(build_folder))
    assert (
        checked.returncode == 1
        and checked.stdout.strip() == f"{build_folder} (musobench_build): instances unchanged, summary changed"
    )
    assert len(pd.read_parquet(build_folder / "summary.parquet")) == 0
    command("rescore_main", str(build_folder))
    assert command("rescore_main", "--check", str(build_folder)).returncode == 0
    # exactly the study's declared files: nothing new was written
    assert sorted(p.name for p in build_folder.iterdir()) == files

    empty = tmp_path / "empty"
    empty.mkdir()
    missing = command("rescore_main", str(empty), str(build_folder))
    assert missing.returncode == 1
    assert f"{empty}: no run.json, not re-scored" in missing.stderr
    # the others still are
    assert f"{build_folder} (musobench_build): instances unchanged, summary unchanged" in missing.stdout


def test_report_over_a_run_folder(build_folder, tmp_path):
    out = tmp_path / "report"
    done = command("report_main", str(build_folder), "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip().endswith(f"report: {out / 'report.html'}")
    assert (out / "report.html").is_file() and (out / "runs" / "build" / "sweep_cell.json").is_file()
    assert (out / "runs" / "build" / "summary.parquet").resolve() == (build_folder / "summary.parquet").resolve()
    bad = command("report_main", str(tmp_path / "nothing"), "--out", str(out))
    assert bad.returncode == 1 and "neither a run folder" in bad.stderr


# --- issue #32 point 4: the commands from outside the project folder ----------------------------------------------


def test_rs_sweep_from_another_folder_reads_the_sweep_file_there(tmp_path):
    "A sweep file copied out of the checkout, given absolute and relative, from a working directory outside it."
    (tmp_path / "grids").mkdir()
    sweep = tmp_path / "grids" / "musobench.yaml"
    sweep.write_text((ROOT / "nbs" / "sweeps" / "musobench.yaml").read_text())
    for cwd, path in (
        (tmp_path, str(sweep)),
        (tmp_path, "grids/musobench.yaml"),
        (tmp_path / "grids", "musobench.yaml"),
    ):
        done = command("main", path, "--dry-run", "--allow-retired", "--out", "runs", cwd=cwd)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and "musobench" in done.stdout
    rel = command("main", "grids/missing.yaml", "--dry-run", cwd=tmp_path)  # relative to the working directory
    assert (
        rel.returncode == 2 and "Traceback" not in rel.stderr and str(tmp_path / "grids" / "missing.yaml") in rel.stderr
    )


def test_without_a_checkout_the_commands_say_what_to_do_in_one_line(tmp_path):
    "An installed package that is no checkout, run outside any: exit 2 and one line, no traceback."
    sweep = tmp_path / "musobench.yaml"
    sweep.write_text((ROOT / "nbs" / "sweeps" / "musobench.yaml").read_text())
    for name, args in (("main", [str(sweep), "--dry-run"]), ("run_main", ["musobench_build", "out/run.ipynb"])):
        code = (
            "import sys; import reasoning_study.runs as runs; runs.installed_checkout = lambda: None; "
            f"from reasoning_study.cli import {name}; sys.exit({name}(sys.argv[1:]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            timeout=600,
        )
        assert done.returncode == 2, (name, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "install one editable (pip install -e <checkout>)" in done.stderr


# --- issue #43 point 10: what the README says of rs-run and rs-rescore is so -------------------------------------

RUN_ARGS = ["-p", "per_level", "1", "-p", "workers", "1", "-y", "tasks: [subsetsum]", "-y", "levels: [1]"]


def test_rs_run_from_another_folder_keeps_the_notebook_and_its_run_together(tmp_path):
    """The README's command, typed in a folder outside the checkout: the notebook path is found in the project, the
    executed notebook and `out_dir` land in that folder, side by side; a run that went well prints no kernel noise."""
    done = command(
        "run_main",
        "nbs/experiments/musobench_build.ipynb",
        "small/run.ipynb",
        "-p",
        "out_dir",
        "small",
        *RUN_ARGS,
        "--no-progress-bar",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"executed notebook: {tmp_path / 'small' / 'run.ipynb'}"
    assert (tmp_path / "small" / "run.ipynb").is_file() and (tmp_path / "small" / "subsetsum.jsonl").is_file()
    assert not (ROOT / "small").exists()  # nothing in the checkout
    # no `[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel`, no warning about an unencrypted kernel
    assert "IPKernelApp" not in done.stderr and "encryption" not in done.stderr, done.stderr


def test_rs_runs_kernel_is_not_interrupted_at_shutdown_and_is_encrypted(tmp_path, monkeypatch):
    """The cause of the noise: jupyter_client interrupts every kernel it shuts down (the SIGINT ipykernel then logs as an
    ERROR) and leaves TCP unencrypted; `run_kernel_manager`'s does neither."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    from reasoning_study.cli import run_kernel_manager

    interrupts = []

    async def spy(self):
        interrupts.append(type(self).__name__)

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", spy)

    async def start_and_stop(cls, log: Path) -> str:
        km = cls(kernel_name="python3")
        with log.open("w") as err:
            await km.start_kernel(stderr=err)
            await km.shutdown_kernel()
        return log.read_text()

    plain = asyncio.run(start_and_stop(AsyncKernelManager, tmp_path / "plain.log"))
    ours = asyncio.run(start_and_stop(run_kernel_manager(), tmp_path / "ours.log"))
    assert interrupts == ["AsyncKernelManager"]  # the plain manager interrupts at shutdown; ours does not
    assert "without encryption" in plain and "without encryption" not in ours, (plain, ours)


def test_rescore_check_says_extended_for_new_columns_and_fails_only_on_a_moved_value(build_folder):
    "A run folder from before a study added columns (the intervals): `extended`, exit 0; a value that moved: exit 1."
    path = build_folder / "summary.parquet"
    stored = pd.read_parquet(path)
    assert stored.shape[1] >= 2
    stored.iloc[:, :-1].to_parquet(path, index=False)  # the table as an older run wrote it: one column fewer
    checked = command("rescore_main", "--check", str(build_folder))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == f"{build_folder} (musobench_build): instances unchanged, summary extended"
    moved = stored.copy()
    column = next(c for c in moved.columns if pd.api.types.is_numeric_dtype(moved[c]))
    moved.loc[0, column] = moved.loc[0, column] + 1
    moved.to_parquet(path, index=False)
    checked = command("rescore_main", "--check", str(build_folder))
    assert checked.returncode == 1
    assert checked.stdout.strip() == f"{build_folder} (musobench_build): instances unchanged, summary changed"
