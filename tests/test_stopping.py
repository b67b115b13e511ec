"""Stopping policies (metrics.stopping), fuzzed: no policy reads the future, Stopping@K agrees with the paper's
Stopping@K of metrics.overthinking, compositions are the logic they say, and the scores keep their bounds."""

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.metrics.overthinking import prefix_rows, stopping_points
from reasoning_study.metrics.stopping import (
    Budget,
    Confidence,
    Consistency,
    Entropy,
    StoppingAtK,
    Trajectory,
    default_policies,
    policy_table,
    stop_index,
)

ANSWERS = st.sampled_from(["A", "B", "C", None])
TEXTS = st.sampled_from(["A}", "B}", "C}, but wait", "C}", "hmm A}"])


@st.composite
def trajectories(draw, min_n=1, max_n=12):
    n = draw(st.integers(min_n, max_n))
    answers = tuple(draw(st.lists(ANSWERS, min_size=n + 1, max_size=n + 1)))
    texts = tuple(draw(st.lists(TEXTS, min_size=n + 1, max_size=n + 1)))
    steps = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    logprobs = tuple(tuple(draw(st.lists(st.floats(-3, 0), min_size=1, max_size=3))) for _ in range(n + 1))
    return Trajectory(
        answers, texts, tuple(np.concatenate([[0], np.cumsum(steps)]).astype(int).tolist()), logprobs, "mc"
    )


POLICIES = default_policies(with_logprobs=True) + [
    Budget(3),
    Consistency(2, check_hedges=False),
    StoppingAtK(1) | Entropy(3, 0.5),
    Budget(share=0.5) & Confidence(0.5, mean="arithmetic"),
]


@settings(max_examples=60, deadline=None)
@given(trajectories(), trajectories(min_n=12, max_n=12), st.data())
def test_no_policy_reads_the_future(t, other, data):
    "Changing everything after the stop (the trace keeps its length) never moves the stop."
    for p in POLICIES:
        s = stop_index(p, t)
        assert 0 <= s <= t.n
        if s == t.n:
            continue
        cut = lambda a, b: a[: s + 1] + b[s + 1 : t.n + 1]
        changed = Trajectory(
            cut(t.answers, other.answers),
            cut(t.probe_texts, other.probe_texts),
            t.tokens,
            cut(t.logprobs, other.logprobs),
            t.format,
        )
        assert stop_index(p, changed) == s, (p.label, t, changed)


@settings(max_examples=60, deadline=None)
@given(trajectories(), st.sampled_from([1, 2, 3, 5]))
def test_stopping_at_k_is_the_papers(t, k):
    rows = prefix_rows(
        [False] * (t.n + 1),
        list(t.answers),
        [b - a for a, b in zip(t.tokens, t.tokens[1:])],
        model="m",
        benchmark="b",
        item_id="q",
    )
    assert stop_index(StoppingAtK(k), t) == int(stopping_points(rows, k).stop_index.iloc[0])


@settings(max_examples=50, deadline=None)
@given(trajectories(), st.sampled_from(POLICIES), st.sampled_from(POLICIES))
def test_composition_is_first_either_and_both(t, a, b):
    assert stop_index(a | b, t) == min(stop_index(a, t), stop_index(b, t))
    assert stop_index(a & b, t) >= max(stop_index(a, t), stop_index(b, t)) or stop_index(a & b, t) == t.n


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=2, max_size=9), min_size=1, max_size=6))
def test_scores_keep_their_bounds(states):
    prefixes = pd.concat(
        [
            prefix_rows(z, ["A" if c else "B" for c in z], model="m", benchmark="b", item_id=f"q{j}")
            for j, z in enumerate(states)
        ],
        ignore_index=True,
    )
    table = policy_table(prefixes, [StoppingAtK(1), Budget(1), Consistency(2)], by=["model"]).set_index("setting")
    optimal, actual = table.loc["Optimal", "accuracy"], table.loc["Actual", "accuracy"]
    assert (table.accuracy <= optimal + 1e-12).all() and (table.saved_utterances >= -1e-12).all()
    assert ((table.harmful_at_stop >= 0) & (table.harmful_at_stop <= 1)).all()
    gap = table.gap_recovered.drop(["Actual", "Optimal"])
    if math.isclose(optimal, actual):
        assert gap.isna().all()
    else:
        assert (gap <= 1 + 1e-12).all()
