"""Tests of `reasoning_study.probing.answers`: the rule cascade, verification with the real math-verify on
many hand-written cases, thread and timeout safety, and the LLM fallback (scripted replies for the pure
logic, the real embedded model for one end-to-end extraction through the generation store)."""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from reasoning_study.backends.request import SamplingParams, make_completion
from reasoning_study.probing.answers import (
    EXTRACTOR_SAMPLING,
    Extraction,
    extract_answers,
    extract_by_rules,
    extractor_request,
    parse_extractor_reply,
    predicted_letter,
    verify,
)
from reasoning_study.prompts.overthinking import ANSWER_LEAD, termination_suffix
from reasoning_study.store import GenerationStore
from reasoning_study.tasks.qa import QAItem, choice_item, load_benchmark, mathvista_item


def ff(gold: str) -> QAItem:
    return QAItem(f"t/{gold}", "t", "question?", gold)


PLANETS = choice_item("t/planets", "t", "Which planet is largest?", ["Mars", "Jupiter", "Venus", "Earth"], "B")
HALVES = choice_item("t/halves", "t", "Half of one?", ["1/3", "1/2", "2", "\\sqrt{2}"], "B")
IN_IMAGE = QAItem(
    "t/image", "t", "<image1> Which shape is next?", "D", "mc", None, "D", image="x.png", metadata={"n_options": 5}
)

# --- free-form verification with math-verify ------------------------------------------------------

