"""TimeTabling: enumeration vs CP-SAT, the constraint checker, and the tolerant answer parser."""

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasoning_study.tasks import timetabling as tt
from reasoning_study.tasks.core import TooManySolutions, attempt_rng, valid_solutions

CAP = 500


def _enumerate(fn, inst):
    try:
        return fn(inst, cap=CAP)
    except TooManySolutions:
        return "more than cap"


@pytest.mark.parametrize("seed", [11, 12])
def test_enumeration_matches_cpsat_on_random_instances(seed):
    n_compared = n_with_solutions = 0
    for attempt in range(150):
        inst = tt.generate_instance(attempt_rng(tt.TASK, seed, attempt))
        ours, theirs = _enumerate(tt.enumerate_solutions, inst), _enumerate(tt.cpsat_enumerate, inst)
        assert ours == theirs, f"attempt {attempt}: {inst}"
        if isinstance(ours, list):
            assert all(tt.check_solution(inst, s) == [] for s in ours)
            assert len(set(ours)) == len(ours)
            n_with_solutions += bool(ours)
        n_compared += 1
    assert n_compared == 150 and n_with_solutions > 30  # 300 instances in all, many with solutions


def test_checker_rejects_every_non_solution_of_small_instances():
    "Exhaustively: a schedule is feasible iff the checker accepts it, iff the enumerator lists it."
    from itertools import product

    for attempt in range(40):
        inst = tt.generate_instance(attempt_rng(tt.TASK, 3, attempt))
        if len(inst.courses) > 4:
            continue
        feasible = set(tt.enumerate_solutions(inst))
        for schedule in product(*(c.options() for c in inst.courses)):
            assert (tt.check_solution(inst, schedule) == []) == (schedule in feasible)


@functools.lru_cache(maxsize=None)
def _instance_with_solutions(seed, lo=2, hi=40):
    rng_attempt = 0
    while True:
        inst = tt.generate_instance(attempt_rng(tt.TASK, seed, rng_attempt))
        rng_attempt += 1
        sols = _enumerate(tt.enumerate_solutions, inst)
        if isinstance(sols, list) and lo <= len(sols) <= hi:
            return inst, sols


noise_line = st.text(
    alphabet=st.characters(blacklist_characters="0123456789|", blacklist_categories=["Cs", "Zl", "Zp", "Cc"]),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), data=st.data())
def test_rendered_solutions_parse_back_in_any_order_with_noise(seed, data):
    inst, sols = _instance_with_solutions(seed)
    chosen = data.draw(st.lists(st.sampled_from(sols), min_size=1, max_size=len(sols), unique=True))
    order = data.draw(st.permutations(chosen))
    parts = []
    for k, s in enumerate(order, start=1):
        parts += data.draw(st.lists(noise_line, max_size=2))
        parts.append(tt.render_solution(inst, s, k))
    parts += data.draw(st.lists(noise_line, max_size=2))
    parsed = tt.parse_answer("\n".join(parts), inst)
    assert valid_solutions(parsed) == set(chosen)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400))
def test_parser_never_raises_on_arbitrary_text(text):
    inst = tt.generate_instance(random.Random(0))
    for p in tt.parse_answer(text, inst):
        assert p.status in ("valid", "violation", "malformed")


table_fragment = st.sampled_from(
    [
        "| Course0 | T1 | R2 | P0 |",
        "| Course1 | 2 | 0 | 1 |",
        "Solution 1:",
        "**Solution 2:**",
        "| Course | Time | Room | Teacher |",
        "|---|---|---|---|",
        "| Room | Time | Course |",
        "- Course2: Time 3, Room 1",
        "Course9: T1 R1",
        "| Course0 |",
        "|||",
        "Course0 T R",
        "",
    ]
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.one_of(table_fragment, st.text(max_size=30)), max_size=25))
def test_parser_never_raises_on_table_like_garbage(lines):
    inst = tt.TimeTablingInstance(
        (tt.Course((1, 2), (0, 2), 0), tt.Course((2, 3), (0, 1), 1), tt.Course((1, 3), (1, 2), 0))
    )
    for p in tt.parse_answer("\n".join(lines), inst):
        assert p.status in ("valid", "violation", "malformed")
        assert (p.solution is None) == (p.status == "malformed")


