"""Acceptance tests of `metrics.overthinking`: the table functions agree with the one-trajectory
definitions (and with naive re-implementations) on hand-made and random trajectories, the paper's
identities hold (solved = verbose + harmful, Optimal = Actual + H), and bad tables fail clearly."""

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasoning_study.metrics.overthinking import (
    check_prefix_table,
    cross_model_spearman,
    first_correct_index,
    is_harmful,
    is_verbose,
    last_correct_index,
    length_distribution,
    majority_vote_at_k,
    matthews_corrcoef,
    optimal_vs_test_time_scaling,
    overthinking_table,
    pass_at_k,
    prefix_rows,
    robustness,
    robustness_summary,
    spearman,
    stability_curve,
    stopping_at_k,
    stopping_index,
    stopping_points,
    strategy_table,
    synthetic_tables,
    trajectories,
    transition_counts,
    transition_matrix,
    wasted_budget_table,
)

GOLD = "y"
KEYS = dict(model="m", benchmark="b", seed=0, template="stop_now", extractor="rules")


def table_of(prediction_lists, **keys):
    "A per-prefix table with one trajectory per list of forced answers (correct iff the answer is GOLD)."
    keys = {**KEYS, **keys}
    parts = [
        prefix_rows(
            [p == GOLD for p in preds],
            preds,
            [3 + k for k in range(len(preds) - 1)],
            item_id=f"i{j}",
            format="mc" if j % 2 else "ff",
            **keys,
        )
        for j, preds in enumerate(prediction_lists)
    ]
    return pd.concat(parts, ignore_index=True)


answers = st.sampled_from([GOLD, "a", "b", None])
trajectory_lists = st.lists(st.lists(answers, min_size=1, max_size=10), min_size=1, max_size=8)
fast = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- hand-computed trajectories

HAND = {  # name: (forced answers, tau, verbose, harmful, i*, optimal length, wasted budget)
    "never_correct": (["a", "b", None], None, False, False, None, 2, None),
    "correct_at_empty_prefix": ([GOLD, GOLD, GOLD], 0, True, False, 1, 0, 2),
    "correct_then_wrong": (["a", GOLD, GOLD, "a", "a"], 1, False, True, 2, 1, 3),
    "wrong_then_correct": (["a", "a", "b", GOLD], 3, True, False, None, 3, 0),
    "correct_wrong_correct": ([GOLD, "a", GOLD], 0, True, False, 0, 0, 2),
    "empty_trace_correct": ([GOLD], 0, True, False, None, 0, 0),
    "empty_trace_wrong": (["a"], None, False, False, None, 0, None),
}


@pytest.mark.parametrize("name", list(HAND))
def test_hand_computed_trajectory(name):
    preds, tau, verbose, harmful, i_star, optimal, wasted = HAND[name]
    z = [p == GOLD for p in preds]
    assert (first_correct_index(z), is_verbose(z), is_harmful(z), last_correct_index(z)) == (
        tau,
        verbose,
        harmful,
        i_star,
    )
    row = trajectories(table_of([preds])).iloc[0]
    assert (row["solved"], row["verbose"], row["harmful"]) == (tau is not None, verbose, harmful)
    assert row["optimal_length"] == optimal
    for column, expected in (("first_correct_index", tau), ("wasted_budget", wasted), ("last_correct_index", i_star)):
        assert math.isnan(row[column]) if expected is None else row[column] == expected, column
    assert (row["no_cot_correct"], row["actual_correct"]) == (z[0], z[-1])


def test_hand_computed_strategies_and_tokens():
    t = table_of(
        [HAND[n][0] for n in ("never_correct", "correct_at_empty_prefix", "correct_then_wrong", "wrong_then_correct")]
    )
    traj = trajectories(t).set_index("item_id")
    # utterance tokens are 3, 4, 5, ...: t<=1 has 3 tokens, t<=3 has 3+4+5
    assert traj.loc["i2", ["difficulty_tokens", "optimal_tokens", "wasted_tokens"]].tolist() == [
        3,
        3,
        3 + 4 + 5 + 6 - 3,
    ]
    assert traj.loc["i3", "difficulty_tokens"] == 12
    s = strategy_table(trajectories(t)).set_index("strategy")
    assert s.loc[["No-CoT", "Actual", "Optimal"], "accuracy"].tolist() == [0.25, 0.5, 0.75]
    assert s.loc[["No-CoT", "Actual", "Optimal"], "harmful_rate"].tolist() == [0, 0.25, 0]
    assert s.loc["Optimal", "length"] == (2 + 0 + 1 + 3) / 4  # unsolved: optimal length = N
    assert s.loc["Actual", "length"] == (2 + 2 + 4 + 3) / 4