EQUAL = [
    ("239", "239"),
    ("1/2", "0.5"),
    ("1/2", "\\frac12"),
    ("1/2", "\\frac{1}{2}"),
    ("1/2", "\\boxed{\\frac12}"),
    ("0.5", "1/2"),
    ("1/2", "$\\frac{1}{2}$"),
    ("1/2", "2/4"),
    ("\\frac{3}{4}", "0.75"),
    ("2^997", "2^{997}"),
    ("5", "5."),
    ("1.2", "1.20"),
    ("12", "12.0"),
    ("1000", "1,000"),
    ("-3", "-3"),
    ("65^\\circ", "65"),
    ("65", "65^\\circ"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("\\pi", "3.14159265"),
    ("x^2-1", "(x-1)(x+1)"),
    ("y=2x+1", "2x+1"),
    ("x=3", "3"),
    ("(1,2]", "(1,2]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("1176470588235294", "1176470588235294"),
    ("10", "10\\text{ cm}"),
    ("100", "100\\%"),
    ("herring", "Herring"),
    ("Yes", "yes"),
    ("2/3", "\\dfrac{2}{3}"),
]
DIFFERENT = [
    ("12", "1"),
    ("1", "12"),
    ("12", "123"),
    ("-4", "4"),
    ("3.14", "3.14159"),
    ("2/3", "0.6667"),
    ("(1,2]", "(1,2)"),
    ("5", "five"),
    ("12", "12 or 13"),
    ("herring", "herrnig"),
    ("herring", "herrings"),
    ("Yes", "No"),
    ("0", "O"),
    ("1/2", "1/3"),
    ("2^997", "2"),
    ("x^2-1", "x^2+1"),
]


@pytest.mark.parametrize("gold,prediction", EQUAL)
def test_equal_answers_verify(gold, prediction):
    assert verify(prediction, ff(gold))


@pytest.mark.parametrize("gold,prediction", DIFFERENT)
def test_different_answers_do_not_verify(gold, prediction):
    assert not verify(prediction, ff(gold))


@pytest.mark.parametrize("prediction", [None, "", "   ", "$ $", "**", "."])
def test_empty_or_missing_is_never_correct(prediction):
    for item in (ff("12"), ff("0"), PLANETS, IN_IMAGE):
        assert not verify(prediction, item)


def test_no_substring_matching():
    # the reference scorer accepted `pred in gold`: "" and "1" were correct for "12"
    assert not verify("1", ff("12")) and not verify("2", ff("12")) and not verify("", ff("12"))
    assert not verify("upiter", PLANETS) and not verify("Jupiter or Mars", PLANETS)


# --- multiple choice -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction",
    [
        "B",
        "b",
        "(B)",
        "(b)",
        "B.",
        "B)",
        "B: Jupiter",
        "B. Jupiter",
        "(B) Jupiter",
        "Option B",
        "option (B)",
        "Jupiter",
        "jupiter.",
        "  JUPITER ",
        "\\text{B}",
        "$B$",
        "**B**",
    ],
)
def test_choice_named_by_letter_or_text(prediction):
    assert predicted_letter(prediction, PLANETS) == "B" and verify(prediction, PLANETS)


@pytest.mark.parametrize("prediction", ["A", "Mars", "E", "F", "Saturn", "B and C", "the second one"])
def test_choice_wrong_or_unnamed(prediction):
    assert not verify(prediction, PLANETS)


def test_choice_by_equal_math_value():
    assert [predicted_letter(p, HALVES) for p in ("0.5", "\\frac{1}{2}", "2/4", "1.41421356", "2.0")] == [
        "B",
        "B",
        "B",
        "D",
        "C",
    ]
    assert verify("0.5", HALVES) and not verify("0.3333", HALVES)


def test_choice_letters_only_in_image():
    assert IN_IMAGE.letters == "ABCDE"
    assert verify("D", IN_IMAGE) and verify("(d)", IN_IMAGE) and verify("Option D", IN_IMAGE)
    assert not verify("E", IN_IMAGE) and not verify("F", IN_IMAGE)


def test_offline_sets_verify_their_own_gold():
    for item in load_benchmark("champ") + load_benchmark("mmlu-sample"):
        assert verify(item.answer, item), item.id
        if item.format == "mc":
            assert verify(item.answer_letter, item) and verify(f"({item.answer_letter})", item)


# --- MathVista's own answer rules (issue 41, point 7) ----------------------------------------------


def mathvista_record(pid: str, answer: str, answer_type: str, precision=None, unit=None, **fields) -> dict:
    "A MathVista testmini record in the hub's schema (the image a path, no decoded image)."
    return {
        "pid": pid,
        "question": "What is the length of the rod?",
        "image": f"images/{pid}.jpg",
        "decoded_image": None,
        "choices": None,
        "unit": unit,
        "precision": precision,
        "answer": answer,
        "question_type": "free_form",
        "answer_type": answer_type,
        "query": "Hint: Please answer the question and provide the final answer at the end.\nQuestion: What is the "
        "length of the rod?",
        "metadata": {"split": "testmini", "source": "demo", "language": "english"},
        **fields,
    }


def vista(record: dict) -> QAItem:
    return mathvista_item(record, 0)


@pytest.mark.parametrize("prediction", ["1.45", "1.450", "1.4500000001", "1.449", " 1.45 ", "$1.45$"])
def test_mathvista_float_is_rounded_to_its_precision(prediction):
    assert verify(prediction, vista(mathvista_record("1", "1.45", "float", precision=2.0)))


@pytest.mark.parametrize("prediction", ["1.46", "1.44", "1.4", "14.5", "1.456", ""])
def test_mathvista_float_other_values_are_wrong(prediction):
    assert not verify(prediction, vista(mathvista_record("1", "1.45", "float", precision=2.0)))


def test_mathvista_precision_one_and_zero():
    one = vista(mathvista_record("2", "2.5", "float", precision=1.0))
    assert [verify(p, one) for p in ("2.5", "2.50", "2.54", "2.46", "2.56", "2.44")] == [True] * 4 + [False] * 2
    whole = vista(mathvista_record("3", "7", "float", precision=0.0))
    assert [verify(p, whole) for p in ("7", "7.0", "6.8", "7.6")] == [True, True, True, False]


def test_mathvista_unit_may_be_written_or_left_out():
    item = vista(mathvista_record("4", "5", "integer", unit="cm"))
    assert (item.unit, item.precision) == ("cm", None)  # an integer answer has no rounding rule
    assert [verify(p, item) for p in ("5", "5 cm", "5cm", "5\\text{ cm}", "$5\\,\\mathrm{cm}$")] == [True] * 5
    assert [verify(p, item) for p in ("6 cm", "cm", "5.5 cm")] == [False] * 3


def test_mathvista_unit_and_precision_together():
    item = vista(mathvista_record("5", "1.45", "float", precision=2.0, unit="cm"))
    assert [verify(p, item) for p in ("1.45 cm", "1.4500000001 cm", "1.450\\text{cm}")] == [True] * 3
    assert not verify("1.46 cm", item)


def test_mathvista_without_rules_compares_as_before():
    item = vista(mathvista_record("6", "12", "integer", precision=None, unit=""))
    assert (item.unit, item.precision) == (None, None)
    assert [verify(p, item) for p in ("12", "12.0", "1", "12.4")] == [True, True, False, False]
    plain = QAItem("t/plain", "t", "q", "1.45")  # no precision: no rounding to 2 places (1.449 would round to 1.45)
    assert not verify("1.449", plain) and verify("1.45", plain)


def test_mathvista_multiple_choice_ignores_unit_and_precision():
    record = mathvista_record(
        "7", "3", "integer", precision=None, unit="cm", choices=["2", "3", "4"], question_type="multi_choice"
    )
    item = vista(record)
    assert (item.format, item.answer_letter, item.unit, item.precision) == ("mc", "B", None, None)
    assert verify("B", item) and verify("3", item) and not verify("3.0001", item)


# --- thread and timeout safety ---------------------------------------------------------------------


def test_verification_in_worker_threads_matches_main_thread():
    cases = [(p, ff(g)) for g, p in EQUAL[:12] + DIFFERENT[:8]] + [("0.5", HALVES), ("A", HALVES)]
    expected = [verify(p, item) for p, item in cases]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda c: verify(*c), cases)) == expected