def test_formatting_variants_are_the_same_solution():
    inst = tt.TimeTablingInstance((tt.Course((0, 2), (1,), 0), tt.Course((0, 1, 2), (0, 1), 1)))
    variants = [
        "Solution 1:\n| Course | Time | Room | Teacher |\n|---|---|---|---|\n| Course0 | T2 | R1 | P0 |\n| Course1 | T0 | R0 | P1 |",
        "**Solution 1:**\n| Course | Time | Room | Teacher |\n| Course0 | 2 | 1 | 0 |\n| Course1 | 0 | 0 | 1 |",
        "1. Schedule 1\n| Course | Room | Time |\n| **Course 0** | Room 1 | Time 2 |\n| Course 1 | Room 0 | Time 0 |",
        "### Solution 1\n- Course0: Time slot 2, Room 1\n- Course1: time 0, room 0",
        "| Course0 | T2 | R1 | P0 |\n| Course1 | T0 | R0 | P1 |",
    ]
    for text in variants:
        parsed = tt.parse_answer(text, inst)
        assert [(p.status, p.solution) for p in parsed] == [("valid", ((2, 1), (0, 0)))], text


def test_unknown_course_and_partial_tables_are_malformed():
    inst = tt.TimeTablingInstance((tt.Course((0, 2), (1,), 0), tt.Course((0, 1, 2), (0, 1), 1)))
    parsed = tt.parse_answer(
        "Solution 1:\n| Course0 | T2 | R1 | P0 |\n| Course5 | T0 | R0 | P1 |\nSolution 2:\n| Course0 | T2 |", inst
    )
    assert [p.status for p in parsed] == ["malformed", "malformed"]
    assert "Course5" in parsed[0].reason


def test_cap_rejects_early():
    big = tt.TimeTablingInstance(tuple(tt.Course((0, 1, 2, 3), (0, 1, 2), k) for k in range(5)))
    with pytest.raises(TooManySolutions):
        tt.enumerate_solutions(big, cap=CAP)


# ---------------------------------------------------------------- precision's denominator, truncation, one schedule per table (by hand)

DEMO = tt.TimeTablingInstance(
    (tt.Course((0, 2), (1,), 0), tt.Course((0, 1, 2), (0, 1), 1), tt.Course((1, 2), (1, 2), 0))
)
HEAD = "| Course | Time | Room | Teacher |\n|---|---|---|---|\n"
ROWS = ["| Course0 | T0 | R1 | P0 |", "| Course1 | T0 | R0 | P1 |", "| Course2 | T1 | R1 | P0 |"]  # a valid schedule
VALID = ((0, 1), (0, 0), (1, 1))


def _table(k, rows):
    return f"Solution {k}:\n{HEAD}" + "\n".join(rows)


def test_tables_missing_a_course_are_wrong_answers():
    from reasoning_study.tasks.core import listed_solutions

    text = "\n\n".join([_table(1, ROWS), _table(2, ROWS[:2]), _table(3, [ROWS[0], "| Course2 | T2 | R2 | P0 |"])])
    parsed = tt.parse_answer(text, DEMO)
    assert [p.status for p in parsed] == ["valid", "malformed", "malformed"]
    assert len(valid_solutions(parsed)) == 1 and len(listed_solutions(parsed)) == 3  # precision 1/3 (eq. 2); it was 1/1