def test_transition_counts_by_hand():
    t = table_of([["a", GOLD, GOLD, "a"], [GOLD, "b"], ["a"]])
    m = transition_matrix(t)
    # (0,1,1,0): W->C, C->C, C->W; (1,0): C->W; (0): none
    assert m.loc["correct"].tolist() == [1, 2] and m.loc["wrong"].tolist() == [1, 0]
    long = transition_counts(t)
    shares = long.set_index(["from_state", "to_state"])["row_share"]
    assert shares[("correct", "wrong")] == pytest.approx(2 / 3) and shares[("wrong", "correct")] == 1.0
    assert long.groupby("from_state")["row_share"].sum().tolist() == pytest.approx([1.0, 1.0])


def test_stopping_at_k_on_crafted_sequences():
    cases = [  # predictions, K, stopping index
        (["a", "a", "a", "b"], 1, 1),
        (["a", "a", "a", "b"], 2, 2),
        (["a", "b", "b", "b", "c"], 2, 3),
        (["a", "b", "a", "b"], 1, 3),
        ([None, None, "a"], 1, 2),
        (["a", None, "a", "a", "a"], 2, 4),
        ([GOLD, GOLD], math.inf, 1),
        (["x"], 3, 0),
        (["  7", "7"], 1, 1),
        (["", ""], 1, 1),
    ]
    for preds, k, expected in cases:
        assert stopping_index(preds, k) == expected, (preds, k)
        assert stopping_points(table_of([preds]), k)["stop_index"].tolist() == [expected], (preds, k)
    with pytest.raises(ValueError, match="K must be"):
        stopping_index(["a"], 0)
    with pytest.raises(ValueError, match="K must be"):
        stopping_index(["a"], 1.5)


def test_stopping_harmful_uses_the_stopped_trajectory():
    t = table_of(
        [
            ["a", GOLD, "b", "b", "b", GOLD],  # stops at 3 (K=1) wrong after being correct: harmful at K=1
            ["a", "a", GOLD, GOLD],
        ]
    )  # stops at 1 (K=1) before the model was ever correct: not harmful
    p = stopping_points(t, 1).set_index("item_id")
    assert p.loc["i0", ["stop_index", "stop_correct", "harmful"]].tolist() == [3, False, True]
    assert p.loc["i1", ["stop_index", "stop_correct", "harmful", "solved_by_stop"]].tolist() == [1, False, False, False]
    assert trajectories(t)["harmful"].tolist() == [False, False]  # both end correct at N


# ---------------------------------------------------------------- properties on random trajectories


@fast
@given(trajectory_lists)
def test_table_functions_agree_with_list_definitions(lists):
    traj = trajectories(table_of(lists)).set_index("item_id")
    for j, preds in enumerate(lists):
        z = [p == GOLD for p in preds]
        row, tau = traj.loc[f"i{j}"], first_correct_index(z)
        assert (row["verbose"], row["harmful"]) == (is_verbose(z), is_harmful(z, preds))  # None: no answer
        assert row["optimal_length"] == (len(z) - 1 if tau is None else tau)
        assert math.isnan(row["first_correct_index"]) if tau is None else row["first_correct_index"] == tau
        i_star = last_correct_index(z)
        assert math.isnan(row["last_correct_index"]) if i_star is None else row["last_correct_index"] == i_star


