"""Issue #43 (points 2 and 5): no interval on the page reads as certainty, and the stopping-policy table prints
every number as 'value [lo, hi]'.

- an interval counts only the units that carry a value: under two prints '[n/a]';
- a proportion whose units all agree gets Wilson's interval over them; any other zero-width interval is marked;
- the stopping-policy table shows settings in words, counts as integers, no NaN, None or repr."""

import re

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.figures.stopping import UNDEFINED, policy_table_text, setting_text
from reasoning_study.metrics.intervals import (
    ALL_EQUAL,
    NO_INTERVAL,
    add_intervals,
    bootstrap_interval,
    format_interval,
    interval_text,
    weighted_mean,
)
from reasoning_study.metrics.stopping import (
    Budget,
    Consistency,
    StoppingAtK,
    add_policy_intervals,
    policy_rows,
    policy_table,
)

BOUNDS = re.compile(r"^(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]$")


def printed_is_honest(text: str) -> bool:
    "A printed interval is marked (n/a, all units equal) or has a visible width: lo < hi as printed."
    if text == "" or text.endswith(NO_INTERVAL) or text.endswith(ALL_EQUAL):
        return True
    m = BOUNDS.match(text)
    return bool(m) and float(m.group(2)) < float(m.group(3))


def test_one_contributing_unit_has_no_interval():
    "Table 4's `40.98 [40.98, 40.98]` with one scored prompt among several: one unit, so [n/a]."
    found = bootstrap_interval(range(6), weighted_mean([0.4098, np.nan, np.nan, np.nan, np.nan, np.nan]))
    assert found.n_units == 1 and str(found) == "0.4 [n/a]"
    rows = pd.DataFrame({"g": ["a"] * 5, "q": range(5), "x": [1.0, np.nan, np.nan, np.nan, np.nan]})
    table = add_intervals(
        rows.groupby("g", as_index=False)["x"].mean(), rows, ["g"], "q", {"x": lambda g: weighted_mean(g["x"])}
    )
    assert table["n_units"].tolist() == [1]  # not 5: four questions carry no value
    assert interval_text(table)["x"].tolist() == ["1.0 [n/a]"]


def test_agreeing_proportion_is_wilson_and_constant_mean_is_marked():
    "MuSoBench Table 1's `100.0 [100.0, 100.0]`: every instance at 1 is Wilson's interval, not zero width."
    share = bootstrap_interval(range(40), weighted_mean(np.ones(40), proportion=1))
    assert share.method == "wilson" and share.hi == 1.0 and 0.9 < share.lo < 0.95
    text = format_interval(100 * share.value, 100 * share.lo, 100 * share.hi)
    assert text.startswith("100.0 [9") and text.endswith(", 100.0]")
    constant = bootstrap_interval(range(10), weighted_mean(np.full(10, 0.75)))
    assert constant.method == "all equal" and format_interval(0.75, constant.lo, constant.hi, 3) == "0.750 " + ALL_EQUAL


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, np.nan]), min_size=1, max_size=8), st.booleans(), st.integers(0, 3)
)
def test_no_printed_interval_reads_as_certainty(values, proportion, digits):
    "Any data: the printed interval has lo < hi, or says [n/a] or [all units equal]."
    found = bootstrap_interval(
        range(len(values)), weighted_mean(values, proportion=1 if proportion else None), resamples=200
    )
    assert printed_is_honest(format_interval(found.value, found.lo, found.hi, digits)), found


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3), st.floats(0, 1e3), st.integers(0, 3))
def test_format_interval_property(value, lo, width, digits):
    assert printed_is_honest(format_interval(value, lo, lo + width, digits))


def test_setting_text():
    assert setting_text(Budget(share=0.25).label) == "Budget: 25 % of the trace"
    assert setting_text(Budget(4).label) == "Budget: 4 utterances"
    assert setting_text(StoppingAtK(4).label) == "Stopping@K: unchanged for K = 4 utterances"
    assert "None" not in Budget(share=0.25).label


def test_policy_table_on_the_page():
    "Point 5: every number 'value [lo, hi]', counts whole, settings in words, '—' and a reason, no NaN or None."
    from reasoning_study.metrics.overthinking import synthetic_tables

    prefixes = synthetic_tables(n_items=6, models=("m",), benchmarks={"mixed": 0.5})["prefixes"]
    policies = [StoppingAtK(2), Consistency(3), Budget(share=0.25), Budget(2)]
    rows = policy_rows(prefixes, policies)
    table = add_policy_intervals(
        policy_table(prefixes, policies, by=["model", "benchmark"], rows=rows), rows, resamples=200
    )
    shown = policy_table_text(table)
    page = shown.to_markdown(index=False, disable_numparse=True)
    for raw in ("nan", "NaN", "None", "share=", "utterances=", "Budget(", "_lo", "_hi"):
        assert raw not in page, raw
    assert shown["traces"].dtype.kind == "i" and shown["harmful traces"].dtype.kind == "i"
    every = ("accuracy (%)", "utterances", "tokens", "tokens saved (%)", "harmful at the stop (%)")
    for column in (*every, "harmful traces rescued (%)", "gap recovered (%)"):
        for text in shown[column]:
            assert text == UNDEFINED or printed_is_honest(text), (column, text)
            assert text == UNDEFINED or "[" in text  # every number with its interval
    undefined = shown["gap recovered (%)"] == UNDEFINED
    assert shown.loc[undefined, "note"].str.contains("gap recovered undefined").all()
    assert {"Budget: 25 % of the trace", "Budget: 2 utterances"} <= set(shown["setting"])