@pytest.mark.parametrize(
    "tail, truncated, expected",
    [
        ("", True, ["valid"]),  # the last row is closed by its '|'
        ("\n\nSolution 2:\n" + HEAD + ROWS[0], True, ["valid", "cut"]),  # stops after one course
        (
            "\n\nSolution 2:\n" + HEAD + ROWS[0],
            False,
            ["valid", "malformed"],
        ),  # read as written: an answer, a wrong one
        (
            "\n\nSolution 2:\n" + HEAD + "\n".join(ROWS[:2]) + "\n| Course2 | T1 | R1",
            True,
            ["valid", "cut"],
        ),  # R1 may be R12
        ("\n\nSolution 2:\n" + HEAD + "\n".join(ROWS[:2]) + "\n| Course2 | T1 | R1", False, ["valid", "valid"]),
        ("\n\nSolution 2:\n" + HEAD + "\n".join(ROWS[:2]) + "\n| Course2 | T1 |", True, ["valid", "cut"]),
        ("\n\nSolution 2:", True, ["valid", "cut"]),
        ("\n\nSolution 2:\n- Course0: T0, R1\n- Course1: T0, R0\n- Course2: T1, R1", True, ["valid", "cut"]),
        ("\n\nSolution 2:\nCourse0 → (T0, R1)\nCourse1 → (T0, R0)\nCourse2 → (T1, R1)", True, ["valid", "valid"]),
        ("\n\nLet me check", True, ["valid"]),
    ],
)
def test_the_last_schedule_of_a_truncated_reply(tail, truncated, expected):
    parsed = tt.parse_answer(_table(1, ROWS) + tail, DEMO, truncated=truncated)
    assert ["cut" if p.cut_off else p.status for p in parsed] == expected
    assert all(p.reason == tt.CUT_OFF and p.solution is None for p in parsed if p.cut_off)


def test_a_course_given_two_slots_in_one_table_is_one_violating_schedule():
    parsed = tt.parse_answer(_table(1, ROWS[:2] + ["| Course1 | T1 | R0 | P1 |", ROWS[2]]), DEMO)
    assert [(p.status, p.solution) for p in parsed] == [("violation", ((0, 1), ((0, 0), (1, 0)), (1, 1)))]
    assert parsed[0].reason == "Course1 is given 2 slots (T0 R0, T1 R0): one slot per course"
    assert VALID not in valid_solutions(parsed)  # no phantom valid schedule from the table's second half
    # a row repeated is one slot
    assert [p.status for p in tt.parse_answer(_table(1, ROWS + [ROWS[1]]), DEMO)] == ["valid"]
    two_lists = "### Schedule 1\n- Course0: T0, R1\n- Course1: T0, R0\n- Course2: T1, R1\n- Course2: T2, R2"
    assert [p.status for p in tt.parse_answer(two_lists, DEMO)] == ["violation"]
    # without headings, tables back to back are separate schedules, as before
    assert (
        len(
            tt.parse_answer(
                HEAD + "\n".join(ROWS) + "\n" + HEAD + "\n".join(ROWS[:2] + ["| Course2 | T2 | R2 | P0 |"]), DEMO
            )
        )
        == 2
    )