@fast
@given(trajectory_lists)
def test_paper_identities(lists):
    traj = trajectories(table_of(lists))
    outcomes = traj[["verbose", "harmful", "ended_unanswered"]].astype(int)
    assert (traj["solved"] == outcomes.any(axis=1)).all() and (outcomes.sum(axis=1) <= 1).all()
    s = strategy_table(traj, by=[]).set_index("strategy")
    acc, harm, length = s["accuracy"], s["harmful_rate"], s["length"]
    unanswered = traj["ended_unanswered"].mean()  # solved, then no answer at N: neither verbose nor harmful
    assert acc["Optimal"] == pytest.approx(acc["Actual"] + harm["Actual"] + unanswered)  # Table 1: Optimal = Actual + H
    assert acc["Optimal"] >= acc["Actual"] and acc["Optimal"] >= acc["No-CoT"]
    assert 0 <= harm["Actual"] <= acc["Optimal"]
    assert length["No-CoT"] == 0 <= length["Optimal"] <= length["Actual"]
    o = overthinking_table(traj, by=[]).iloc[0]
    assert o["n_solved"] == o["n_verbose"] + o["n_harmful"] + o["n_ended_unanswered"]
    assert (traj.loc[traj.solved, "wasted_budget"] >= 0).all()


@fast
@given(trajectory_lists)
def test_transitions_match_a_naive_count(lists):
    naive = Counter()
    for preds in lists:
        states = ["no answer" if p is None else "correct" if p == GOLD else "wrong" for p in preds]
        naive.update(zip(states, states[1:]))
    m = transition_matrix(table_of(lists))
    seen = ["correct", "wrong"] + (["no answer"] if any(p is None for preds in lists for p in preds) else [])
    assert list(m.index) == list(m.columns) == seen  # no answer is its own state, never a wrong answer
    assert all(m.loc[a, b] == naive[(a, b)] for a in seen for b in seen)


@fast
@given(trajectory_lists, st.sampled_from([1, 2, 3, 5, math.inf]))
def test_vectorised_stopping_matches_the_reference(lists, k):
    t = table_of(lists)
    points = stopping_points(t, k).set_index("item_id")
    for j, preds in enumerate(lists):
        s = stopping_index(preds, k)
        z = [p == GOLD for p in preds]
        assert points.loc[f"i{j}", "stop_index"] == s
        assert points.loc[f"i{j}", "harmful"] == (any(z[: s + 1]) and not z[s] and preds[s] is not None)
    summary = stopping_at_k(t, ks=(k,)).iloc[0]
    optimal = trajectories(t)["solved"].mean()
    assert summary["accuracy"] + summary["harmful_rate"] <= optimal + 1e-12


@fast
@given(trajectory_lists)
def test_stopping_at_infinity_is_actual_length(lists):
    t = table_of(lists)
    inf = stopping_at_k(t, ks=(math.inf,)).iloc[0]
    actual = strategy_table(trajectories(t), by=[]).set_index("strategy").loc["Actual"]
    assert (inf["accuracy"], inf["length"], inf["harmful_rate"]) == pytest.approx(
        (actual["accuracy"], actual["length"], actual["harmful_rate"])
    )


@fast
@given(trajectory_lists)
def test_stability_curve_matches_a_naive_loop(lists):
    curve = stability_curve(table_of(lists)).set_index("steps_after_tau")
    at_k = {}
    for preds in lists:
        z = [p == GOLD for p in preds]
        tau = first_correct_index(z)
        if tau is None:
            continue
        for k in range(len(z) - tau):
            at_k.setdefault(k, []).append((z[tau + k], all(z[tau : tau + k + 1])))
    assert sorted(at_k) == list(curve.index)
    for k, rows in at_k.items():
        assert curve.loc[k, "n_trajectories"] == len(rows)
        assert curve.loc[k, "p_correct"] == pytest.approx(np.mean([r[0] for r in rows]))
        assert curve.loc[k, "p_never_left"] == pytest.approx(np.mean([r[1] for r in rows]))
    if len(curve):
        assert curve.loc[0, "p_correct"] == 1.0 and curve["n_trajectories"].is_monotonic_decreasing


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trajectory_lists, st.randoms(use_true_random=False))
def test_row_order_does_not_matter(lists, rnd):
    t = table_of(lists)
    shuffled = t.sample(frac=1.0, random_state=rnd.randint(0, 10_000))
    pd.testing.assert_frame_equal(trajectories(t), trajectories(shuffled))
    pd.testing.assert_frame_equal(stopping_at_k(t, ks=(2,)), stopping_at_k(shuffled, ks=(2,)))