@pytest.mark.slow
def test_runaway_expressions_are_cut_off_in_any_thread():
    tower = "9^{9^{9^{9}}}"
    started = time.monotonic()
    assert not verify(tower, ff("1"))  # main thread: math-verify's alarm
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(verify(tower, ff("1"))))
    worker.start()
    worker.join(60)
    assert outcome == [False] and not worker.is_alive()  # elsewhere: the helper process
    assert time.monotonic() - started < 60
    assert not verify("1" * 1000, ff("1"))  # too long to parse


# --- the rule cascade ------------------------------------------------------------------------------

RULES = [
    ("We get $\\boxed{\\frac{1}{2}}$.", ff("1/2"), "\\frac{1}{2}"),
    ("\\boxed{3} ... no wait, \\boxed{\\{1, 2\\}}", ff("1"), "\\{1, 2\\}"),
    ("\\fbox{7}", ff("7"), "7"),
    ("<answer>\n 42 \n</answer>", ff("42"), "42"),
    ("### **Final Answer**: 3/4", ff("3/4"), "3/4"),
    ("Final answer:\n\n  -5", ff("-5"), "-5"),
    ("The final answer is 8.", ff("8"), "8"),
    ("Thus the answer is 3.5. Let me double check.", ff("3.5"), "3.5"),
    ("Answer: C", PLANETS, "C"),
    ("The correct answer is (B) Jupiter.", PLANETS, "(B) Jupiter"),
    (" (B) ", PLANETS, "B"),
    ("b.", PLANETS, "B"),
]


@pytest.mark.parametrize("text,item,expected", RULES)
def test_rules_read_standard_forms(text, item, expected):
    assert extract_by_rules(text, item) == expected


@pytest.mark.parametrize(
    "text,item",
    [
        ("I am still thinking.", ff("1")),
        ("B", ff("1")),  # a bare letter is an answer only for multiple choice
        ("E", PLANETS),  # not one of the four letters
        ("We are getting closer to the final answer step by step.", ff("1")),
        ("What the answer is, I cannot say yet.", ff("1")),
        ("\\boxed{}", ff("1")),
        (
            "\\boxed{4} hmm, so the value is \\boxed{5 because",
            ff("5"),
        ),  # a box left open: no guessing from earlier boxes
        ("", ff("1")),
        (None, ff("1")),
    ],
)
def test_rules_read_nothing(text, item):
    assert extract_by_rules(text, item) is None


def test_probe_continuations_through_the_termination_suffix():
    # what a prefix probe produces: the suffix ends in "\boxed{", the model's continuation closes it
    item = ff("42")
    for template in ("stop_now", "time_up"):
        suffix = termination_suffix(template, close_thinking=True)
        assert suffix.endswith(ANSWER_LEAD)
        assert extract_by_rules("so 6 * 7 is" + suffix + "42}\n\nDone.", item) == "42"
        assert extract_by_rules("\\boxed{41} earlier." + suffix + "42 because", item) is None


