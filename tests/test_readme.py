"""The README is true: every command in its shell blocks runs as written in a scratch copy of the project.

The copy holds what a fresh clone holds (the files git tracks or would track; no `outputs/` runs, no caches), with the
test's own environment as its `.venv`. Each command of a ```bash block is one test case:

- `make ...` runs as `make -n ...` (the recipe must exist and expand; running it is `make test`'s and CI's job);
- `rs-run` and `rs-sweep ... --dry-run` run as written (the papermill example must create its output folder);
- the JupyterLab command is started, answers on its port, and is stopped;
- a command that needs a GPU, a cluster or an API key is listed in SKIPPED with the reason (an `rs-sweep` among them
  still has its sweep file and arguments validated with `--dry-run`).

A command no rule knows fails, so a new README command needs a decision here. The Python block runs too, and the
set-up files say the same thing: environment.yml installs what `make install` installs."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # the README's commands in a scratch copy of the project

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

SKIPPED = {  # command as written in the README (comments dropped) -> why CI does not run it
    ".venv/bin/rs-sweep nbs/sweeps/musobench.yaml --gpus 0,1,2,3 --skip-retired --report": "the paper's MuSoBench grid: four GPUs with vLLM and, for its API cells, DEEPSEEK_HOST_URL, DEEPSEEK_HOST_API_KEY and OPENAI_API_KEY",
    ".venv/bin/rs-sweep nbs/sweeps/overthinking.yaml --executor ray --ray-address auto": "the paper's overthinking grid: a Ray cluster with GPUs and the benchmarks' files",
    "export DEEPSEEK_HOST_URL=https://HOST/v1 DEEPSEEK_HOST_API_KEY=... OPENAI_API_KEY=sk-...": "sets the reader's host and API keys (placeholders)",
    ".venv/bin/rs-run traces outputs/my-traces/run.ipynb -p source path/to/log.eval -p prober smollm2-135m -p out_dir "
    "outputs/my-traces": "the reader's own trace file (a placeholder path); tests/test_traces_study.py and "
    "tests/test_trace_importers.py import files of each format and run the prober on the embedded model",
    ".venv/bin/rs-sweep nbs/sweeps/musobench.yaml --preflight --skip-retired": "asks the reader's host and OpenAI for one token each: needs their keys (tests/test_preflight.py runs it against local servers)",
    ".venv/bin/rs-sweep nbs/sweeps/musobench.yaml --report --only deepseek-open__tasks=timetabling,deepseek-open__tasks=subsetsum,"
    "openai-successor__tasks=timetabling,openai-successor__tasks=subsetsum": "calls the reader's DeepSeek host and OpenAI's API: needs DEEPSEEK_HOST_URL, DEEPSEEK_HOST_API_KEY and OPENAI_API_KEY (and spends money)",
}


def fenced_blocks(text: str, language: str) -> list[str]:
    "The contents of the README's ```<language> blocks."
    blocks, current = [], None
    for line in text.splitlines():
        if current is None and line.strip() == f"```{language}":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def shell_commands(text: str) -> list[str]:
    "Every command of the shell blocks: continuation lines joined, comments dropped, quoting normalised."
    commands = []
    for block in fenced_blocks(text, "bash"):
        for logical in block.replace("\\\n", " ").splitlines():
            if tokens := shlex.split(logical, comments=True):
                commands.append(shlex.join(tokens))
    return commands


COMMANDS = shell_commands(README)


def rule(command: str) -> str:
    tokens = shlex.split(command)
    if command in SKIPPED:
        return "skipped"
    if tokens[0] == "make":
        return "make -n"
    if tokens[0] == ".venv/bin/rs-sweep" and "--dry-run" in tokens:
        return "run"
    if tokens[0] == ".venv/bin/rs-run":
        return "run"
    if tokens[:2] == [".venv/bin/jupyter", "lab"]:
        return "start and stop"
    return "unknown"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    "The project as a fresh clone holds it, with this test's environment as its .venv."
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    dest = tmp_path_factory.mktemp("clone") / "reasoning_study"
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    assert not (dest / "outputs" / "musobench-small").exists()
    return dest


def environment(**extra) -> dict:
    "This environment, one CPU thread per process, and no API keys (nothing here may call a paid API)."
    env = {k: v for k, v in os.environ.items() if k not in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def run(command: list[str], cwd: Path, timeout: int = 600, **env) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=environment(**env), capture_output=True, text=True, timeout=timeout)


def test_the_readme_has_commands_and_every_one_has_a_rule():
    assert len(COMMANDS) >= 10
    assert [c for c in COMMANDS if rule(c) == "unknown"] == [], (
        "a README command no rule knows: run it here or list it in SKIPPED"
    )
    assert [c for c in SKIPPED if c not in COMMANDS] == [], "SKIPPED lists a command the README no longer has"


def test_the_first_section_counts_its_commands():
    heading = next(line for line in README.splitlines() if line.startswith("## ") and "commands" in line.lower())
    words = {"two": 2, "three": 3, "four": 4}
    assert words[heading.split()[1].lower()] == len(shell_commands(README.split(heading, 1)[1].split("\n## ", 1)[0]))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[:70])
def test_readme_command(command, clone):
    how, tokens = rule(command), shlex.split(command)
    if how == "skipped":
        # what can be checked without the GPUs or keys: the file and the arguments
        if tokens[0] == ".venv/bin/rs-sweep":
            checked = run([*tokens, "--dry-run"], clone)  # --dry-run asks no server (a --preflight's requests)
            assert checked.returncode == 0, checked.stderr[-3000:]
        pytest.skip(SKIPPED[command])
    if how == "make -n":
        done = run(["make", "-n", *tokens[1:]], clone)
        assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    elif how == "run":
        done = run(tokens, clone)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        if tokens[0] == ".venv/bin/rs-run":  # the output notebook's folder did not exist before
            output = clone / tokens[2]
            assert output.is_file() and (output.parent / "params.json").is_file()
        else:
            assert "cell" in done.stdout.splitlines()[0]  # the table of cells
    elif how == "start and stop":
        start_and_stop(tokens, clone)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_and_stop(tokens: list[str], cwd: Path, timeout: float = 180.0):
    "Start a server command as written, wait until it answers on its port, stop it."
    port = free_port()
    runtime = cwd.parent / f"jupyter-{port}"
    env = environment(
        JUPYTER_PORT=str(port),
        JUPYTER_PORT_RETRIES="0",
        BROWSER="true",
        JUPYTER_RUNTIME_DIR=str(runtime / "runtime"),
        JUPYTER_CONFIG_DIR=str(runtime / "config"),
    )
    with open(runtime.with_suffix(".log"), "w+") as log:
        server = subprocess.Popen(
            tokens, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline, answered = time.monotonic() + timeout, None
            while answered is None and time.monotonic() < deadline and server.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2) as r:
                        answered = r.status
                except OSError:
                    time.sleep(1)
            log.seek(0)
            assert answered == 200, f"no answer on port {port}; log:\n{log.read()[-3000:]}"
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
    assert server.returncode is not None


def test_the_python_block_runs(clone):
    [block] = fenced_blocks(README, "python")
    done = run([str(clone / ".venv" / "bin" / "python"), "-c", block], clone, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (clone / "outputs" / "demo" / "generations.sqlite").is_file()


# --- the set-up files say the same thing -----------------------------------------------------------------------


def make_variable(name: str) -> str:
    "A variable's value as the Makefile sets it (`NAME ?= value` or `NAME := value`)."
    for line in (ROOT / "Makefile").read_text().splitlines():
        left, _, value = line.partition("=")
        if left.rstrip("?: ").strip() == name and left.rstrip().endswith(("?", ":")):
            return value.strip()
    raise KeyError(name)


def test_environment_yml_installs_what_make_install_installs(tmp_path):
    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    [pip] = [d["pip"] for d in spec["dependencies"] if isinstance(d, dict)]
    assert pip == [f"-c {make_variable('CONSTRAINTS')}", f"-e .[{make_variable('EXTRAS')}]"]
    text = (ROOT / "environment.yml").read_text()
    assert "make install VENV=$CONDA_PREFIX" in text and "make install VENV=$CONDA_PREFIX" in README
    # what the conda route's make step adds, in the Makefile's own words
    dry = subprocess.run(
        ["make", "-n", "install", f"VENV={tmp_path / 'conda'}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert f"--no-deps {make_variable('NO_DEPS_WHEELS')}" in dry and "ipykernel install" in dry
    assert f'-c {make_variable("CONSTRAINTS")} -e ".[{make_variable("EXTRAS")}]"' in dry
    gpu = subprocess.run(
        ["make", "-n", "install", f"VENV={tmp_path / 'gpu'}", "EXTRAS=all,vllm", "CONSTRAINTS="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '-e ".[all,vllm]"' in gpu and " -c " not in gpu


def test_the_readme_names_what_the_makefile_installs():
    wheels = make_variable("NO_DEPS_WHEELS").split()
    assert len(wheels) == 4 and "four wheels" in README
    for wheel in wheels:
        assert f"`{wheel.split('==')[0]}`" in README, wheel
    assert make_variable("CONSTRAINTS") in README
    dev = next(line for line in (ROOT / "settings.ini").read_text().splitlines() if line.startswith("dev_requirements"))
    assert "ray[default]" in dev and "Ray comes with the `dev` extra" in README


def test_environment_yml_pip_section_resolves_here(clone):
    "conda writes the pip section into a requirements file beside environment.yml and pip-installs it: the same, as a dry run."
    if run([sys.executable, "-c", "import setuptools"], clone).returncode != 0:
        pytest.skip("no setuptools here to build the package offline")
    [pip] = [
        d["pip"] for d in yaml.safe_load((clone / "environment.yml").read_text())["dependencies"] if isinstance(d, dict)
    ]
    (clone / "condaenv.requirements.txt").write_text("\n".join(pip) + "\n")
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--no-build-isolation",
            "-r",
            "condaenv.requirements.txt",
        ],
        clone,
    )
    assert done.returncode == 0 and "Would install reasoning_study" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-2000:]
    )