# ---------------------------------------------------------------- correlations and sampling estimators


@fast
@given(st.permutations(list(range(8))))
def test_spearman_matches_the_rank_difference_formula(perm):
    n, d2 = len(perm), sum((i - p) ** 2 for i, p in enumerate(perm))
    assert spearman(list(range(n)), perm) == pytest.approx(1 - 6 * d2 / (n * (n**2 - 1)))


@fast
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=3, max_size=20))
def test_spearman_and_mcc_are_symmetric_and_bounded(pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    r = spearman(a, b)
    assert math.isnan(r) or (-1 - 1e-12 <= r <= 1 + 1e-12 and r == pytest.approx(spearman(b, a)))
    ba, bb = [x > 2 for x in a], [x > 2 for x in b]
    m = matthews_corrcoef(ba, bb)
    assert math.isnan(m) or (-1 - 1e-12 <= m <= 1 + 1e-12 and m == pytest.approx(matthews_corrcoef(bb, ba)))
    if len(set(ba)) == 2:
        assert matthews_corrcoef(ba, ba) == pytest.approx(1.0)
        assert matthews_corrcoef(ba, [not x for x in ba]) == pytest.approx(-1.0)


@fast
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_brute_force_over_subsets(nck):
    n, c, k = nck
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    if k > 1:
        assert pass_at_k(n, c, k) >= pass_at_k(n, c, k - 1)


@fast
@given(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=7), st.data())
def test_majority_vote_matches_brute_force(preds, data):
    correct = [p == "a" for p in preds]
    k = data.draw(st.integers(1, len(preds)))
    scores = []
    for subset in itertools.combinations(range(len(preds)), k):
        votes = Counter(preds[j] for j in subset if preds[j] is not None)
        if not votes:
            scores.append(0.0)
            continue
        top = max(votes.values())
        winners = [a for a, v in votes.items() if v == top]
        scores.append(("a" in winners) / len(winners))
    assert majority_vote_at_k(preds, correct, k) == pytest.approx(np.mean(scores))
    if k == 1:
        assert majority_vote_at_k(preds, correct, 1) == pytest.approx(np.mean(correct))


def test_sampling_estimators_reject_bad_input():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="differ in length"):
        majority_vote_at_k(["a"], [True, False], 1)


# ---------------------------------------------------------------- studies over synthetic tables


@pytest.fixture(scope="module")
def synth():
    return synthetic_tables(
        n_items=30,
        models=("model-a", "model-b", "model-c"),
        seeds=(0, 1, 2),
        templates=("stop_now", "time_up"),
        extractors=("rules", "llm:qwen3-4b"),
    )


@pytest.fixture(scope="module")
def synth_traj(synth):
    return trajectories(synth["prefixes"])


def test_synthetic_tables_follow_the_contract(synth):
    prefix_cols = {
        "model",
        "benchmark",
        "item_id",
        "format",
        "seed",
        "template",
        "extractor",
        "prefix_index",
        "n_utterances",
        "prefix_tokens",
        "trace_tokens",
        "prediction",
        "extraction_method",
        "correct",
        "probe_status",
    }
    assert prefix_cols <= set(synth["prefixes"].columns)
    assert {"final_prediction", "final_correct", "trace_status", "sample_index"} <= set(synth["traces"].columns)
    assert {"utterance_index", "tokens", "char_start", "char_end"} <= set(synth["utterances"].columns)
    p = synth["prefixes"]
    assert not p.loc[p["prediction"].isna(), "correct"].any()  # no prediction -> wrong
    assert set(p["probe_status"]) <= {"answered", "truncated", "error"}
    again = synthetic_tables(
        n_items=30,
        models=("model-a", "model-b", "model-c"),
        seeds=(0, 1, 2),
        templates=("stop_now", "time_up"),
        extractors=("rules", "llm:qwen3-4b"),
    )
    pd.testing.assert_frame_equal(again["prefixes"], p)  # seeded


