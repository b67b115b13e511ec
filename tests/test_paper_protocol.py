"""The paper grids run the papers' protocol (issue 41): what *Beware of Reasoning Overconfidence* states (Table 3, Table 4,
Figure 5(c), Figures 7 and 14) is what the MuSoBench grid's cells resolve to, role by role."""

from pathlib import Path

import pytest

from reasoning_study.config import config_from
from reasoning_study.studies.registry import study_config, study_module
from reasoning_study.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
MUSOBENCH_GRID = load_sweep(ROOT / "nbs" / "sweeps" / "musobench.yaml")


def cells(notebook: str):
    return [c for c in MUSOBENCH_GRID.cells if c.notebook_name == notebook]


def roles(cell):
    config = config_from(study_config(cell.notebook_name), cell.parameters)
    return {r.name: r for r in study_module(cell.notebook_name).roles(config)}


@pytest.mark.parametrize("cell", cells("musobench"), ids=lambda c: c.id)
def test_every_musobench_role_sends_the_papers_table_3(cell):
    "Table 3: temperature 0.2 (except the temperature sweep and o4-mini, which takes 1 only), top_p 1.0, no top_k."
    for role in roles(cell).values():
        if role.name not in ("short", "long"):
            continue
        s = role.sampling
        assert (s.top_p, s.top_k) == (1.0, 0), (cell.id, role.name, s)
        expected = 1.0 if role.preset == "o4-mini" else cell.parameters.get("temperature", 0.2)
        assert s.temperature == expected, (cell.id, role.name, s)
        if not cell.id.startswith("qwen3-8b-temperature"):
            assert s.temperature in (0.2, 1.0), cell.id


def test_table_4_is_a_cell_of_the_grid():
    "Appendix A.4, Table 4: Qwen3-8B Short-CoT vs Long-CoT on all 100 curated NoveltyBench prompts, k = 10."
    [cell] = [c for c in cells("musobench") if c.id == "noveltybench"]
    config = config_from(study_config("musobench"), cell.parameters)
    assert config.tasks == ["noveltybench"] and set(config.presets.values()) == {"qwen3-8b"}
    assert (config.novelty_subset, config.novelty_prompts, config.novelty_k) == ("curated", None, 10)
    found = roles(cell)
    assert set(found) == {"short", "long", "novelty_judge", "novelty_rater"}  # the judge and the rater are roles
    assert found["novelty_judge"].share_key() == found["short"].share_key()  # on the paradigms' one engine
    assert found["novelty_judge"].sampling.temperature == 0.0


def test_the_temperature_sweep_spans_the_references_range():
    "Figure 5(c): the reference swept Short-CoT from 0.0 to 1.0 in steps of 0.1; 0.2 is the main cells'."
    swept = {c.parameters["temperature"] for c in cells("musobench") if c.id.startswith("qwen3-8b-temperature")}
    assert swept | {0.2} == {round(0.1 * k, 1) for k in range(11)}


def test_the_attention_cell_follows_the_paper():
    "Table 3 says 0.2 for all experiments; the reference ran 20 TimeTabling questions: 20 instances, two per level."
    [cell] = cells("attention_entropy")
    config = config_from(study_config("attention_entropy"), cell.parameters)
    [model] = roles(cell).values()
    assert (model.sampling.temperature, model.sampling.top_p, model.sampling.top_k) == (0.2, 1.0, 0)
    assert config.tasks == ["timetabling"] and config.levels is None and config.per_level * 10 == 20
    assert model.model.backend == "transformers"  # the attention maps come from the transformers backend


GRIDS = {name: load_sweep(ROOT / "nbs" / "sweeps" / f"{name}.yaml") for name in ("musobench", "overthinking")}
GRID_CELLS = [
    c
    for grid in GRIDS.values()
    for c in grid.cells
    if c.notebook_name in ("musobench", "overthinking", "attention_entropy")
]


@pytest.mark.parametrize("cell", GRID_CELLS, ids=lambda c: c.id)
def test_every_grid_cell_has_a_card_and_explains_each_deviation(cell):
    "Point 11: a card per cell; a setting that differs from the paper's stated value always says why."
    from reasoning_study.sweep.rehearsal import cell_card

    card = cell_card(cell)
    assert card, cell.id
    unexplained = [r["setting"] for r in card if r["deviation"] and not r["note"].strip()]
    assert not unexplained, (cell.id, unexplained)


def test_the_rehearsal_page_shows_each_cells_card():
    from reasoning_study.sweep.rehearsal import cards_markdown

    grid = GRIDS["overthinking"]
    text = cards_markdown(grid.cells[:2])
    for c in grid.cells[:2]:
        assert f"### {c.id}: " in text
    assert (
        "| prompt format | the release's | the release's |" in text and "| extractor input | the trace only |" in text
    )