@pytest.mark.parametrize(
    "text",
    [
        "Solution 1:\n| Course | Time Slot | Classroom | Teacher |\n|---|---|---|---|\n| Course0 | 0 | 1 | 0 |\n| Course1 | 0 | 0 | 1 |\n| Course2 | 1 | 1 | 0 |",
        "**Schedule 1**\n| Course | Teacher | Time | Room | Conflicts |\n|---|---|---|---|---|\n| Course0 | P0 | T0 | R1 | none |\n"
        "| Course1 | P1 | T0 | R0 | none |\n| Course2 | P0 | T1 | R1 | none |",
        "Solution 1:\n| Room | Course | Slot |\n| R1 | Course0 | T0 |\n| R0 | Course1 | T0 |\n| R1 | Course2 | T1 |",
        "Solution 1:\nCourse0: T0, R0\n".replace("R0\n", "R1\n") + "Course1: T0, R0\nCourse2: T1, R1",
        "### Solution 1\n- Course0 → (T0, R1)\n- Course1 → (T0, R0)\n- Course2 → (T1, R1)",
        "Solution 1: Course0 (T0, R1), Course1 (T0, R0), Course2 (T1, R1)",
        "Solution 1:\n- Course 0: Time slot 0, Room 1\n- Course 1: time 0, room 0\n- Course 2: Time 1, Room 1",
        "Solution 1:\n```\nCourse0: T0, R1\nCourse1: T0, R0\nCourse2: T1, R1\n```",
        '```json\n{"Course0": {"time": 0, "room": 1}, "Course1": {"time": 0, "room": 0}, "Course2": {"time": 1, "room": 1}}\n```',
        "```python\nschedule = {'Course0': (0, 1), 'Course1': (0, 0), 'Course2': (1, 1)}\n```",
        "| Solution | Course | Time | Room |\n|---|---|---|---|\n| 1 | Course0 | T0 | R1 |\n| | Course1 | T0 | R0 |\n| | Course2 | T1 | R1 |",
        "Solution 1:\n| Course | (Time, Room) |\n|---|---|\n| Course0 | (T0, R1) |\n| Course1 | (T0, R0) |\n| Course2 | (T1, R1) |",
    ],
)
def test_real_model_forms(text):
    assert [(p.status, p.solution) for p in tt.parse_answer(text, DEMO)] == [("valid", VALID)], text


def test_thinking_aloud_and_the_restated_problem_assign_nothing():
    text = (
        DEMO.question()
        + "\nCourse0 can take T0 or T2, always in R1.\nIf Course1 took T0, R1 it would clash with Course0.\n\n"
        "Solution 1:\n| Course | Time | Room |\n| Course0 | T0 | R1 |\n| Course1 | T0 | R0 |\n| Course2 | T1 | R1 |\n"
        "Check: Course0 (T0, R1) and Course1 (T0, R0) use different rooms. Course2 could not use T0 instead."
    )
    assert [(p.status, p.solution) for p in tt.parse_answer(text, DEMO)] == [("valid", VALID)]
    unheaded = (
        DEMO.question() + "\nIf Course0 took T2 it would also work.\n| Course | Time | Room |\n" + "\n".join(ROWS)
    )
    assert [(p.status, p.solution) for p in tt.parse_answer(unheaded, DEMO)] == [("valid", VALID)]


# ---------------------------------------------------------------- every style, fuzzed


def _slot_text(t, r, prefix):
    return (f"T{t}", f"R{r}") if prefix else (str(t), str(r))


def _render(inst, schedule, k, style, heading, prefix):
    "One schedule in one of the styles models use."
    rows = list(enumerate(schedule))
    head = heading.format(k=k)
    if style == "reference":
        return tt.render_solution(inst, schedule, k).replace(f"Solution {k}:", head, 1)
    if style == "renamed":  # extra and renamed columns, in another order
        lines = [head, "| Teacher | Course | Classroom | Time Slot | Notes |", "|---|---|---|---|---|"]
        for i, (t, r) in rows:
            tt_, rr = _slot_text(t, r, prefix)
            lines.append(f"| P{inst.courses[i].teacher} | Course{i} | {rr} | {tt_} | ok |")
        return "\n".join(lines)
    if style == "list":
        return "\n".join([head] + [f"- Course{i}: T{t}, R{r}" for i, (t, r) in rows])
    if style == "arrow":
        return "\n".join([head] + [f"Course{i} → (T{t}, R{r})" for i, (t, r) in rows])
    if style == "words":
        return "\n".join([head] + [f"* Course {i}: Time slot {t}, Room {r}" for i, (t, r) in rows])
    if style == "one line":
        return (
            head
            + (" " if head.endswith((":", "*")) else ": ")
            + ", ".join(f"Course{i} (T{t}, R{r})" for i, (t, r) in rows)
        )
    if style == "json":
        return (
            head
            + "\n```json\n{"
            + ", ".join(f'"Course{i}": {{"time": {t}, "room": {r}}}' for i, (t, r) in rows)
            + "}\n```"
        )
    if style == "code":
        return head + "\n```\n" + "\n".join(f"Course{i}: T{t}, R{r}" for i, (t, r) in rows) + "\n```"
    raise ValueError(style)