def test_parquet_round_trip_keeps_every_metric(synth, tmp_path):
    path = tmp_path / "prefixes.parquet"
    synth["prefixes"].to_parquet(path)
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(trajectories(back), trajectories(synth["prefixes"]), check_dtype=False)
    pd.testing.assert_frame_equal(stopping_at_k(back), stopping_at_k(synth["prefixes"]))


def test_strategy_table_with_instruct_and_own_answers(synth, synth_traj):
    instruct_of = {m: f"{m}-instruct" for m in ("model-a", "model-b", "model-c")}
    s = strategy_table(
        synth_traj, by=["model"], instruct=synth["instruct"], instruct_of=instruct_of, traces=synth["traces"]
    )
    assert list(s["strategy"].astype(str).unique()) == [
        "No-CoT",
        "Actual",
        "Optimal",
        "Instruct",
        "Actual (own answer)",
    ]
    wide = s.pivot(index="model", columns="strategy", values="accuracy")
    assert (wide["Optimal"] >= wide["Actual"]).all()
    assert s.loc[s.strategy == "Instruct", "harmful_rate"].isna().all()
    # the synthetic final answer is the last probe: own-answer accuracy equals Actual
    assert wide["Actual (own answer)"].to_numpy() == pytest.approx(wide["Actual"].to_numpy())


