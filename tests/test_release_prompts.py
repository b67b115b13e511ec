"""Each model of the overthinking grid is asked in its release's own format (issue 41, point 2): the system turn, the
`<think>`/`<answer>` tags and DualMind's mode labels reach the prompt the model really reads, rendered by the real
Qwen3 chat template (a random-weight Qwen3 from its config), through the study's own request builder."""

from pathlib import Path

import pytest

from reasoning_study.backends.presets import get_preset
from reasoning_study.backends.transformers import from_preset
from reasoning_study.config import config_from
from reasoning_study.probing.prober import decode_ids, render_prompt
from reasoning_study.prompts.releases import GENERIC_PROMPT, RELEASE_PROMPTS, release_prompt
from reasoning_study.studies.overthinking.config import OverthinkingConfig
from reasoning_study.studies.overthinking.run import trace_requests
from reasoning_study.sweep.spec import load_sweep
from reasoning_study.tasks.qa import QAItem

ROOT = Path(__file__).resolve().parents[1]
GRID_PRESETS = sorted({c.parameters["preset"] for c in load_sweep(ROOT / "nbs" / "sweeps" / "overthinking.yaml").cells})
ITEMS = [
    QAItem("t/1", "t", "What is 6 times 7?", "42"),
    QAItem("t/2", "t", "Which planet is largest?", "Jupiter", "mc", ["Mars", "Jupiter"], "B"),
]


@pytest.fixture(scope="module")
def qwen3():
    return from_preset(get_preset("qwen3-tiny-random").with_options(dtype="float32"))


def rendered(backend, preset: str, **changes) -> list[str]:
    config = config_from(OverthinkingConfig, dict(preset=preset, **changes))
    return [decode_ids(backend, render_prompt(backend, r)) for r in trace_requests(config, backend, ITEMS)]


def test_every_release_with_its_own_format_is_in_the_grid():
    "The releases this module knows are the grid's: none is listed for a model the paper did not run."
    grid_models = {get_preset(p).model_id for p in GRID_PRESETS}
    assert set(RELEASE_PROMPTS) <= grid_models, set(RELEASE_PROMPTS) - grid_models


@pytest.mark.parametrize("preset", GRID_PRESETS)
def test_each_grid_model_reads_its_release_format(qwen3, preset):
    release = release_prompt(get_preset(preset).model_id)
    free, choice = rendered(qwen3, preset)
    assert free.count(release.free_form) == 1 and choice.count(release.multiple_choice) == 1, preset
    assert "B. Jupiter" in choice
    if release.system:
        assert all(p.count(release.system) == 1 for p in (free, choice)), preset
        assert free.index(release.system) < free.index("What is 6 times 7?")
    for tag in ("<think>", "<answer>"):
        asked = tag in release.free_form + release.multiple_choice + (release.system or "")
        assert (tag in free.split("<|im_start|>assistant")[0]) == asked, (preset, tag)
    for label in release.mode_labels:
        assert label in free, (preset, label)


def test_the_named_releases_take_their_formats():
    "The facts of point 2: DualMind's two mode labels, MM-Eureka's answer tags, a <think> block for three releases."
    dual = release_prompt("maifoundations/DualMindVLM")
    assert dual.mode_labels == ("Short Thinking:", "Long Thinking:") and dual.system
    assert release_prompt("FanqingM/MM-Eureka-Qwen-7B").answer_marker == "answer_tags"
    for model in ("jingyiZ00/R1-VL-7B", "russwang/ThinkLite-VL-7B", "internlm/Intern-S1-mini"):
        assert release_prompt(model).think_tags and release_prompt(model).answer_marker == "boxed", model


def test_the_generic_prompt_is_an_option_and_the_cpu_default_is_unchanged(qwen3):
    "release_prompt=False asks every model generically; the embedded model's release has no format of its own."
    for prompt in rendered(qwen3, "dualmind-vlm", release_prompt=False):
        assert "Short Thinking" not in prompt and GENERIC_PROMPT.free_form[:20] in prompt
    assert release_prompt(get_preset(OverthinkingConfig().preset).model_id) is GENERIC_PROMPT