# --- the LLM fallback ------------------------------------------------------------------------------


class Scripted:
    "A stand-in extractor: replies keyed by the text inside the request (pure-logic tests only)."

    name, model_id, revision = "scripted", "scripted-extractor", "v1"

    def __init__(self, replies):
        self.replies, self.requests = replies, []

    def generate(self, requests):
        self.requests += requests
        out = []
        for r in requests:
            reply = next(v for k, v in self.replies.items() if k in r.messages[-1]["content"])
            out.append(
                [make_completion("", "error", error="server down") if reply is None else make_completion(reply, "stop")]
            )
        return out


def test_rules_first_then_one_batch_for_the_extractor():
    backend = Scripted({"forty-two": "42", "no idea": "NONE", "crash": None, "largest": "(B) Jupiter"})
    texts = ["So \\boxed{7}.", "I count forty-two.", "no idea at all", "crash", "it is the largest gas giant", "", None]
    items = [ff("7"), ff("42"), ff("1"), ff("1"), PLANETS, ff("1"), ff("1")]
    out = extract_answers(texts, items, extractor_backend=backend)
    assert [(e.answer, e.method) for e in out] == [
        ("7", "rules"),
        ("42", "llm"),
        (None, "none"),
        (None, "none"),
        ("(B) Jupiter", "llm"),
        (None, "none"),
        (None, "none"),
    ]
    assert out[2].error == "the extractor found no answer" and out[3].error == "server down"
    assert len(backend.requests) == 4  # only the unread, non-empty texts reach the extractor
    assert [verify(e.answer, i) for e, i in zip(out, items)] == [True, True, False, False, True, False, False]


def test_extractor_request_sees_question_and_options():
    request = extractor_request("x" * 10_000 + " the end", PLANETS, tail_chars=100)
    content = request.messages[-1]["content"]
    assert "Which planet is largest?" in content and "B. Jupiter" in content and "D. Earth" in content
    assert "x" * 101 not in content and content.count("the end") == 1
    assert request.thinking is False and request.sampling == EXTRACTOR_SAMPLING


# the extractor's user turn for PLANETS and "It must be the gas giant.", as it always was (stored replies key on it)
QUESTION_AND_TRACE = """Question:
Which planet is largest?

Options:
A. Mars
B. Jupiter
C. Venus
D. Earth

Model output:
It must be the gas giant.

What final answer does the model output commit to? Reply with the answer alone (a number, expression, word or option \
letter), with no explanation. If the output commits to no answer, reply NONE."""


def test_extractor_input_trace_shows_the_text_alone():
    "Issue 41, point 5: the paper's extractor sees only the trace; the question-and-trace request is unchanged."
    default = extractor_request("It must be the gas giant.", PLANETS)
    both = extractor_request("It must be the gas giant.", PLANETS, extractor_input="question_and_trace")
    alone = extractor_request("It must be the gas giant.", PLANETS, extractor_input="trace")
    assert default == both and both.messages[-1]["content"] == QUESTION_AND_TRACE
    content = alone.messages[-1]["content"]
    assert "It must be the gas giant." in content
    assert not any(s in content for s in ("Which planet is largest?", "Question", "Jupiter", "Mars", "Options"))
    assert alone.messages[0] == both.messages[0] and (alone.sampling, alone.tag) == (both.sampling, both.tag)
    # the same instructions, without the question block
    assert content == "Model output:" + QUESTION_AND_TRACE.split("\n\nModel output:")[1]
    with pytest.raises(ValueError, match="extractor_input must be one of"):
        extractor_request("x", PLANETS, extractor_input="question")