def test_robustness_groups_and_summary(synth_traj):
    pairs = robustness(synth_traj)
    assert set(pairs["varied"]) == {
        "seed",
        "template",
        "extractor",
        "seed+template",
        "seed+extractor",
        "template+extractor",
        "seed+template+extractor",
    }
    assert len(pairs) == 3 * 2 * (12 * 11 // 2)  # 3 models x 2 benchmarks x C(12, 2) condition pairs
    summary = robustness_summary(pairs).set_index("varied")
    # the same trace probed differently agrees more than a new trace
    assert summary.loc["template", "spearman_difficulty"] > summary.loc["seed", "spearman_difficulty"]
    assert summary.loc["extractor", "mcc_actual_correct"] > summary.loc["seed", "mcc_actual_correct"]
    same = robustness(
        pd.concat(
            [
                synth_traj.query("seed == 0 and template == 'stop_now' and extractor == 'rules'"),
                synth_traj.query("seed == 0 and template == 'stop_now' and extractor == 'rules'").assign(seed=9),
            ]
        )
    )
    assert same["varied"].unique().tolist() == ["seed"] and same["n_items"].gt(0).all()
    assert np.allclose(same["mcc_actual_correct"].dropna(), 1.0) and np.allclose(
        same["spearman_difficulty"].dropna(), 1.0
    )
    with pytest.raises(ValueError, match="unsolved must be"):
        robustness(synth_traj, unsolved="ignore")
    seeds_only = robustness(synth_traj, factors=("seed",))  # other factors then belong to the item
    assert set(seeds_only["varied"]) == {"seed"} and len(seeds_only) == 3 * 2 * 3


def test_cross_model_matrix_is_symmetric(synth_traj):
    m = cross_model_spearman(synth_traj)
    assert list(m.index) == ["model-a", "model-b", "model-c"]
    assert np.allclose(m.to_numpy(), m.to_numpy().T) and (np.diag(m.to_numpy()) == 1).all()


def test_test_time_scaling_orders_the_curves(synth, synth_traj):
    traces = synth["traces"].query("template == 'stop_now' and extractor == 'rules'")
    probed = synth_traj.query("template == 'stop_now' and extractor == 'rules'")
    curves = optimal_vs_test_time_scaling(probed, traces=traces)
    assert sorted(curves["k"].unique()) == [1, 2, 3]
    wide = curves.pivot_table(index=["model", "k"], columns="strategy", values="accuracy")
    assert (wide["Optimal Length"] >= wide["Pass@K"] - 1e-12).all()  # solved includes z_N = 1
    assert (wide["Pass@K"] >= wide["Actual Length"] - 1e-12).all()
    assert wide.xs(1, level="k")["Pass@K"].to_numpy() == pytest.approx(
        wide.xs(1, level="k")["Actual Length"].to_numpy()
    )
    # K = 1 is Table 1's Actual (and Optimal) on the same trajectories (three seeds of every item)
    table1 = strategy_table(probed, by=["model"]).pivot(index="model", columns="strategy", values="accuracy")
    k1 = wide.xs(1, level="k")
    assert k1["Actual Length"].to_numpy() == pytest.approx(table1["Actual"].to_numpy())
    assert k1["Optimal Length"].to_numpy() == pytest.approx(table1["Optimal"].to_numpy())
    # the synthetic own answer is the last probe, so its labelled curves coincide with the probed ones
    assert wide["Actual Length (own answer)"].to_numpy() == pytest.approx(wide["Actual Length"].to_numpy())
    assert wide["Pass@K (own answer)"].to_numpy() == pytest.approx(wide["Pass@K"].to_numpy())


def test_wasted_budget_and_lengths(synth_traj):
    w = wasted_budget_table(synth_traj)
    solved = synth_traj[synth_traj.solved]
    expected = (
        (solved["n_utterances"] - solved["first_correct_index"]).groupby([solved["model"], solved["benchmark"]]).mean()
    )
    assert w.set_index(["model", "benchmark"])["wasted_budget"].to_numpy() == pytest.approx(expected.to_numpy())
    lengths = length_distribution(synth_traj, unit="tokens")
    assert len(lengths) == 2 * synth_traj["solved"].sum()
    assert (
        lengths.query("strategy == 'Optimal'")["length"].to_numpy()
        <= lengths.query("strategy == 'Actual'")["length"].to_numpy()
    ).all()


# ---------------------------------------------------------------- bad tables fail clearly


def test_bad_prefix_tables_fail_with_clear_messages():
    t = table_of([["a", GOLD, "b"], [GOLD]])
    with pytest.raises(ValueError, match="missing \\['n_utterances'\\]"):
        check_prefix_table(t.drop(columns="n_utterances"))
    with pytest.raises(ValueError, match="duplicated probes"):
        check_prefix_table(pd.concat([t, t.iloc[[1]]]))
    with pytest.raises(ValueError, match="do not have exactly the prefixes"):
        check_prefix_table(t[t.prefix_index != 0])
    with pytest.raises(ValueError, match="do not have exactly the prefixes"):
        check_prefix_table(t.assign(n_utterances=5))
    # a failed probe
    assert check_prefix_table(t.assign(correct=[True, None, False, True]))["item_id"].unique().tolist() == ["i1"]
    with pytest.raises(ValueError, match="no trajectory left: all 2 have a failed probe"):
        check_prefix_table(t.assign(correct=None))
    with pytest.raises(ValueError, match="failed_probes must be one of"):
        trajectories(t, failed_probes="keep")
    with pytest.raises(ValueError, match="empty"):
        check_prefix_table(t.iloc[:0])
    with pytest.raises(ValueError, match="no complete trajectory"):
        check_prefix_table(t[t.prefix_index == 1], incomplete="drop")
    with pytest.raises(ValueError, match="unit must be"):
        length_distribution(trajectories(t), unit="words")
    with pytest.raises(ValueError, match="Stopping@K needs"):
        stopping_points(t.drop(columns="prediction"), 2)


def test_pooled_scaling_without_groups():
    samples = [
        ("x", 0, True, "1"),
        ("x", 1, False, "2"),
        ("y", 0, True, "5"),
        ("y", 1, True, "5"),
    ]  # empty traces: z_0 = z_N
    probed = trajectories(
        pd.concat([prefix_rows([z], [p], item_id=i, **{**KEYS, "seed": s}) for i, s, z, p in samples])
    )
    curves = optimal_vs_test_time_scaling(probed, by=[]).set_index(["strategy", "k"])["accuracy"]
    assert curves[("Pass@K", 1)] == pytest.approx(0.75) and curves[("Pass@K", 2)] == pytest.approx(1.0)
    assert curves[("Actual Length", 2)] == pytest.approx((0.5 + 1.0) / 2)  # x: a 1-1 tie between "1" and "2"
    assert curves[("Actual Length", 1)] == pytest.approx(
        strategy_table(probed, by=[]).set_index("strategy").loc["Actual", "accuracy"]
    )
    with pytest.raises(ValueError, match="missing \\['actual_prediction'\\]"):
        optimal_vs_test_time_scaling(probed.drop(columns="actual_prediction"))
    traces = pd.DataFrame(
        {
            "model": "m",
            "benchmark": "b",
            "item_id": ["x", "x"],
            "seed": [0, 1],
            "final_prediction": ["1", "2"],
            "final_correct": [True, False],
        }
    )
    with pytest.raises(ValueError, match="takes the `trajectories` table first"):
        optimal_vs_test_time_scaling(traces)
    with pytest.raises(ValueError, match="missing \\['final_prediction'\\]"):
        optimal_vs_test_time_scaling(probed, traces=traces.drop(columns="final_prediction"))


# --- recall trajectories of multi-solution answers ------------------------------------------------------


def test_recall_trajectory_by_hand():
    from reasoning_study.metrics.overthinking import recall_trajectories

    # |Ŷ| = 4: {a} -> {a, b} -> {a, b, c, d} (complete at 2) -> {c} -> {c, e?}: e is not a solution, so never valid
    rows = pd.DataFrame(
        {
            "model": "m",
            "task": "timetabling",
            "question_id": 7,
            "prefix_index": [4, 0, 1, 2, 3],
            "n_utterances": 4,
            "answer_count": 4,
            "recall": [0.25, 0.25, 0.5, 1.0, 0.25],
            "valid": [("c",), ("a",), ("a", "b"), ("a", "b", "c", "d"), ("c",)],
        }
    )
    [r] = recall_trajectories(rows, by=["model", "task", "question_id"]).to_dict("records")
    assert (r["first_complete_index"], r["best_recall"], r["best_recall_index"], r["final_recall"]) == (2, 1.0, 2, 0.25)
    assert (r["solutions_found"], r["solutions_lost"], r["n_utterances"], r["answer_count"]) == (4, 3, 4, 4)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sets(st.integers(0, 5), max_size=6), min_size=1, max_size=8), min_size=1, max_size=4))