# Point 1: the release settings the reference code's model table gives (REFERENCE_CODE_NOTES.md §2.3), preset by preset:
# (temperature, top_p, top_k, repetition_penalty); top_k 0 and top_p 1.0 are "not set"
RELEASE_DECODING = {
    "qwen3-8b-overthinking": (0.6, 0.95, 20, 1.0),
    "intern-s1-mini": (0.8, 1.0, 50, 1.0),
    "qwen3-vl-8b-thinking": (1.0, 0.95, 20, 1.0),  # T from the table; top_p/top_k from the Qwen3-VL release
    "qwen2.5-vl-7b-instruct": (1e-6, 1.0, 0, 1.05),
    "vl-rethinker-7b": (0.1, 0.001, 1, 1.05),
    "mm-eureka-qwen-7b": (0.1, 0.001, 1, 1.05),
    "r1-vl-7b": (0.01, 0.001, 1, 1.0),
    "thinklite-vl-7b": (0.0, 1.0, 0, 1.0),
    "dualmind-vlm": (1e-6, 0.95, 0, 1.05),
}


@pytest.mark.parametrize("cell", [c for c in GRIDS["overthinking"].cells], ids=lambda c: c.id)
def test_every_overthinking_model_samples_at_its_release_settings(cell):
    "C.3: each release's recommended decoding, penalties included, reaches the traces' request; the preset cites it."
    from reasoning_study.backends.presets import get_preset

    model = roles(cell)["model"]
    s = model.sampling
    assert (s.temperature, s.top_p, s.top_k, s.repetition_penalty) == RELEASE_DECODING[model.preset], cell.id
    assert s.max_tokens == get_preset(model.preset).sampling.max_tokens  # the release's budget, not the grid's
    assert get_preset(model.preset).source, model.preset


def test_r1_vl_plans_for_its_qwen2_vl_positions():
    "Point 9: R1-VL is tuned from Qwen2-VL (32,768 positions), not Qwen2.5-VL (128K)."
    from reasoning_study.sweep.rehearsal import PAPER_MODEL_SHAPES

    assert PAPER_MODEL_SHAPES["jingyiZ00/R1-VL-7B"][-1] == 32_768
    assert PAPER_MODEL_SHAPES["TIGER-Lab/VL-Rethinker-7B"][-1] == 128_000


def test_table_1_says_its_template_is_not_the_papers():
    "Point 9: the termination template beside Table 1 is named, with the paper's finding that it matters most."
    from reasoning_study.studies.overthinking.report import template_note

    note = template_note(["stop_now"])
    assert "`stop_now`" in note and "not the paper's P1 (Figure 14)" in note


def test_a_changed_preset_or_prompt_makes_a_finished_cell_stale(monkeypatch):
    """Point 10: a cell's fingerprint is what produced it; a done record of the same parameters but another preset or
    prompt text is stale (the cell runs again), and one written before fingerprints answers for its parameters only."""
    from dataclasses import replace

    import reasoning_study.prompts.overthinking as prompts
    from reasoning_study.backends import presets
    from reasoning_study.sweep.index import FINGERPRINT, recorded_parameters, stale_reasons
    from reasoning_study.sweep.spec import cell_fingerprint

    cell = next(c for c in GRIDS["overthinking"].cells if c.id == "multimodal__vl-rethinker")
    cell = replace(cell, fingerprint=cell_fingerprint(cell.notebook, cell.parameters))
    record = dict(parameters=recorded_parameters(cell), fingerprint=cell.fingerprint)
    assert cell.fingerprint and stale_reasons(record, cell) == []
    assert stale_reasons({"parameters": record["parameters"]}, cell) == []  # an older record: parameters only

    def now():
        return replace(cell, fingerprint=cell_fingerprint(cell.notebook, cell.parameters))

    vl = presets.get_preset("vl-rethinker-7b")
    fixed = replace(vl, sampling=replace(vl.sampling, repetition_penalty=1.1))
    monkeypatch.setitem(presets.PRESETS, "vl-rethinker-7b", fixed)
    assert stale_reasons(record, now()) == [FINGERPRINT]
    monkeypatch.setitem(presets.PRESETS, "vl-rethinker-7b", vl)
    assert stale_reasons(record, now()) == []
    monkeypatch.setattr(prompts, "ANSWER_LEAD", "\n\nSo the answer is \\boxed{")
    assert stale_reasons(record, now()) == [FINGERPRINT]
