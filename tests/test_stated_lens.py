"""The stated-answer lens (metrics.stated) and its figure (figures.traces): properties on generated traces."""

from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.figures.core import figure_problems
from reasoning_study.figures.traces import plot_stated_strips
from reasoning_study.metrics.overthinking import prefix_rows, trajectories
from reasoning_study.metrics.stated import (
    crossing_index,
    lens_agreement,
    outcome_efficiency,
    solution_rounds,
    stated_prefix_table,
)

GOLD = "7"


@dataclass(frozen=True)
class Trace:
    id: str
    reasoning: str
    final: str = ""
    question: str = "What is 3 + 4?"
    gold: str = GOLD
    model: str = "m"
    chunks: tuple | None = None
    chunk_values: tuple | None = None
    label_correct: bool | None = None
    extra: dict = field(default_factory=dict)


# a line of a generated trace: filler (None) or a claim of a small number
lines = st.lists(st.one_of(st.none(), st.integers(5, 9)), min_size=1, max_size=12)


def text_of(said: list) -> str:
    return "\n".join("Let me think about it more." if k is None else f"So the answer is {k}." for k in said)


@settings(max_examples=40, deadline=None)
@given(said=lines)
def test_each_prefix_holds_the_most_recent_claim(said):
    table = stated_prefix_table([Trace("t", text_of(said))])
    assert table["prefix_index"].tolist() == list(range(len(said) + 1))
    for i, row in table.iterrows():
        claims = [k for k in said[:i] if k is not None]
        assert (row["prediction"] if isinstance(row["prediction"], str) else None) == (
            str(claims[-1]) if claims else None
        )
        assert bool(row["correct"]) == (bool(claims) and claims[-1] == int(GOLD))
    # the prober's metrics read it: τ is the first line claiming the gold
    tau = trajectories(table)["first_correct_index"].iloc[0]
    first = next((i + 1 for i, k in enumerate(said) if k == int(GOLD)), None)
    assert (np.isnan(tau) and first is None) or tau == first
    # a round per run of claims that is not a restatement right after the same claim
    rounds = solution_rounds(table)
    assert len(rounds) <= sum(k is not None for k in said)
    assert rounds["end_index"].is_monotonic_increasing


@settings(max_examples=40, deadline=None)
@given(said=lines, final=st.sampled_from(["", "\\boxed{7}", "\\boxed{8}"]))
def test_outcome_efficiency_is_the_budget_share_at_tau(said, final):
    table = stated_prefix_table([Trace("t", text_of(said), final)])
    eff = outcome_efficiency(table).iloc[0]
    z = table["correct"].astype(bool).tolist()
    if not any(z):
        assert np.isnan(eff["outcome_efficiency"]) and eff["chen_term"] == 0
        return
    tau = z.index(True)
    assert eff["outcome_efficiency"] == table["prefix_chars"].iloc[tau] / table["trace_chars"].iloc[0]
    assert 0 < eff["outcome_efficiency"] <= 1
    assert bool(eff["ended_right"]) == z[-1]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.floats(0, 1), st.just(float("nan"))), min_size=1, max_size=20),
    threshold=st.floats(0.05, 0.95),
)
def test_crossing_index_is_the_first_value_reaching_the_threshold(values, threshold):
    first = crossing_index(values, threshold)
    v = np.asarray(values, dtype=float)
    if first is None:
        assert not (v >= threshold).any()
    else:
        assert v[first] >= threshold and not (v[:first] >= threshold).any()
    sustained = crossing_index(values, threshold, sustained=True)
    if sustained is not None:
        later = v[sustained:]
        assert first is not None and sustained >= first
        assert not (later[~np.isnan(later)] < threshold).any()


states = st.lists(st.booleans(), min_size=2, max_size=8)


@settings(max_examples=15, deadline=None)  # each example bootstraps its intervals: kept few
@given(traces=st.lists(states, min_size=2, max_size=5), data=st.data())
def test_a_lens_below_the_probe_passes_the_lower_bound_check(traces, data):
    """Where every stated z_i ≤ the forced z_i, stated τ ≥ probed τ on every trace; the same table agrees with itself."""
    probed, stated = [], []
    for k, z in enumerate(traces):
        below = [zi and data.draw(st.booleans()) for zi in z]
        probed.append(prefix_rows(z, model="m", benchmark="b", item_id=f"q{k}", template="T", extractor="E"))
        stated.append(prefix_rows(below, model="m", benchmark="b", item_id=f"q{k}"))
    probed, stated = pd.concat(probed), pd.concat(stated)
    agreement = lens_agreement(stated, probed).iloc[0]
    assert agreement["tau_lower_bound"] == 1.0 and agreement["n_stated_earlier"] == 0
    assert agreement["n_traces"] == len(traces) and agreement["n_units"] == len(traces)
    itself = lens_agreement(probed.drop(columns=["template", "extractor"]), probed).iloc[0]
    assert itself["tau_equal"] == 1.0 and itself["harmful_agree"] == 1.0
    assert itself["n_harmful_stated_only"] == itself["n_harmful_probed_only"] == 0


def test_the_figure_pairs_a_question_s_traces_and_reads_cleanly():
    traces = [
        Trace("right", text_of([None, 7, None]), "\\boxed{7}", chunk_values=None, extra={"problem_id": 1}),
        Trace("wrong", text_of([7, None, 8]), "\\boxed{8}", extra={"problem_id": 1}),
        Trace("other", text_of([None, 9]), "", extra={"problem_id": 2}),
    ]
    table = stated_prefix_table(traces).assign(chunk_value=lambda t: np.where(t["prefix_index"] < 2, 0.3, 0.8))
    fig = plot_stated_strips(table)
    assert figure_problems(fig) == []
    shown = [a for a in fig.axes if a.get_visible()]
    assert len(shown) == 3 and len(fig.axes) == 4  # two questions: two rows, the second with one trace
    assert [a.get_title().split("\n")[-1] for a in fig.axes[:2]] == ["imported/1 · N = 3"] * 2
    plt.close(fig)
