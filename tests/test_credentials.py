"""Credentials never land in a run folder, and each provider reads its own key variable.

A notebook run (`rs-run`) and a sweep (`rs-sweep`, with its report) of the MuSoBench study on the two DeepSeek
presets, against a scripted OpenAI-compatible server on 127.0.0.1 that receives the key from the environment and
echoes the request's headers (`Authorization: Bearer <key>`) in some of its error bodies, as some proxies do: the
server saw the key, the echoed errors were recorded (redacted), and no file anywhere under the output folder holds
the key (every byte of every file is searched, SQLite stores and parquet tables included). A literal key in a sweep
file or on `rs-run`'s command line is refused with exit status 2 before anything runs; an unset key variable stops
a run before its first request, naming the variable (`rs-run`: exit 2; a sweep: the cells that need it fail without
starting, the others run; a direct papermill run: the notebook's parameter check); the paper grid's two API cases
(DeepSeek-R1/V3 and o4-mini/gpt-4o-mini) validate with two different variables set."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from local_server import LocalServer, chat_reply

from reasoning_study.backends.presets import load_backend
from reasoning_study.backends.request import chat
from reasoning_study.cli import main, run_main
from reasoning_study.sweep.spec import load_sweep

pytestmark = pytest.mark.slow  # papermill runs and sweeps that must leave no trace of a key

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KEY = "sk-" + secrets.token_hex(16)  # made up for this test session: it must be found nowhere on disk
OTHER_KEY = "sk-" + secrets.token_hex(16)


class EchoServer(LocalServer):
    "Answers chat completions; every third request fails with HTTP 400 echoing the request's headers."

    def __init__(self):
        super().__init__()
        self.authorizations = []

    def respond_with_headers(self, body, headers):
        with self.lock:
            self.record(body)
            self.authorizations.append(headers.get("Authorization") or headers.get("authorization"))
            echo = len(self.bodies) % 3 == 0
        if echo:
            return 400, {}, {"error": {"message": "bad request", "request_headers": headers}}
        return 200, {}, chat_reply("Solution 1: {1, 2}\nConfidence: 80", reasoning="Let me add them up.")


@pytest.fixture(scope="module")
def server():
    with EchoServer() as s:
        yield s


def study_parameters(server, out_dir: Path | None = None) -> dict:
    "The MuSoBench study on DeepSeek's pair, the smallest slice, sent to the scripted server."
    values = dict(
        short_preset="deepseek-v3",
        long_preset="deepseek-r1",
        tasks=["subsetsum"],
        levels=[1],
        per_level=1,
        reflection_ks=[],
        sc_samples=0,
        max_tokens=64,
        reply_openings=["confidence"],
        backend_options={"base_url": server.base_url, "prefill_mode": "prefix", "max_retries": 0},
    )
    return {**values, **({"out_dir": str(out_dir)} if out_dir else {})}


def environment(**keys) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY")}
    return {**env, "OMP_NUM_THREADS": "1", **keys}


def files_holding(folder: Path, *secrets_: str) -> list[str]:
    "Every file under `folder` whose bytes contain one of the secrets (or the random part of one)."
    needles = [s.encode() for s in secrets_] + [s.removeprefix("sk-").encode() for s in secrets_]
    return [
        str(p.relative_to(folder))
        for p in sorted(folder.rglob("*"))
        if p.is_file() and any(n in p.read_bytes() for n in needles)
    ]


def files_mentioning(folder: Path, text: str) -> list[str]:
    return [
        str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if p.is_file() and text.encode() in p.read_bytes()
    ]


def test_a_notebook_run_leaves_no_trace_of_the_key(server, tmp_path):
    out = tmp_path / "musobench-deepseek"
    asked = len(server.bodies)
    done = subprocess.run(
        [
            str(BIN / "rs-run"),
            "musobench",
            str(out / "run.ipynb"),
            "--no-progress-bar",
            "-y",
            yaml.safe_dump(study_parameters(server, out)),
        ],
        cwd=ROOT,
        env=environment(DEEPSEEK_API_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(server.bodies) > asked and set(server.authorizations[asked:]) == {f"Bearer {KEY}"}  # the key was sent
    assert (out / "run.ipynb").is_file() and (out / "params.json").is_file() and (out / "generations.sqlite").is_file()
    assert files_mentioning(out, "[redacted $DEEPSEEK_API_KEY]"), "the echoed headers were recorded (redacted)"
    assert files_holding(out, KEY) == []
    assert KEY not in done.stdout + done.stderr


def test_a_sweep_and_its_report_leave_no_trace_of_the_key(server, tmp_path):
    spec = tmp_path / "deepseek.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "deepseek",
                "experiments": [{"notebook": "musobench", "label": "api", "parameters": study_parameters(server)}],
            },
            sort_keys=False,
        )
    )
    out = tmp_path / "out"
    asked = len(server.bodies)
    # every third request fails on purpose (its error echoes the headers): allow them, else the cell is incomplete
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reasoning_study.cli",
            str(spec),
            "--out",
            str(out),
            "--report",
            "--max-error-share",
            "1",
        ],
        cwd=ROOT,
        env=environment(DEEPSEEK_API_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert set(server.authorizations[asked:]) == {f"Bearer {KEY}"}
    sweep = out / "deepseek"
    for written in [
        "api/sweep_parameters.yaml",
        "api/sweep_cell.json",
        "api/notebook.ipynb",
        "api/papermill.log",
        "api/params.json",
        "sweep_summary.md",
        "report/report.html",
    ]:
        assert (sweep / written).is_file(), written
    assert files_mentioning(sweep, "[redacted $DEEPSEEK_API_KEY]")
    assert files_holding(tmp_path, KEY) == []  # the whole tree: sweep file, run folder, report
    assert KEY not in done.stdout + done.stderr


def test_backend_errors_are_redacted_where_they_are_made(server, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    backend = load_backend("deepseek-v3", base_url=server.base_url, max_retries=0)
    answers = backend.generate([chat(f"Q{k}") for k in range(3)])  # one of three is answered by an echo of the headers
    errors = [a.error for [a] in answers if a.error]
    assert errors and all("Bearer [redacted $DEEPSEEK_API_KEY]" in e and KEY not in e for e in errors)
    assert "api_key=" not in repr(backend.options) and KEY not in repr(backend.options)


# --- a key is never a parameter ------------------------------------------------------------------------


def literal_key_sweep(tmp_path: Path, where: str) -> Path:
    values = {"short_preset": "deepseek-v3", "long_preset": "deepseek-r1", "max_tokens": 8192, "reflection_ks": []}
    if where == "api_key option":
        values["backend_options"] = {"base_url": "https://api.deepseek.com/beta", "api_key": KEY}
    elif where == "key-shaped value":
        values = {**values, "backend_options": {"extra_body": {"note": KEY}}}
    spec = tmp_path / "leaky.yaml"
    spec.write_text(yaml.safe_dump({"name": "leaky", "experiments": [{"notebook": "musobench", "parameters": values}]}))
    return spec


@pytest.mark.parametrize("where", ["api_key option", "key-shaped value"])
def test_a_literal_key_in_a_sweep_file_is_rejected(where, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", OTHER_KEY)
    spec = literal_key_sweep(tmp_path, where)
    for dry in ([], ["--dry-run"]):
        assert main([str(spec), "--out", str(tmp_path / "out"), *dry]) == 2
        err = capsys.readouterr().err
        assert (
            "nothing was run" in err and "keys come from the environment only" in err and "DEEPSEEK_API_KEY" in err
        ), err
        assert KEY not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["-y", f"backend_options: {{base_url: 'https://api.deepseek.com/beta', api_key: {KEY}}}"],
        ["-p", "model", KEY],  # a key-shaped value in any parameter
    ],
)
def test_a_literal_key_on_the_rs_run_command_line_is_rejected(argv, tmp_path, capsys):
    output = tmp_path / "run" / "run.ipynb"
    assert (
        run_main(
            [
                "musobench",
                str(output),
                "-p",
                "short_preset",
                "deepseek-v3",
                "-p",
                "long_preset",
                "deepseek-r1",
                "-p",
                "max_tokens",
                "8192",
                "-y",
                "reflection_ks: []",
                "-p",
                "out_dir",
                str(tmp_path / "run"),
                *argv,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "keys come from the environment only" in err and "DEEPSEEK_API_KEY" in err and KEY not in err, err
    assert not (tmp_path / "run").exists()  # papermill never started: no executed notebook holds the key


def test_a_missing_variable_stops_a_run_before_its_first_request(tmp_path):
    "rs-run refuses at once; a direct papermill run fails in the notebook's parameter check, naming the variable."
    env = environment()
    values = {
        "short_preset": "deepseek-v3",
        "long_preset": "deepseek-r1",
        "max_tokens": 8192,
        "reflection_ks": [],
        "out_dir": str(tmp_path / "direct"),
    }
    refused = subprocess.run(
        [str(BIN / "rs-run"), "musobench", str(tmp_path / "run" / "run.ipynb"), "-y", yaml.safe_dump(values)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2 and "the key variable DEEPSEEK_API_KEY is not set" in refused.stderr, refused.stderr
    assert not (tmp_path / "run").exists()
    (tmp_path / "direct").mkdir()
    direct = subprocess.run(
        [
            str(BIN / "papermill"),
            "nbs/experiments/musobench.ipynb",
            str(tmp_path / "direct" / "run.ipynb"),
            "--cwd",
            "nbs",
            "--no-progress-bar",
            "-y",
            yaml.safe_dump(values),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert direct.returncode != 0
    assert "calls https://api.deepseek.com with the key in $DEEPSEEK_API_KEY, which is not set" in direct.stderr, (
        direct.stderr[-3000:]
    )
    assert not (tmp_path / "direct" / "generations.sqlite").exists()  # nothing was generated: no request went out


# --- the paper grid: each provider its own variable ---------------------------------------------------------

PAPER_GRID = ROOT / "nbs" / "sweeps" / "musobench.yaml"


def api_cells() -> dict:
    return {c.id: c for c in load_sweep(PAPER_GRID).cells if c.id.startswith("api__")}


def test_the_paper_grids_api_cases_read_two_variables():
    cells = api_cells()
    assert {c.keys for i, c in cells.items() if i.startswith(("api__deepseek-r1__", "api__deepseek-v3__"))} == {
        ("DEEPSEEK_API_KEY",)
    }
    assert {c.keys for i, c in cells.items() if i.startswith(("api__o4-mini__", "api__gpt-4o-mini__"))} == {
        ("OPENAI_API_KEY",)
    }
    assert len(cells) == 8
    # the open weights' host: its URL and its key from variables of their own; the successor pair: OpenAI's key
    others = {c.id.split("__")[0]: c.keys for c in load_sweep(PAPER_GRID).cells if not c.id.startswith("api__")}
    assert others.pop("deepseek-open") == ("DEEPSEEK_HOST_URL", "DEEPSEEK_HOST_API_KEY")
    assert others.pop("openai-successor") == ("OPENAI_API_KEY",)
    assert set(others.values()) == {()}  # GPU cells need no key


def test_the_paper_grids_api_cases_validate_with_two_variables_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OTHER_KEY)
    # the paper's API models are retired (tests/test_lifecycle.py): these cells run only when asked for
    assert main([str(PAPER_GRID), "--dry-run", "--allow-retired", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    lines = {line.split()[0]: line for line in captured.out.splitlines() if line.strip().startswith("api__")}
    assert len(lines) == 8
    for cell, line in lines.items():
        expected = "DEEPSEEK_API_KEY (set)" if cell.startswith("api__deepseek") else "OPENAI_API_KEY (set)"
        assert expected in line, line
    assert "DEEPSEEK_API_KEY: " not in captured.err and "OPENAI_API_KEY: " not in captured.err
    assert KEY not in captured.out + captured.err and OTHER_KEY not in captured.out + captured.err
    assert not any(tmp_path.iterdir())


def test_one_unset_variable_is_named_and_fails_only_the_cells_that_need_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OTHER_KEY)
    assert main([str(PAPER_GRID), "--dry-run", "--allow-retired", "--out", str(tmp_path)]) == 0  # listed, not run
    err = capsys.readouterr().err
    assert (
        "DEEPSEEK_API_KEY: api__deepseek-r1__tasks=timetabling, api__deepseek-r1__tasks=subsetsum, api__deepseek-v3__tasks=timetabling, api__deepseek-v3__tasks=subsetsum"
        in err
    ), err
    assert "OPENAI_API_KEY:" not in err
    assert not any(tmp_path.iterdir())
    # a real run of a DeepSeek cell: it fails before its notebook starts, naming the variable (nothing is sent)
    cell = "api__deepseek-r1__tasks=subsetsum"
    assert main([str(PAPER_GRID), "--out", str(tmp_path), "--only", cell, "--allow-retired"]) == 1
    captured = capsys.readouterr()
    assert f"[failed] {cell}" in captured.out and "DEEPSEEK_API_KEY not set" in captured.out, captured.out
    sweep = tmp_path / "musobench-paper"
    assert "DEEPSEEK_API_KEY not set where the cell runs" in (sweep / "sweep_summary.csv").read_text()
    assert not (sweep / cell).exists() and not (sweep / ".work").exists()