def test_recall_trajectories_match_a_naive_loop(trajectories_):
    from reasoning_study.metrics.overthinking import recall_trajectories

    rows = [
        {
            "task": "subsetsum",
            "question_id": q,
            "prefix_index": i,
            "n_utterances": len(sets) - 1,
            "answer_count": 6,
            "recall": len(v) / 6,
            "valid": v,
        }
        for q, sets in enumerate(trajectories_)
        for i, v in enumerate(sets)
    ]
    table = recall_trajectories(pd.DataFrame(rows).sample(frac=1, random_state=1)).set_index("question_id")
    for q, sets in enumerate(trajectories_):
        recalls = [len(v) / 6 for v in sets]
        earlier = set().union(*sets[:-1])
        first_complete = next((i for i, v in enumerate(sets) if len(v) == 6), None)
        got = table.loc[q]
        assert (None if pd.isna(got["first_complete_index"]) else got["first_complete_index"]) == first_complete
        assert got["best_recall"] == max(recalls) and got["best_recall_index"] == recalls.index(max(recalls))
        assert got["final_recall"] == recalls[-1]
        assert got["solutions_found"] == len(earlier | sets[-1]) and got["solutions_lost"] == len(earlier - sets[-1])
        assert got["solutions_lost"] <= got["solutions_found"] <= 6


def test_recall_trajectories_reject_bad_tables():
    from reasoning_study.metrics.overthinking import recall_trajectories

    rows = pd.DataFrame(
        {
            "task": "t",
            "question_id": 1,
            "prefix_index": [0, 0],
            "n_utterances": 0,
            "answer_count": 1,
            "recall": [0.0, 1.0],
            "valid": [set(), {1}],
        }
    )
    with pytest.raises(ValueError, match="repeats prefix indices"):
        recall_trajectories(rows)
    with pytest.raises(ValueError, match=r"lack columns \['recall'\]"):
        recall_trajectories(rows.drop(columns="recall"))
    assert recall_trajectories(rows.iloc[:0]).empty