def test_extract_answers_passes_the_extractor_input_on():
    backend = Scripted({"gas giant": "B"})
    for extractor_input, shown in (("trace", False), ("question_and_trace", True)):
        backend.requests = []
        out = extract_answers(
            ["It must be the gas giant."], [PLANETS], extractor_backend=backend, extractor_input=extractor_input
        )
        assert [(e.answer, e.method) for e in out] == [("B", "llm")]  # the reply is read against the item either way
        assert ("Which planet is largest?" in backend.requests[0].messages[-1]["content"]) is shown
    with pytest.raises(ValueError, match="extractor_input must be one of"):
        extract_answers(["x"], [PLANETS], extractor_backend=backend, extractor_input="everything")


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("42", "42"),
        ("  $\\frac{1}{2}$\n", "\\frac{1}{2}"),
        ("Answer: B", "B"),
        ("\\boxed{9}", "9"),
        ("NONE", None),
        ("None.", None),
        ("", None),
        (None, None),
        ("<think>hmm</think>17", "17"),
    ],
)
def test_parse_extractor_reply(reply, expected):
    assert parse_extractor_reply(reply, ff("1")) == expected


def test_extractor_letter_outside_the_options_is_no_answer():
    assert [parse_extractor_reply(r, PLANETS) for r in ("C", "c", "E", "Z")] == ["C", "c", None, None]


def test_rules_only_without_backend():
    out = extract_answers(["no answer here"], [ff("1")])
    assert out == [Extraction(None, "none")]
    with pytest.raises(ValueError, match="2 texts but 1 items"):
        extract_answers(["a", "b"], [ff("1")])


@pytest.fixture(scope="module")
def embedded():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from reasoning_study.backends.presets import load_backend

    return load_backend("smollm2-135m")


@pytest.mark.slow
def test_embedded_model_as_extractor_through_the_store(embedded, tmp_path):
    items = [ff("42"), PLANETS, ff("1")]
    texts = [
        "I have 40 apples and buy 2 more, so I hold forty-two apples.",
        "Jupiter is by far the biggest of them.",
        "\\boxed{1}",
    ]
    store = GenerationStore(tmp_path / "extract.sqlite")
    sampling = SamplingParams(max_tokens=12, stop=("\n\n",))
    first = extract_answers(texts, items, extractor_backend=embedded, store=store, sampling=sampling)
    assert first[2] == Extraction("1", "rules", "1", "boxed")
    for e in first[:2]:
        assert e.method in ("llm", "none") and e.raw  # the extractor's reply is kept whatever it says
        assert (e.answer is None) == (e.method == "none") and (e.answer is None or e.answer.strip())
    assert store.last_stats.generated == 2 and len(store) == 2
    again = extract_answers(texts, items, extractor_backend=embedded, store=store, sampling=sampling)
    assert again == first and store.last_stats.cached == 2 and store.last_stats.generated == 0


def _compare_in_a_thread(result):
    import threading

    from reasoning_study.probing.answers import math_equal

    def compare():
        try:
            result.put(math_equal("1/2", "0.5"))
        except Exception as e:
            result.put(repr(e))

    t = threading.Thread(target=compare)
    t.start()
    t.join()


def test_thread_comparisons_never_keep_a_forked_worker_from_exiting():
    "The helper process is a daemon: a forked worker (as nbdev_test's) that used it exits instead of hanging."
    import multiprocessing as mp

    result = mp.get_context("fork").Queue()
    worker = mp.get_context("fork").Process(target=_compare_in_a_thread, args=(result,))
    worker.start()
    worker.join(120)
    alive = worker.is_alive()
    if alive:
        worker.kill()
    assert not alive and worker.exitcode == 0
    assert result.get(timeout=5) is True


class CountingExtractor:
    "An extractor stand-in that answers 7 to every request and counts them."

    def __init__(self):
        self.asked = 0

    def generate(self, requests):
        self.asked += len(requests)
        return [[make_completion("7", "stop")] for _ in requests]


def test_llm_extraction_all_sends_every_text_to_the_extractor():
    "Issue 30 point 5: the paper's extractor reads every trace and every prefix; the rules-first cascade stays the default."
    item = QAItem("demo/1", "demo", "6 * 7?", "42")
    texts = ["So it is \\boxed{42}.", "forty-two, I think", "", None]
    fallback, every = CountingExtractor(), CountingExtractor()
    assert [e.method for e in extract_answers(texts, [item] * 4, fallback)] == ["rules", "llm", "none", "none"]
    read = extract_answers(texts, [item] * 4, every, llm_extraction="all")
    assert [(e.answer, e.method) for e in read] == [("7", "llm"), ("7", "llm"), (None, "none"), (None, "none")]
    assert (fallback.asked, every.asked) == (1, 2)
    with pytest.raises(ValueError, match="llm_extraction must be one of"):
        extract_answers(texts, [item] * 4, every, llm_extraction="rules-then-llm")


