"""The GPU check (`make gpu-check`, nbs/95_gpu_check.ipynb) end to end on the CPU: the tiny shape, short lengths.

So that the command cannot rot between the rare runs on a GPU host: every stage runs, every assertion
that the CPU can make passes, and the report has one row per shape and measure."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from reasoning_study.gpu_check import CheckConfig, config_parser, main, measure_names

pytestmark = pytest.mark.slow  # the GPU check's CPU run

ROOT = Path(__file__).resolve().parents[1]


def makefile_cpu_args() -> list[str]:
    "The CPU smoke run's arguments, as the Makefile's gpu-check target passes them without CUDA."
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    return re.search(r"^GPU_CHECK_CPU_ARGS := (.*)$", text, re.M).group(1).split()


CPU_ARGS = makefile_cpu_args()
ASSERTED = [
    "trace and probes",
    "probe answers, kv vs naive (correctness)",
    "prober encoded tokens, kv / naive",
    "entropies vs output_attentions maps",
]


def table_rows(markdown: str) -> dict[tuple[str, str], dict]:
    "(shape, measure) -> row of the report's table."
    lines = [l for l in markdown.splitlines() if l.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        row = dict(zip(header, cells))
        rows[row["shape"], row["measure"]] = row
    return rows


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    "`make gpu-check GPU_CHECK_CPU=1` on a machine without CUDA (hidden when there is one): the CPU smoke run, as CI runs it."
    out = tmp_path_factory.mktemp("gpu_check") / "gpu_check.md"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}  # the machine's cores are shared
    done = subprocess.run(
        ["make", "-s", "gpu-check", "GPU_CHECK_CPU=1", f"GPU_CHECK_MD={out}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "no CUDA here" in done.stdout, done.stdout + done.stderr
    return done.returncode, out.read_text()


def test_cpu_run_passes(cpu_report):
    code, report = cpu_report
    assert code == 0, report
    assert "**Result: every assertion passed.**" in report
    assert "transformers" in report and "CPU" in report


def test_every_row_and_every_assertion(cpu_report):
    _, report = cpu_report
    cfg = CheckConfig(**vars(config_parser().parse_args(CPU_ARGS)))
    rows = table_rows(report)
    names = measure_names(cfg)
    assert sorted(rows) == sorted(("tiny", n) for n in names)
    assert [m for s, m in rows] == names  # in table order
    for name in ASSERTED:
        assert rows["tiny", name]["status"] == "pass", rows["tiny", name]
    assert rows["tiny", "probe answers, kv vs naive (correctness)"]["value"].startswith("21/21 identical")
    for n in cfg.entropy_lengths:
        assert rows["tiny", f"entropy peak above KV cache, {n} tokens"]["status"] == "n/a (no CUDA)"
    assert rows["tiny", "entropy peak flat in length"]["status"] == "n/a (no CUDA)"
    for name in [
        "generation tokens/s, batch 1",
        "generation tokens/s, batch 4",
        "prober seconds, kv / naive",
        "prober speed-up, naive / kv",
    ]:
        assert rows["tiny", name]["status"] == "measured" and re.match(r"[\d.]+", rows["tiny", name]["value"]), rows[
            "tiny", name
        ]


def test_bad_configuration_fails_fast(tmp_path, capsys):
    assert main(["--device", "cpu", "--shapes", "70b", "--out", str(tmp_path / "x.md")]) == 1
    assert "unknown shapes" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_without_cuda_the_check_refuses_unless_the_cpu_run_is_asked_for(tmp_path):
    "Issue 30, point 7: a host whose torch sees no CUDA does not pass for a GPU host: exit status 2, nothing run."
    out = tmp_path / "gpu_check.md"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env.pop("GPU_CHECK_CPU", None)
    done = subprocess.run(
        ["make", "-s", "gpu-check", f"GPU_CHECK_MD={out}"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA here" in done.stderr and "GPU_CHECK_CPU=1" in done.stderr, done.stderr
    assert not out.exists()  # nothing ran


def test_a_missing_tokenizer_is_a_row_per_stage_not_a_traceback(tmp_path, capsys):
    out = tmp_path / "gpu_check.md"
    code = main(
        ["--device", "cpu", "--shapes", "tiny", "--tokenizer-dir", str(tmp_path / "nowhere"), "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err and "no Qwen3 tokenizer" in err and len(err.strip().splitlines()) == 1, err
    rows = table_rows(out.read_text())
    names = measure_names(CheckConfig(**vars(config_parser().parse_args(["--shapes", "tiny"]))))
    assert [m for s, m in rows] == names
    assert all(r["status"] == "FAIL" and "no Qwen3 tokenizer" in r["value"] for r in rows.values())
