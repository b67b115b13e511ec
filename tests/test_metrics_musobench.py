"""Tests of `metrics.musobench`: hand-computed cases for every function (both ECE variants, every
empty-denominator case, the reference's fill-ins), and properties checked with hypothesis."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.metrics.musobench import (
    LEGACY_CONDITIONS,
    RESULT_COLUMNS,
    SC_METHODS,
    UNSCORED_POLICIES,
    aggregate_questions,
    aggregate_samples,
    apply_unscored,
    bin_edges,
    by_level,
    confidence_bin,
    correct_retention,
    current_conditions,
    ece,
    error_correction,
    instance_reconsideration,
    length_bins,
    length_confidence,
    median_confidence_index,
    mitigation_table,
    movement_grid,
    movement_pairs,
    new_solution_discovery,
    reconsideration_counts,
    reconsideration_rates,
    reflection_sweep,
    reliability_bins,
    score_aggregate,
    score_answer,
    scored_mask,
    set_scores,
    solution_frequencies,
    summary_table,
    synthetic_results,
    temperature_sweep,
    under_both_policies,
    union_solutions,
    unscored_replies,
    vote_solutions,
    voting_confidence,
)
from reasoning_study.tasks.core import ParsedSolution

FAST = settings(max_examples=100, deadline=None)


def rows(**columns) -> pd.DataFrame:
    "A results table of answered rows with the given columns (scalars broadcast)."
    base = dict(status="answered", model="m", paradigm="short", condition="base", task="subsetsum")
    return pd.DataFrame(base | columns)


# ------------------------------------------------------------------ precision and recall


def test_set_scores_hand_cases():
    assert set_scores({"a", "b", "c"}, {"a"}, 4) == dict(n_listed=3, n_correct=1, precision=1 / 3, recall=0.25)
    assert set_scores(set(), set(), 1)["precision"] == 0.0  # nothing listed: precision 0, as the reference
    over = set_scores(set(range(7)), {0, 1, 2}, 3)  # lists more than exist: kept
    assert over["precision"] == 3 / 7 and over["recall"] == 1.0


@pytest.mark.parametrize(
    "listed, valid, count, message",
    [({1}, {1, 2}, 5, "must be listed"), ({1}, {1}, 0, ">= 1"), ({1, 2, 3}, {1, 2, 3}, 2, "disagree")],
)
def test_set_scores_rejects_impossible_inputs(listed, valid, count, message):
    with pytest.raises(ValueError, match=message):
        set_scores(listed, valid, count)


def test_score_answer_counts_malformed_and_duplicates():
    "Y holds the distinct solutions and the distinct unreadable answers (the same words twice are one), not a cut-off entry."
    parsed = [
        ParsedSolution((1,), "valid"),
        ParsedSolution((1,), "valid"),
        ParsedSolution((2,), "violation"),
        ParsedSolution(None, "malformed", "non-integer element '1.5'", "Solution 4: {1.5}"),
        ParsedSolution(None, "malformed", "non-integer element '1.5'", "**Solution 5:** {1.5}"),
        ParsedSolution(None, "malformed", "no subset after 'Solution 6'", "Solution 6: none"),
        ParsedSolution(None, "malformed", "cut off by the token limit", "Solution 7: 3, 1", cut_off=True),
    ]
    # Y = {(1,), (2,), '{1.5}', 'none'}: 4 answers, 1 correct
    assert score_answer(parsed, 2) == dict(n_listed=4, n_correct=1, precision=0.25, recall=0.5, n_malformed=4)


def test_precision_of_parsed_answers_follows_eq_2():
    "The issue's two cases, parsed from text: eq. 2 gives 1/2 and 1/3 (the old denominator gave 1.0 for both)."
    from reasoning_study.tasks import subsetsum as ss
    from reasoning_study.tasks import timetabling as tt

    inst = ss.SubsetSumInstance((1, 5, 6, 7, 11, 12), 18)
    assert score_answer(ss.parse_answer("Solution 1: {1, 5, 12}\nSolution 2: {1.5, 4.5}", inst), 5)["precision"] == 0.5
    cut = ss.parse_answer("Solution 1: {1, 5, 12}\nSolution 2: {6, 12}\nSolution 3: 6, 1", inst, truncated=True)
    assert score_answer(cut, 5) == dict(n_listed=2, n_correct=2, precision=1.0, recall=0.4, n_malformed=1)
    demo = tt.TimeTablingInstance(
        (tt.Course((0, 2), (1,), 0), tt.Course((0, 1, 2), (0, 1), 1), tt.Course((1, 2), (1, 2), 0))
    )
    head = "| Course | Time | Room | Teacher |\n|---|---|---|---|\n"
    text = (
        f"Solution 1:\n{head}| Course0 | T0 | R1 | P0 |\n| Course1 | T0 | R0 | P1 |\n| Course2 | T1 | R1 | P0 |\n\n"
        f"Solution 2:\n{head}| Course0 | T0 | R1 | P0 |\n| Course1 | T1 | R0 | P1 |\n\n"
        f"Solution 3:\n{head}| Course0 | T2 | R1 | P0 |\n| Course2 | T2 | R2 | P0 |"
    )
    scores = score_answer(tt.parse_answer(text, demo), len(tt.enumerate_solutions(demo)))
    assert (scores["n_listed"], scores["n_correct"]) == (3, 1) and scores["precision"] == pytest.approx(1 / 3)


def test_unreadable_answers_are_wrong_answers_in_the_reconsideration_counts():
    from reasoning_study.tasks.core import UnreadableAnswer

    listed_1, valid_1 = {(1,), UnreadableAnswer("{1.5}")}, {(1,)}
    # unchanged: the unreadable answer is kept, wrong
    kept = reconsideration_counts(listed_1, valid_1, listed_1, valid_1, 3)
    assert (kept["n_wrong_1"], kept["n_wrong_kept"], kept["precision_2"]) == (1, 1, 0.5)
    # round 2 replaces it by a solution
    fixed = reconsideration_counts(listed_1, valid_1, {(1,), (2,)}, {(1,), (2,)}, 3)
    assert (fixed["n_wrong_1"], fixed["n_wrong_kept"], fixed["n_new_correct"], fixed["precision_2"]) == (1, 0, 1, 1.0)


@st.composite
def answers(draw):
    "(listed, valid, answer_count): valid ⊆ listed, |valid| <= answer_count."
    count = draw(st.integers(1, 30))
    valid = draw(st.sets(st.integers(0, count - 1), max_size=count))
    wrong = draw(st.sets(st.integers(100, 140), max_size=10))
    return valid | wrong, valid, count


@FAST
@given(answers())
def test_set_scores_in_unit_interval(answer):
    s = set_scores(*answer)
    assert 0 <= s["precision"] <= 1 and 0 <= s["recall"] <= 1 and s["n_correct"] <= s["n_listed"]


# ------------------------------------------------------------------ reconsideration counts and rates


def test_reconsideration_counts_hand_case():
    c = reconsideration_counts({0, 1, 2, 50, 51}, {0, 1, 2}, {0, 1, 3, 4, 51, 52}, {0, 1, 3, 4}, 10)
    assert c == dict(
        n_correct_2=4,
        n_listed_2=6,
        precision_2=4 / 6,
        recall_2=0.4,
        n_correct_kept=2,
        n_wrong_1=2,
        n_wrong_kept=1,
        n_new_correct=2,
    )


def test_reconsideration_counts_empty_rounds():
    c = reconsideration_counts(set(), set(), set(), set(), 3)
    assert (c["n_correct_kept"], c["n_wrong_1"], c["n_wrong_kept"], c["n_new_correct"], c["precision_2"]) == (
        0,
        0,
        0,
        0,
        0.0,
    )
    with pytest.raises(ValueError, match="one round only"):
        reconsideration_counts({7}, set(), {7}, {7}, 9)


@st.composite
def two_rounds(draw):
    count = draw(st.integers(1, 20))
    pool_valid, pool_wrong = (
        st.sets(st.integers(0, count - 1), max_size=count),
        st.sets(st.integers(100, 115), max_size=8),
    )
    v1, w1, v2, w2 = draw(pool_valid), draw(pool_wrong), draw(pool_valid), draw(pool_wrong)
    return v1 | w1, v1, v2 | w2, v2, count


@FAST
@given(two_rounds())
def test_reconsideration_counts_identities(r):
    c = reconsideration_counts(*r)
    # C2 splits into kept-correct and newly found correct
    assert c["n_correct_kept"] + c["n_new_correct"] == c["n_correct_2"]
    assert c["n_wrong_kept"] <= c["n_wrong_1"]
    for rate in (
        correct_retention(c["n_correct_kept"], len(r[1])),
        error_correction(c["n_wrong_kept"], c["n_wrong_1"]),
        new_solution_discovery(c["n_new_correct"], r[4]),
    ):
        assert math.isnan(rate) or 0 <= rate <= 1
    for rate in (
        correct_retention(c["n_correct_kept"], len(r[1]), "reference"),
        error_correction(c["n_wrong_kept"], c["n_wrong_1"], "reference"),
    ):
        assert 0 <= rate <= 1


@pytest.mark.parametrize(
    "rate, args, default, reference",
    [
        (correct_retention, (0, 0), np.nan, 0.0),
        (error_correction, (0, 0), np.nan, 1.0),
        (new_solution_discovery, (0, 0), np.nan, 0.0),
    ],
)
def test_each_empty_denominator(rate, args, default, reference):
    assert math.isnan(rate(*args)) and rate(*args, undefined="reference") == reference


def test_rates_vectorised():
    np.testing.assert_allclose(
        error_correction(np.array([0, 1, 0]), np.array([2, 4, 0]), "reference"), [1.0, 0.75, 1.0]
    )
    out = correct_retention(pd.Series([1, 0]), pd.Series([2, 0]))
    assert out[0] == 0.5 and math.isnan(out[1])


def reconsideration_table():
    "Rows 0-2 changed/unchanged with empty denominators, row 3 unparsable, row 4 truncated, row 5 no turn."
    t = rows(
        answer_count=10,
        precision=0.5,
        recall=0.2,
        decision=["changed", "changed", "unchanged", "unparsable", "changed", None],
        n_correct=[3, 0, 2, 1, 0, 4],
        n_correct_kept=[2, 0, 2, 0, 0, 0],
        n_wrong_1=[2, 4, 0, 1, 0, 0],
        n_wrong_kept=[1, 0, 0, 0, 0, 0],
        n_new_correct=[2, 1, 0, 5, 0, 0],
    )
    t.loc[4, ["status", "precision", "recall"]] = ["truncated", np.nan, np.nan]
    return t


def test_reconsideration_rates_default_rule():
    r = reconsideration_rates(reconsideration_table(), by=["model"]).iloc[0]
    assert r["csr"] == pytest.approx(5 / 6) and r["esc"] == pytest.approx(0.75) and r["nsd"] == pytest.approx(0.1)
    assert (r["n_rows"], r["n_unscored"], r["n_unparsable"], r["n_no_decision"]) == (6, 1, 1, 1)
    assert (r["n_csr"], r["n_esc"], r["n_nsd"]) == (2, 2, 3)


def test_reconsideration_rates_reference_rule():
    r = reconsideration_rates(
        reconsideration_table(), by=["model"], undefined="reference", unparsable="unchanged"
    ).iloc[0]
    assert r["csr"] == pytest.approx(2 / 3) and r["esc"] == pytest.approx(0.625) and r["nsd"] == pytest.approx(0.075)
    # fill-ins only, unparsable still excluded: rows 0-2
    r = reconsideration_rates(reconsideration_table(), by=["model"], undefined="reference").iloc[0]
    assert r["csr"] == pytest.approx((2 / 3 + 0 + 1) / 3) and r["esc"] == pytest.approx((0.5 + 1 + 1) / 3)


def test_reconsideration_rates_all_denominators_empty():
    t = rows(
        answer_count=0,
        precision=0.0,
        recall=0.0,
        decision="changed",
        n_correct=[0, 0],
        n_correct_kept=0,
        n_wrong_1=0,
        n_wrong_kept=0,
        n_new_correct=0,
    )
    r = reconsideration_rates(t, by=["model"]).iloc[0]
    assert all(math.isnan(r[c]) for c in ("csr", "esc", "nsd")) and (r["n_csr"], r["n_esc"], r["n_nsd"]) == (0, 0, 0)
    ref = reconsideration_rates(t, by=["model"], undefined="reference").iloc[0]
    assert (ref["csr"], ref["esc"], ref["nsd"]) == (0.0, 1.0, 0.0)


def test_reconsideration_rates_no_undefined_means_variants_agree():
    t = reconsideration_table().iloc[[0]]
    a, b = (reconsideration_rates(t, by=["model"], undefined=u).iloc[0] for u in ("exclude", "reference"))
    assert (a["csr"], a["esc"], a["nsd"]) == (b["csr"], b["esc"], b["nsd"])


def test_reconsideration_rates_validates():
    t = reconsideration_table()
    with pytest.raises(ValueError, match="unchanged"):
        reconsideration_rates(t.assign(n_new_correct=1), by=["model"])
    with pytest.raises(ValueError, match="exceed"):
        reconsideration_rates(t.assign(n_wrong_kept=5), by=["model"])
    with pytest.raises(ValueError, match="unparsable must be"):
        reconsideration_rates(t, by=["model"], unparsable="drop")
    assert len(instance_reconsideration(t)) == 3  # rows 0-2


# ------------------------------------------------------------------ bins and ECE


def test_bins_match_the_reference_binning_on_percent_confidences():
    conf = np.arange(101) / 100
    codes = pd.cut(conf, bins=bin_edges(10), include_lowest=True, labels=False)
    assert list(confidence_bin(conf)) == list(codes)


@FAST
@given(st.floats(0, 1), st.integers(1, 20))
def test_bin_contains_its_confidence(c, m):
    b = confidence_bin(c, m)
    assert 0 <= b < m and (b / m < c or b == 0) and c <= (b + 1) / m + 1e-9


def test_computed_confidences_bin_as_the_value_they_stand_for():
    vote = (0.1 + 0.1 + 0.1) / 3
    assert vote != 0.1 and confidence_bin(vote) == confidence_bin(0.1) == 0
    assert confidence_bin(1 + 2e-16) == 9 and confidence_bin(-1e-17) == 0  # a mean of 1.0s, a rounding below 0
    assert confidence_bin(0.7 + 1e-6) == 7  # beyond the tolerance: the next bin
    # by hand: bins {0.1, vote} (mean confidence 0.1, mean recall 0.1) and {0.2} (0.2, 0.2): ECE 0.
    # Binned raw, vote would join 0.2: |0 - 0.1| · 1/3 + |0.2 - 0.15| · 2/3 = 1/15.
    t = rows(confidence=[0.1, vote, 0.2], recall=[0.0, 0.2, 0.2], precision=1.0)
    assert ece(t) == pytest.approx(0.0, abs=1e-12)
    b = reliability_bins(t)
    assert b["count"].tolist()[:3] == [2, 1, 0]
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        confidence_bin(1 + 1e-6)


def test_ece_hand_cases_both_variants_both_metrics():
    t = rows(confidence=[0.9, 0.9, 0.95, 0.1], recall=[0.2, 1.0, 0.5, 0.0], precision=[1.0, 1.0, 0.5, 0.0])
    assert ece(t) == pytest.approx(0.2875)
    assert ece(t, variant="reference") == pytest.approx(0.4625)
    assert ece(t, metric="precision") == pytest.approx(0.1875)
    assert ece(t, metric="precision", variant="reference") == pytest.approx(0.3125)


def test_ece_edges_and_empty_cases():
    # 0.1 lies in the first bin, 0.2 in the second (right-closed): a mixed bin would differ
    t = rows(confidence=[0.1, 0.2], recall=[0.1, 0.2], precision=1.0)
    assert ece(t) == 0.0
    assert math.isnan(ece(t.iloc[:0]))
    assert math.isnan(ece(t.assign(status="error", recall=np.nan, precision=np.nan)))
    assert math.isnan(ece(t.assign(confidence=np.nan)))


def test_reliability_bins_keep_empty_bins_and_groups():
    t = pd.concat(
        [
            rows(paradigm="short", confidence=[0.95, 0.85], recall=[0.0, 0.1], precision=1.0),
            rows(paradigm="long", confidence=[np.nan], recall=[0.3], precision=1.0),
        ]
    )
    b = reliability_bins(t, by=["paradigm"])
    assert len(b) == 20 and set(b["metric"]) == {"recall"}
    long, short = b[b["paradigm"] == "long"], b[b["paradigm"] == "short"]
    assert long["count"].sum() == 0 and long["ece"].isna().all()  # a group without confidences: all bins empty
    assert list(short["count"]) == [0] * 8 + [1, 1]
    assert short["ece"].iloc[0] == pytest.approx(0.5 * 0.75 + 0.5 * 0.95)
    assert list(short["lower"].round(2)) == [k / 10 for k in range(10)]


def test_reference_variant_counts_only_complete_answers():
    t = rows(confidence=[0.55, 0.55], recall=[1.0, 0.999], precision=1.0)
    b = reliability_bins(t, variant="reference")
    assert b.loc[5, "performance"] == 0.5 and b.loc[5, "count"] == 2


@st.composite
def calibration_tables(draw):
    n = draw(st.integers(1, 40))
    conf = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    recall = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    precision = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    return rows(confidence=np.array(conf) / 100, recall=recall, precision=precision)


@FAST
@given(calibration_tables(), st.sampled_from(["paper", "reference"]), st.sampled_from(["recall", "precision"]))
def test_ece_in_unit_interval(t, variant, metric):
    assert 0 <= ece(t, metric, variant) <= 1 + 1e-12


@FAST
@given(calibration_tables())
def test_ece_is_zero_when_recall_equals_confidence(t):
    assert ece(t.assign(recall=t["confidence"])) == pytest.approx(0, abs=1e-12)


@FAST
@given(st.lists(st.booleans(), min_size=1, max_size=30))
def test_reference_ece_is_zero_for_sure_and_right_answers(complete):
    conf = np.where(complete, 1.0, 0.0)  # confidence 1 exactly when the set is complete
    t = rows(confidence=conf, recall=np.where(complete, 1.0, 0.3), precision=1.0)
    assert ece(t, variant="reference") == 0.0


@FAST
@given(calibration_tables())
def test_ece_ignores_row_order_and_duplication(t):
    assert ece(pd.concat([t, t]).iloc[::-1]) == pytest.approx(ece(t))


@FAST
@given(calibration_tables())
def test_bins_weighted_gap_is_mean_gap(t):
    b = reliability_bins(t)
    weights = b["count"] / b["count"].sum()
    assert (weights * b["gap"].fillna(0)).sum() == pytest.approx(t["recall"].mean() - t["confidence"].mean(), abs=1e-9)


def naive_ece(conf, perf, n_bins=10):
    "ECE written out from eqs. 4-8, binned by pd.cut as the reference code does."
    bins = pd.cut(np.asarray(conf), bins=np.arange(n_bins + 1) / n_bins, include_lowest=True, labels=False)
    total = 0.0
    for b in range(n_bins):
        members = [i for i in range(len(conf)) if bins[i] == b]
        if members:
            total += (
                len(members)
                / len(conf)
                * abs(np.mean([perf[i] for i in members]) - np.mean([conf[i] for i in members]))
            )
    return total


@FAST
@given(calibration_tables())
def test_ece_equals_the_formula_written_out(t):
    conf, recall = t["confidence"].tolist(), t["recall"].tolist()
    assert ece(t) == pytest.approx(naive_ece(conf, recall), abs=1e-12)
    assert ece(t, variant="reference") == pytest.approx(naive_ece(conf, [float(r == 1) for r in recall]), abs=1e-12)


def test_grouped_tables_equal_per_group_computation():
    t = synthetic_results(n_questions=8, seed=2)
    t = pd.concat([t, t.assign(model="other")])  # repeated index labels on purpose
    by = ["model", "paradigm", "condition", "task"]
    summary = summary_table(t, by=by).set_index(by)
    rates = reconsideration_rates(t, by=by).set_index(by)
    for key, sub in t.groupby(by):
        scored = sub[(sub["status"] == "answered") & sub["recall"].notna()]
        assert summary.loc[key, "recall"] == pytest.approx(scored["recall"].mean())
        assert summary.loc[key, "n_rows"] == len(sub)
        for metric in ("recall", "precision"):
            expected = ece(sub, metric)
            got = summary.loc[key, f"ece_{metric}"]
            assert (math.isnan(expected) and math.isnan(got)) or got == pytest.approx(expected)
        per_instance = instance_reconsideration(sub)
        assert rates.loc[key, "n_csr"] == per_instance["csr"].notna().sum()
        if len(per_instance):
            assert rates.loc[key, "esc"] == pytest.approx(per_instance["esc"].mean(), nan_ok=True)


# ------------------------------------------------------------------ summary and factors


def test_summary_table_row_sets_and_counts():
    t = rows(
        paradigm=["long"] * 4, confidence=[0.5, 0.6, 0.4, np.nan], recall=[0.2, 1.0, 0.5, 0.0], precision=[1, 1, 0.5, 0]
    )
    t = pd.concat([t, rows(paradigm=["long"], status="truncated", confidence=0.9, recall=np.nan, precision=np.nan)])
    s = summary_table(t, by=["paradigm"]).iloc[0]
    assert (s["n_rows"], s["n_scored"], s["n_unscored"], s["n_confidence"], s["n_no_confidence"]) == (5, 4, 1, 3, 1)
    assert s["recall"] == pytest.approx(0.425) and s["confidence"] == pytest.approx(0.5)
    assert s["ece_recall"] == pytest.approx(ece(t))
    only = summary_table(t, by=["paradigm"], require_confidence=True).iloc[0]
    assert only["recall"] == pytest.approx(1.7 / 3)
    assert summary_table(t, by=["paradigm"], percent=True).iloc[0]["recall"] == pytest.approx(42.5)


def test_summary_table_keeps_missing_group_keys_and_handles_empty_tables():
    t = rows(model=["a", None], confidence=0.5, recall=0.5, precision=0.5)
    assert len(summary_table(t, by=["model"])) == 2
    empty = summary_table(t.iloc[:0], by=["model"])
    assert len(empty) == 0 and "model" in empty.columns


def test_length_confidence_hand_case():
    t = rows(
        paradigm="long",
        reasoning_tokens=[10, 100, 1000, 10000],
        confidence=[0.9, 0.7, 0.5, 0.3],
        precision=1,
        recall=0.1,
    )
    r = length_confidence(t, by=["paradigm"]).iloc[0]
    assert (r["n"], round(r["r"], 9), round(r["slope"], 9), round(r["intercept"], 9)) == (4, -1.0, -0.2, 1.1)
    b = length_bins(t, by=["paradigm"], n_bins=3)
    assert list(b["count"]) == [2, 1, 1] and b["confidence"].iloc[0] == pytest.approx(0.8)


def test_length_confidence_degenerate_groups():
    t = rows(paradigm="long", reasoning_tokens=[100, 100, 100], confidence=[0.1, 0.5, 0.9], precision=1, recall=0.1)
    r = length_confidence(t, by=["paradigm"]).iloc[0]
    assert math.isnan(r["r"]) and math.isnan(r["slope"])


def test_by_level_temperature_and_reflections():
    t = rows(
        level=[1, 1, 2],
        recall=[0.4, 0.2, 0.1],
        confidence=[0.9, 0.7, 1.0],
        precision=1.0,
        temperature=[0.0, 0.0, 1.0],
        condition=["reflection_k1", "reflection_k10", "base"],
    )
    lv = by_level(t, by=["model"]).set_index("level")
    assert lv.loc[1, "recall"] == pytest.approx(0.3) and lv.loc[1, "confidence_sem"] == pytest.approx(0.1)
    assert math.isnan(lv.loc[2, "recall_sem"])
    assert list(temperature_sweep(t, by=["model"])["n_rows"]) == [2, 1]
    assert list(reflection_sweep(t, by=["model"])["reflections"]) == [1, 10]


def test_movement_pairs_and_grid():
    t = rows(
        condition="base",
        model=["s", "s", "l", "s", "l"],
        paradigm=["short", "short", "long", "short", "long"],
        question_id=[1, 1, 1, 2, 3],
        confidence=[0.9, 0.7, 0.6, 0.9, 0.4],
        recall=[0.0, 0.2, 0.5, 0.1, 0.4],
        precision=1.0,
    )
    pairs = movement_pairs(t, family={"s": "F", "l": "F"})
    assert list(pairs["question_id"]) == [1]  # questions 2 and 3 have one paradigm only
    assert pairs.iloc[0][["confidence_short", "recall_short"]].tolist() == pytest.approx([0.8, 0.1])
    assert bool(pairs.iloc[0]["toward_diagonal"])
    assert movement_grid(pairs)["count"].tolist() == [1]
    with pytest.raises(ValueError, match="no family"):
        movement_pairs(t, family={"s": "F"})


# ------------------------------------------------------------------ self-consistency


def test_median_confidence_selection():
    assert median_confidence_index([0.1, 0.9, 0.5, 0.4]) == 2  # median 0.45: 0.5 and 0.4 tie -> lowest index
    assert median_confidence_index([0.7, 0.3]) == 0
    assert median_confidence_index([0.3, 0.3, 0.9]) == 0
    assert median_confidence_index([np.nan, 0.2]) == 1
    assert median_confidence_index([np.nan]) is None


@FAST
@given(st.lists(st.one_of(st.integers(0, 100).map(lambda c: c / 100), st.just(float("nan"))), min_size=1, max_size=32))
def test_median_selection_is_one_closest_sample(confidences):
    i = median_confidence_index(confidences)
    known = [c for c in confidences if not math.isnan(c)]
    if not known:
        assert i is None
        return
    distances = [abs(c - np.median(known)) if not math.isnan(c) else np.inf for c in confidences]
    assert distances[i] <= min(distances) + 1e-12
    assert all(distances[j] > min(distances) + 1e-12 for j in range(i))  # no earlier tie


def test_vote_union_and_confidence_hand_case():
    samples = [({1, 2, 3}, 0.9), ({1, 2}, 0.6), ({1, 9}, 0.3), (set(), 0.8)]
    sets = [s for s, _ in samples]
    assert (
        vote_solutions(sets) == {1, 2} and vote_solutions(sets, 0.75) == {1} and union_solutions(sets) == {1, 2, 3, 9}
    )
    assert voting_confidence(samples, {1, 2}) == pytest.approx(0.66)
    assert voting_confidence(samples, union_solutions(sets)) == pytest.approx(4.5 / 7)
    assert voting_confidence(samples, set()) == pytest.approx(0.65)
    agg = aggregate_samples(samples, "threshold")  # ours: a majority of the samples
    assert score_aggregate(agg, {1, 2, 3}, 5) == dict(
        n_listed=2, n_correct=2, precision=1.0, recall=0.4, confidence=pytest.approx(0.66), sample_index=None
    )
    med = aggregate_samples(samples, "median")
    assert (med.sample_index, med.solutions, med.confidence) == (1, {1, 2}, 0.6)
    assert aggregate_questions({"q": samples}, "voting")["q"].solutions == {1, 2, 3, 9}  # the paper's voting: the union
    voting = aggregate_samples(samples)  # the default: the paper's voting
    assert (voting.solutions, voting.confidence) == ({1, 2, 3, 9}, pytest.approx(4.5 / 7))
    with pytest.raises(ValueError, match="method must be one of"):
        aggregate_samples(samples, "vote")  # the old names are gone
    with pytest.raises(ValueError, match="threshold"):
        vote_solutions(sets, 1.5)


def test_exact_threshold_shares_are_kept():
    sets = [{1}, {1}, {2}, set(), set(), set(), set(), set(), set(), set()]
    assert vote_solutions(sets, 0.2) == {1}  # 2 of 10 = 0.2 exactly
    assert vote_solutions([{1}, {1}, {2}], 2 / 3) == {1}


@st.composite
def sample_lists(draw):
    n = draw(st.integers(1, 8))
    sets = [draw(st.sets(st.integers(0, 12), max_size=6)) for _ in range(n)]
    conf = [draw(st.one_of(st.floats(0, 1), st.just(float("nan")))) for _ in range(n)]
    return list(zip(sets, conf))


@FAST
@given(sample_lists(), st.floats(0.01, 1), st.floats(0.01, 1))
def test_voting_properties(samples, t1, t2):
    sets = [s for s, _ in samples]
    low, high = sorted((t1, t2))
    assert vote_solutions(sets, high) <= vote_solutions(sets, low) <= union_solutions(sets)
    assert union_solutions(sets) == set().union(*sets)
    assert sum(solution_frequencies(sets).values()) == sum(len(s) for s in sets)
    known = [c for _, c in samples if not math.isnan(c)]
    for kept in (vote_solutions(sets, low), union_solutions(sets)):
        c = voting_confidence(samples, kept)
        assert (math.isnan(c) and not known) or min(known) - 1e-12 <= c <= max(known) + 1e-12


@FAST
@given(sample_lists())
def test_median_aggregate_is_one_of_the_samples(samples):
    agg = aggregate_samples(samples, "median")
    if agg.sample_index is None:
        assert all(math.isnan(c) for _, c in samples)
    else:
        assert agg.solutions == samples[agg.sample_index][0] and agg.confidence == samples[agg.sample_index][1]


# ------------------------------------------------------------------ the synthetic table


def test_synthetic_results_follow_the_contract():
    t = synthetic_results(n_questions=6, seed=1)
    assert list(t.columns) == RESULT_COLUMNS
    scored = t[t["status"] == "answered"]
    assert scored["precision"].between(0, 1).all() and scored["recall"].between(0, 1).all()
    assert t[t["status"] != "answered"]["recall"].isna().all()
    assert t["confidence"].dropna().between(0, 1).all()
    assert set(t["condition"]) == {
        "base",
        "exploration",
        "reflection_k1",
        "reflection_k2",
        "reflection_k4",
        "sc_median",
        "sc_voting",
        "sc_threshold",
    }
    m = mitigation_table(t, by=["paradigm", "condition"])
    assert len(m) == 9 and m["csr"].dropna().between(0, 1).all()


def test_rows_scored_from_truncated_answers_count_only_with_their_flag():
    from reasoning_study.metrics import musobench as mm

    table = pd.DataFrame(
        dict(
            status=["answered", "truncated", "truncated"],
            precision=[1.0, 0.5, 0.5],
            recall=[0.5, 0.25, 0.25],
            confidence=[0.5, 0.25, 0.9],
            scored_from_truncated=[False, True, False],
        )
    )
    assert list(mm.scored_mask(table)) == [
        True,
        True,
        False,
    ]  # an unflagged truncated row is not an answer, whatever its numbers
    assert list(mm.calibration_rows(table).index) == [0, 1]
    assert math.isclose(mm.ece(table), 0.0)  # rows 0 and 1 are calibrated; row 2 (0.9 vs 0.25) stays out
    assert list(mm.scored_mask(table.drop(columns="scored_from_truncated"))) == [True, False, False]


# ------------------------------------------------------------------ self-consistency names (issue 13, point 5)


def test_self_consistency_conditions_name_the_papers_rows_and_ours():
    assert SC_METHODS == {"median": "sc_median", "voting": "sc_voting", "threshold": "sc_threshold"}
    assert LEGACY_CONDITIONS == {"sc_union": "sc_voting", "sc_vote": "sc_threshold"}  # union was the paper's voting
    old = pd.DataFrame(dict(condition=["sc_union", "sc_vote", "sc_median", "base"], recall=[0.5, 0.2, 0.3, 0.1]))
    new = current_conditions(old)
    assert list(new["condition"]) == ["sc_voting", "sc_threshold", "sc_median", "base"] and list(new["recall"]) == [
        0.5,
        0.2,
        0.3,
        0.1,
    ]
    assert list(old["condition"])[:2] == ["sc_union", "sc_vote"]
    with pytest.raises(ValueError, match="missing \\['condition'\\]"):
        current_conditions(pd.DataFrame(dict(recall=[1.0])))


# ------------------------------------------------------------------ the unscored policy (issue 13, point 4)


def replies(statuses, recall, confidence=None, **more):
    n = len(statuses)
    return rows(
        status=statuses,
        recall=recall,
        precision=[r if r is None else 1.0 for r in recall],
        confidence=confidence if confidence is not None else [0.5] * n,
        **more,
    ).astype({"recall": float, "precision": float})


def test_unscored_policy_hand_case():
    # an answer (recall 0.6, confidence 0.8), a reply cut off with nothing to read (no confidence), a failed request
    t = replies(["answered", "truncated", "error"], [0.6, None, None], confidence=[0.8, np.nan, np.nan])
    assert list(unscored_replies(t)) == [False, True, False]
    e, z = (summary_table(t, by=[], unscored=u).iloc[0] for u in UNSCORED_POLICIES)
    assert (e["recall"], e["n_scored"], e["n_unscored"], e["n_error"]) == (0.6, 1, 2, 1)
    assert (z["recall"], z["precision"], z["n_scored"], z["n_zeroed"], z["n_unscored"], z["n_error"]) == (
        0.3,
        0.5,
        2,
        1,
        1,
        1,
    )
    # the cut reply stated no confidence: ECE(r) = |0.6 - 0.8|
    assert e["ece_recall"] == z["ece_recall"] == pytest.approx(0.2)
    # had it stated 0.4: bins (0.7, 0.8] and (0.3, 0.4], ECE = (0.2 + 0.4) / 2
    rated = t.assign(confidence=[0.8, 0.4, np.nan])
    assert summary_table(rated, by=[], unscored="zero").iloc[0]["ece_recall"] == pytest.approx(0.3)
    assert ece(apply_unscored(rated, "zero")) == pytest.approx(0.3) and ece(rated) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="unscored must be one of"):
        summary_table(t, unscored="all")


@st.composite
def policy_tables(draw):
    n = draw(st.integers(1, 30))
    statuses = draw(st.lists(st.sampled_from(["answered", "truncated", "error"]), min_size=n, max_size=n))
    recall = [draw(st.floats(0, 1)) if s == "answered" else None for s in statuses]
    confidence = [draw(st.one_of(st.integers(0, 100).map(lambda c: c / 100), st.just(float("nan")))) for _ in statuses]
    group = draw(st.lists(st.sampled_from(["a", "b"]), min_size=n, max_size=n))
    return replies(statuses, recall, confidence, paradigm=group)


@FAST
@given(policy_tables())
def test_zero_policy_adds_the_unscored_replies_at_zero(t):
    both = under_both_policies(summary_table, t, by=["paradigm"]).set_index(["paradigm", "unscored"])
    for group, sub in t.groupby("paradigm"):
        e, z = both.loc[(group, "exclude")], both.loc[(group, "zero")]
        answered, errors = (sub["status"] == "answered").sum(), (sub["status"] == "error").sum()
        assert (e["n_scored"], z["n_scored"], z["n_zeroed"], z["n_error"]) == (
            answered,
            len(sub) - errors,
            len(sub) - errors - answered,
            errors,
        )
        if answered:
            assert z["recall"] * z["n_scored"] == pytest.approx(e["recall"] * e["n_scored"])  # the same sum, more rows
        else:
            assert math.isnan(e["recall"]) and (z["n_scored"] == 0 or z["recall"] == 0.0)
    assert (scored_mask(apply_unscored(t, "zero")) == (t["status"] != "error").to_numpy()).all()