# --- an extractor reply that states no answer ------------------------------------------------------
# as small models (0.5B-4B, often chatty, sometimes thinking aloud) and large models (terse) write them

YES_NO = QAItem("t/yes-no", "t", "Is 7 prime? Answer yes or no.", "yes")
WITH_NONE = choice_item("t/none-option", "t", "Which is even?", ["1", "3", "None of the above"], "C")
UNDETERMINED = choice_item("t/undetermined", "t", "How old is Ann?", ["4", "5", "Cannot be determined"], "C")

NO_ANSWER_REPLIES = [
    # large models, terse
    "NONE",
    "N/A",
    "n/a",
    "None.",
    "Answer: none",
    "**Answer:** None",
    "Final answer: N/A",
    "\\boxed{}",
    "\\boxed{\\text{None}}",
    "$\\boxed{N/A}$",
    "No answer",
    "No final answer.",
    "null",
    "[no answer]",
    "(none)",
    "-",
    "—",
    # small models, in a sentence
    "The model output does not commit to any answer",
    "The model output does not commit to any answer.",
    "No final answer is given.",
    "There is no answer in the text",
    "There is no final answer in the model output.",
    "The response does not provide an answer.",
    "The model's output doesn't contain a final answer.",
    "The trace does not state an answer yet.",
    "The reasoning is incomplete and no answer was reached.",
    "I cannot determine the answer from the given text.",
    "Unable to extract an answer.",
    "The model did not reach a conclusion.",
    "None of the options",
    "None of the options is selected.",
    "The text never commits to an option.",
    "No option is chosen.",
    "Not stated",
    "Not provided.",
    "The answer is not given.",
    "The final answer is not provided in the output.",
    # thinking extractors: the reply after the think block, or a think block cut off by max_tokens
    "<think>The text stops mid-sentence.</think>\n\nNo answer is given.",
    "<think>\nLet me look at the output. It never says",
    "<think></think>\nThe model output does not commit to any answer.",
]


@pytest.mark.parametrize("reply", NO_ANSWER_REPLIES)
def test_a_reply_that_states_no_answer_is_no_answer(reply):
    for item in (ff("1"), PLANETS, YES_NO):
        assert parse_extractor_reply(reply, item) is None, (reply, item.id)


@pytest.mark.parametrize(
    "reply,item,expected",
    [
        ("0", ff("0"), "0"),
        ("no", YES_NO, "no"),
        ("No", YES_NO, "No"),
        ("No.", YES_NO, "No"),
        ("n", ff("n"), "n"),
        ("n = 3", ff("3"), "n = 3"),
        ("None of the above", WITH_NONE, "None of the above"),  # the item's own option text is an answer
        ("C. None of the above", WITH_NONE, "C. None of the above"),
        ("Cannot be determined", UNDETERMINED, "Cannot be determined"),
        ("There are no real solutions", ff("\\text{no real solutions}"), "There are no real solutions"),
        ("no solution", ff("no solution"), "no solution"),
        ("The answer is 12.", ff("12"), "12"),
        ("\\emptyset", ff("\\emptyset"), "\\emptyset"),
        ("<think>No answer yet? It says 7.</think>7", ff("7"), "7"),
    ],
)
def test_real_answers_are_not_read_as_no_answer(reply, item, expected):
    assert parse_extractor_reply(reply, item) == expected


def test_the_option_none_of_the_above_still_verifies():
    answer = parse_extractor_reply("None of the above", WITH_NONE)
    assert verify(answer, WITH_NONE) and predicted_letter(answer, WITH_NONE) == "C"


def test_extract_answers_marks_a_stated_no_answer_as_none():
    backend = Scripted({"thinking": "The model output does not commit to any answer."})
    (out,) = extract_answers(["I am still thinking"], [ff("1")], extractor_backend=backend)
    assert (out.answer, out.method, out.failed) == (None, "none", False)
    assert out.raw == "The model output does not commit to any answer."
