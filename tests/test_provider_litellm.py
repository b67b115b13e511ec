"""The API presets' provider rules against a maintained source: LiteLLM's model map.

LiteLLM keeps, per hosted model, its largest completion budget (`max_output_tokens`), whether it reasons, and the
date its provider retires it. The map is a JSON file inside the `litellm` wheel, installed without its dependencies
(`make install`, `NO_DEPS_WHEELS`) and read without importing litellm: its import needs about ten more packages and
fetches a newer map from the network. Where ours and the map disagree, the preset keeps ours and `KEPT_OURS` says
why; the map's retirement dates of our presets' models are listed in `RETIRED`, so that a newer map that moves one
shows up here before a paid run meets it. LiteLLM's lists of accepted parameters live in its code, not in the map;
they are compared by hand in the stop note of issue #29."""

import pytest

from reasoning_study.backends import lifecycle
from reasoning_study.backends.presets import PRESETS

API_PRESETS = [p for p in PRESETS.values() if p.backend == "openai" and p.rules.provider]

KEPT_OURS: dict[tuple[str, str], str] = {  # (preset, field) -> why ours is kept (as of litellm 1.110.2)
    ("gpt-5.4-mini-no-reasoning", "reasoning"): "the model reasons; this preset asks it not to (reasoning_effort "
    "none): the Short-CoT half of its pair"
}

RETIRED = {  # preset -> the map's deprecation date of its model (litellm 1.110.2), and what it means for a run
    "deepseek-r1": ("2026-07-24", "`deepseek-reasoner` is an alias DeepSeek repoints: record the answering model"),
    "deepseek-v3": ("2026-07-24", "`deepseek-chat` is an alias DeepSeek repoints: record the answering model"),
    "o4-mini": ("2026-10-23", "the paper's dated snapshot; after this date a run needs OpenAI's successor"),
    "gpt-4o-mini": ("2027-01-14", "the paper's dated snapshot; after this date a run needs OpenAI's successor"),
    "gpt-5.4-mini-reasoning": (None, "o4-mini's successor: no date yet"),
    "gpt-5.4-mini-no-reasoning": (None, "gpt-4o-mini's successor: no date yet"),
}
PAPER_API_PRESETS = {"deepseek-r1", "deepseek-v3", "o4-mini", "gpt-4o-mini"}


@pytest.fixture(scope="module")
def model_map() -> dict:
    "The installed wheel's map, as `backends.lifecycle` reads it (litellm not imported)."
    if not (models := lifecycle.model_map()):
        pytest.skip("litellm's model map is not installed (make install adds the wheel without its dependencies)")
    return models


def entry(model_map: dict, preset) -> dict:
    "The map's entry of a preset's model ({} when the map lacks it; DeepSeek's are also keyed `deepseek/<model>`)."
    return lifecycle.map_entry(preset, model_map) or {}


def test_every_api_preset_is_in_the_map(model_map):
    assert PAPER_API_PRESETS <= {p.name for p in API_PRESETS}
    missing = [p.name for p in API_PRESETS if not entry(model_map, p)]
    assert not missing, f"not in LiteLLM's map: {missing}"
    assert {p.name: entry(model_map, p)["litellm_provider"] for p in API_PRESETS} == {
        p.name: p.rules.provider.lower() for p in API_PRESETS
    }


@pytest.mark.parametrize("preset", API_PRESETS, ids=lambda p: p.name)
def test_caps_and_reasoning_agree_with_the_map(model_map, preset):
    e = entry(model_map, preset)
    ours = {"max_tokens_cap": preset.rules.max_tokens_cap, "reasoning": preset.thinking == "api"}
    theirs = {"max_tokens_cap": e.get("max_output_tokens"), "reasoning": bool(e.get("supports_reasoning"))}
    differ = {field for field in ours if ours[field] != theirs[field]}
    kept = {field for name, field in KEPT_OURS if name == preset.name}
    assert differ == kept, (
        f"{preset.name}: ours {ours}, LiteLLM's {theirs}; a new disagreement needs a reason in KEPT_OURS"
    )


def test_the_maps_retirement_dates_are_known(model_map):
    found = {p.name: entry(model_map, p).get("deprecation_date") for p in API_PRESETS}
    assert found == {name: date for name, (date, _) in RETIRED.items()}
