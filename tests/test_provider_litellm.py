"""The API presets' provider rules against a maintained source: LiteLLM's model map.

LiteLLM keeps, per hosted model, its largest completion budget (`max_output_tokens`), whether it reasons, and the
date its provider retires it. The map is a JSON file inside the `litellm` wheel, installed without its dependencies
(`make install`, `NO_DEPS_WHEELS`) and read without importing litellm: its import needs about ten more packages and
fetches a newer map from the network. Where ours and the map disagree, the preset keeps ours and `KEPT_OURS` says
why; the map's retirement dates of our presets' models are listed in `RETIRED`, so that a newer map that moves one
shows up here before a paid run meets it. LiteLLM's lists of accepted parameters live in its code, not in the map;
they are compared by hand in the stop note of issue #29."""

import importlib.util
import json
from pathlib import Path

import pytest

from reasoning_study.backends.presets import PRESETS

MODEL_MAP = "model_prices_and_context_window_backup.json"  # the map the litellm wheel ships
API_PRESETS = [p for p in PRESETS.values() if p.backend == "openai" and p.rules.provider]

KEPT_OURS: dict[tuple[str, str], str] = {}  # (preset, field) -> why ours is kept (none disagree with litellm 1.110.2)

RETIRED = {  # preset -> the map's deprecation date of its model (litellm 1.110.2), and what it means for a run
    "deepseek-r1": ("2026-07-24", "`deepseek-reasoner` is an alias DeepSeek repoints: record the answering model"),
    "deepseek-v3": ("2026-07-24", "`deepseek-chat` is an alias DeepSeek repoints: record the answering model"),
    "o4-mini": ("2026-10-23", "the paper's dated snapshot; after this date a run needs OpenAI's successor"),
    "gpt-4o-mini": ("2027-01-14", "the paper's dated snapshot; after this date a run needs OpenAI's successor"),
}


@pytest.fixture(scope="module")
def model_map() -> dict:
    spec = importlib.util.find_spec("litellm")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("litellm's model map is not installed (make install adds the wheel without its dependencies)")
    return json.loads((Path(spec.submodule_search_locations[0]) / MODEL_MAP).read_text())


def entry(model_map: dict, preset) -> dict:
    "The map's entry of a preset's model (DeepSeek's are also keyed `deepseek/<model>`)."
    return model_map.get(preset.model_id) or model_map.get(f"{preset.rules.provider.lower()}/{preset.model_id}") or {}


def test_every_api_preset_is_in_the_map(model_map):
    assert len(API_PRESETS) == 4
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