STYLES = ["reference", "renamed", "list", "arrow", "words", "one line", "json", "code"]
HEADINGS = ["Solution {k}:", "**Schedule {k}**", "### Solution {k}", "{k}. **Solution {k}:**"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 300), data=st.data())
def test_every_style_parses_back(seed, data):
    inst, sols = _instance_with_solutions(seed)
    chosen = data.draw(st.permutations(sols))[: data.draw(st.integers(1, min(len(sols), 8)))]
    parts = [inst.question()]  # the problem restated before the first heading
    for k, s in enumerate(chosen, start=1):
        parts += data.draw(st.lists(noise_line, max_size=2))
        parts.append(
            _render(
                inst,
                s,
                k,
                data.draw(st.sampled_from(STYLES)),
                data.draw(st.sampled_from(HEADINGS)),
                data.draw(st.booleans()),
            )
        )
    parts += data.draw(st.lists(noise_line, max_size=2))
    text = "\n".join(parts)
    for truncated in (False, True):
        parsed = tt.parse_answer(text + "\nTotal schedules shown above.", inst, truncated=truncated)
        assert [(p.status, p.solution) for p in parsed] == [("valid", s) for s in chosen], text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 300), data=st.data())
def test_schedules_without_headings_parse_back(seed, data):
    inst, sols = _instance_with_solutions(seed)
    chosen = data.draw(st.permutations(sols))[: data.draw(st.integers(1, min(len(sols), 8)))]
    if data.draw(st.booleans()):  # one table with a Solution column
        rows = ["| Solution | Course | Time | Room |", "|---|---|---|---|"]
        rows += [
            f"| {k if i == 0 or data.draw(st.booleans()) else ''} | Course{i} | T{t} | R{r} |"
            for k, s in enumerate(chosen, start=1)
            for i, (t, r) in enumerate(s)
        ]
        parts = [inst.question(), data.draw(noise_line)] + rows + [data.draw(noise_line)]
    else:  # one table per schedule, each with its header row, prose between
        parts = [inst.question()]
        for k, s in enumerate(chosen, start=1):
            parts += data.draw(st.lists(noise_line, max_size=2)) + [tt.render_solution(inst, s, k).split("\n", 1)[1]]
    parsed = tt.parse_answer("\n".join(parts), inst)
    assert [(p.status, p.solution) for p in parsed] == [("valid", s) for s in chosen], "\n".join(parts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 300), data=st.data())
def test_a_truncated_reply_lists_exactly_its_complete_schedules(seed, data):
    "Cut anywhere: the schedules read are the first ones, each exactly as written; every one with text after it is read."
    inst, sols = _instance_with_solutions(seed)
    chosen = data.draw(st.permutations(sols))[: data.draw(st.integers(1, min(len(sols), 5)))]
    text, starts, ends = "", [], []
    for k, s in enumerate(chosen, start=1):
        starts.append(len(text))
        text += _render(
            inst,
            s,
            k,
            data.draw(st.sampled_from(STYLES)),
            data.draw(st.sampled_from(HEADINGS)),
            data.draw(st.booleans()),
        )
        ends.append(len(text))
        text += "\n" + data.draw(noise_line) + "\n\n"
    cut = data.draw(st.integers(0, len(text)))
    prefix = text[:cut]
    parsed = tt.parse_answer(prefix, inst, truncated=True)
    answers = [p for p in parsed if not p.cut_off]
    assert [(p.status, p.solution) for p in answers] == [("valid", s) for s in chosen[: len(answers)]], prefix
    complete = sum(end <= cut and prefix[end:].strip() != "" for end in ends)
    assert complete <= len(answers) <= sum(start < cut for start in starts), prefix
