"""Tests of `reasoning_study.tasks.qa`: the offline sets read from installed packages, and every paper
benchmark mapping on small local files (JSONL, parquet with real image features, save_to_disk folders,
hub-repository folders), loaded through `datasets` with the hub switched off."""

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing here may touch the hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
from collections import Counter
from pathlib import Path

import datasets
import pytest
from math_verify import parse
from PIL import Image

from reasoning_study.tasks.qa import (
    BENCHMARKS,
    HUB_BENCHMARKS,
    QAItem,
    gpqa_options,
    items_table,
    load_benchmark,
    split_options,
)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def picture(color="red") -> Image.Image:
    return Image.new("RGB", (8, 6), color)


def image_dataset(records: list[dict], image_columns: tuple[str, ...]) -> datasets.Dataset:
    "A Dataset whose image columns carry the datasets Image feature (as the hub's parquet files do)."
    ds = datasets.Dataset.from_list(records)
    for column in image_columns:
        ds = ds.cast_column(column, datasets.Image())
    return ds


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "hf-cache")


# --- offline sets --------------------------------------------------------------------------------


def test_champ_items_are_numeric_free_form():
    items = load_benchmark("champ")
    assert len(items) == 131 and {i.format for i in items} == {"ff"}
    assert Counter(i.metadata["category"] for i in items).keys() <= {
        "Combinatorics",
        "Inequality",
        "Number-Theory",
        "Polynomial",
        "Sequence",
    }
    for item in items:  # every gold answer is a number math-verify can read
        parsed = parse(f"${item.answer}$")
        assert parsed and parsed[0].is_number, (item.id, item.answer)


def test_mmlu_sample_matches_the_raw_file():
    items = load_benchmark("mmlu-sample")
    assert len(items) == 200 and {i.format for i in items} == {"mc"}
    assert Counter(i.answer_letter for i in items) == Counter({"C": 58, "D": 54, "B": 47, "A": 41})
    assert all(len(i.options) == 4 and i.options[ord(i.answer_letter) - 65] == i.answer for i in items)
    assert all("\nA. " not in i.question and not i.question.endswith("Answer:") for i in items)


def test_sampling_is_seeded_and_in_file_order():
    a, b = load_benchmark("mmlu-sample", n=10, seed=3), load_benchmark("mmlu-sample", n=10, seed=3)
    assert [i.id for i in a] == [i.id for i in b]
    rows = [int(i.id.split("/")[1]) for i in a]
    assert rows == sorted(rows)
    assert [i.id for i in load_benchmark("mmlu-sample", n=10, seed=4)] != [i.id for i in a]
    with pytest.raises(ValueError, match="only 131"):
        load_benchmark("champ", n=500)


def test_offline_sets_take_no_path_and_unknown_names_fail():
    with pytest.raises(ValueError, match="no path"):
        load_benchmark("champ", path="x.jsonl")
    with pytest.raises(KeyError, match="known: champ"):
        load_benchmark("aime24")
    assert set(BENCHMARKS) == {"champ", "mmlu-sample", *HUB_BENCHMARKS}


def test_hub_needs_permission(tmp_path):
    with pytest.raises(FileNotFoundError, match="allow_hub=True"):
        load_benchmark("aime2025")
    with pytest.raises(FileNotFoundError, match="no file or folder"):
        load_benchmark("aime2025", path=tmp_path / "missing")
    bad = tmp_path / "data.csv"
    bad.write_text("a\n1\n")
    with pytest.raises(ValueError, match="json/.jsonl/.parquet"):
        load_benchmark("aime2025", path=bad)


# --- paper benchmarks on local files -------------------------------------------------------------


def test_aime2025_jsonl(tmp_path, cache):
    path = write_jsonl(
        tmp_path / "aime25.jsonl",
        [
            {
                "id": 10 + k,
                "problem": f"Find the remainder of {k} squared.",
                "solution": "...",
                "answer": k * k,
                "url": f"u{k}",
            }
            for k in range(5)
        ],
    )
    items = load_benchmark("aime2025", path=path, cache_dir=cache)
    assert [i.id for i in items] == [f"aime2025/{10 + k}" for k in range(5)]
    assert [i.answer for i in items] == ["0", "1", "4", "9", "16"]  # integer answers become text
    assert {i.format for i in items} == {"ff"} and items[2].metadata["url"] == "u2"
    assert len(load_benchmark("aime2025", n=2, seed=1, path=path, cache_dir=cache)) == 2


def test_n_none_loads_every_record_in_file_order(tmp_path, cache):
    "Issue 41, point 4: n=None is the whole benchmark, in the file's order (not sorted by id), whatever the seed."
    ids = [17, 3, 29, 8, 11, 2, 40]
    path = write_jsonl(
        tmp_path / "aime25.jsonl",
        [{"id": k, "problem": f"Problem {k}.", "solution": "...", "answer": k, "url": ""} for k in ids],
    )
    every = load_benchmark("aime2025", n=None, path=path, cache_dir=cache)
    assert [i.id for i in every] == [f"aime2025/{k}" for k in ids]
    assert [i.id for i in load_benchmark("aime2025", seed=9, path=path, cache_dir=cache)] == [i.id for i in every]
    sample = load_benchmark("aime2025", n=3, seed=1, path=path, cache_dir=cache)  # a seeded sample stays an option
    assert len(sample) == 3 and [i.id for i in sample] == [i.id for i in every if i in sample]


def test_gpqa_parquet_shuffles_by_record_id(tmp_path, cache):
    records = [
        {
            "Record ID": f"rec{k}",
            "Question": f"Question {k}?",
            "Correct Answer": f"right {k}\n",
            "Incorrect Answer 1": f"wrong a{k}",
            "Incorrect Answer 2": f"wrong b{k}",
            "Incorrect Answer 3": f"wrong c{k}",
            "Subdomain": "Physics (general)",
            "High-level domain": "Physics",
        }
        for k in range(24)
    ]
    path = tmp_path / "gpqa_diamond.parquet"
    datasets.Dataset.from_list(records).to_parquet(str(path))
    items = load_benchmark("gpqa", path=path, cache_dir=cache)
    assert len(items) == 24 and {i.format for i in items} == {"mc"}
    for k, item in enumerate(items):
        assert item.answer == f"right {k}" and item.options[ord(item.answer_letter) - 65] == item.answer
        assert sorted(item.options) == sorted([f"right {k}", f"wrong a{k}", f"wrong b{k}", f"wrong c{k}"])
    assert len({i.answer_letter for i in items}) >= 3  # the correct answer is not always first
    # the order depends on the record id alone, so a sample gives the same options as the full load
    sampled = {i.id: i.options for i in load_benchmark("gpqa", n=5, seed=2, path=path, cache_dir=cache)}
    assert all(sampled[i.id] == i.options for i in items if i.id in sampled)
    assert gpqa_options("rec3", "x", ["y", "z", "w"]) == gpqa_options("rec3", "x", ["y", "z", "w"])


def test_mathvista_parquet_with_images(tmp_path, cache):
    records = [
        {
            "pid": "1",
            "question": "Which bar is tallest?",
            "choices": ["red", "blue", "green"],
            "answer": "blue",
            "question_type": "multi_choice",
            "answer_type": "text",
            "precision": None,
            "unit": None,
            "query": "Hint: ...\nQuestion: Which bar is tallest?\nChoices:\n(A) red\n(B) blue\n(C) green",
            "image": "images/1.jpg",
            "decoded_image": picture("red"),
        },
        {
            "pid": "2",
            "question": "What is the slope?",
            "choices": None,
            "answer": "1.5",
            "question_type": "free_form",
            "answer_type": "float",
            "precision": 1.0,
            "unit": None,
            "query": "Hint: Please answer the question requiring a floating-point number with one decimal place.\nQuestion: What is the slope?",
            "image": "images/2.jpg",
            "decoded_image": picture("blue"),
        },
    ]
    path = tmp_path / "testmini.parquet"
    image_dataset(records, ("decoded_image",)).to_parquet(str(path))
    mc, ff = load_benchmark("mathvista", path=path, cache_dir=cache)
    assert (mc.format, mc.options, mc.answer, mc.answer_letter) == ("mc", ["red", "blue", "green"], "blue", "B")
    assert mc.question == "Which bar is tallest?"  # the options are rendered by the prompt, not repeated
    assert (ff.format, ff.answer, ff.metadata["answer_type"]) == ("ff", "1.5", "float")
    assert ff.question.startswith("Hint: Please answer the question requiring a floating-point number")
    assert isinstance(mc.image, Image.Image) and mc.image.size == (8, 6) and mc.multimodal


def test_mathvista_unit_and_precision_become_answer_rules(tmp_path, cache):
    "Issue 41, point 7: records in MathVista's schema; a float's precision and any unit go to the item."
    base = {"question": "q", "image": "", "decoded_image": None, "choices": None, "metadata": {"split": "testmini"}}
    records = [
        {
            **base,
            "pid": "1",
            "answer": "1.45",
            "question_type": "free_form",
            "answer_type": "float",
            "precision": 2.0,
            "unit": "cm",
            "query": "Question: How long is the rod? (Unit: cm)",
        },
        {
            **base,
            "pid": "2",
            "answer": "7",
            "question_type": "free_form",
            "answer_type": "integer",
            "precision": None,
            "unit": "",
            "query": "Question: How many?",
        },
        {
            **base,
            "pid": "3",
            "answer": "[1, 2]",
            "question_type": "free_form",
            "answer_type": "list",
            "precision": None,
            "unit": None,
            "query": "Question: Which ones?",
        },
        {
            **base,
            "pid": "4",
            "answer": "3",
            "question_type": "multi_choice",
            "answer_type": "integer",
            "precision": None,
            "unit": "cm",
            "choices": ["2", "3"],
            "query": "Question: q",
        },
    ]
    items = load_benchmark("mathvista", path=write_jsonl(tmp_path / "testmini.jsonl", records), cache_dir=cache)
    assert [(i.format, i.unit, i.precision) for i in items] == [
        ("ff", "cm", 2),
        ("ff", None, None),
        ("ff", None, None),
        ("mc", None, None),  # a multiple-choice answer is an option: no unit, no rounding
    ]
    assert items[0].metadata["precision"] == 2.0 and items[0].question == "Question: How long is the rod? (Unit: cm)"
    with pytest.raises(ValueError, match="not a whole number of places"):
        load_benchmark(
            "mathvista", path=write_jsonl(tmp_path / "bad.jsonl", [{**records[0], "precision": 1.5}]), cache_dir=cache
        )


def test_mathvista_answer_outside_choices_fails(tmp_path, cache):
    path = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {
                "pid": "9",
                "question": "q",
                "choices": ["a", "b"],
                "answer": "c",
                "question_type": "multi_choice",
                "image": "",
            }
        ],
    )
    with pytest.raises(ValueError, match="not among the choices"):
        load_benchmark("mathvista", path=path, cache_dir=cache)


def test_mathvision_jsonl_with_image_paths(tmp_path, cache):
    (tmp_path / "images").mkdir()
    for k in (1, 2, 3):
        picture().save(tmp_path / "images" / f"{k}.jpg")
    path = write_jsonl(
        tmp_path / "mathvision.jsonl",
        [
            {
                "id": "1",
                "question": "<image1> Which shape comes next?",
                "options": ["A", "B", "C", "D", "E"],
                "answer": "D",
                "image": "images/1.jpg",
                "level": 2,
                "subject": "logic",
            },
            {
                "id": "2",
                "question": "<image1> How many triangles?",
                "options": [],
                "answer": "7",
                "image": "images/2.jpg",
                "level": 1,
                "subject": "counting",
            },
            {
                "id": "3",
                "question": "<image1> Area of the square?",
                "options": ["4", "8", "16", "32", "64"],
                "answer": "C",
                "image": "images/3.jpg",
                "level": 3,
                "subject": "metric geometry - area",
            },
        ],
    )
    in_image, free, choice = load_benchmark("mathvision", path=path, cache_dir=cache)
    assert (in_image.format, in_image.options, in_image.answer, in_image.letters) == ("mc", None, "D", "ABCDE")
    assert (free.format, free.answer, free.metadata["subject"]) == ("ff", "7", "counting")
    assert (choice.options, choice.answer, choice.answer_letter) == (["4", "8", "16", "32", "64"], "16", "C")
    assert Path(in_image.image) == tmp_path / "images" / "1.jpg" and Path(in_image.image).exists()


def test_mathvision_answer_must_name_an_option(tmp_path, cache):
    path = write_jsonl(
        tmp_path / "bad.jsonl", [{"id": "4", "question": "q", "options": ["1", "2"], "answer": "3", "image": ""}]
    )
    with pytest.raises(ValueError, match="neither an option letter nor an option"):
        load_benchmark("mathvision", path=path, cache_dir=cache)


def test_mathvision_constant_ids_fail_loudly(tmp_path, cache):
    path = write_jsonl(
        tmp_path / "dup.jsonl",
        [{"id": "1", "question": f"q{k}", "options": [], "answer": "3", "image": ""} for k in range(2)],
    )
    with pytest.raises(ValueError, match="duplicate item id 'mathvision/1'"):
        load_benchmark("mathvision", path=path, cache_dir=cache)


def test_mathverse_save_to_disk_folder(tmp_path):
    records = [
        {
            "sample_index": "1",
            "problem_index": "1",
            "problem_version": "Text Dominant",
            "question_type": "multi-choice",
            "question": "As shown in the figure, angle BAC = 60.0, then the length of BC is ()\nChoices:\nA:2\nB:2√{3}\nC:√{3}\nD:2√{2}",
            "answer": "C",
            "query_cot": "...",
            "query_wo": "...",
            "question_for_eval": "...",
            "image": picture(),
        },
        {
            "sample_index": "2",
            "problem_index": "1",
            "problem_version": "Vision Only",
            "question_type": "multi-choice",
            "question": "",
            "answer": "C",
            "query_wo": "...",
            "query_cot": "According to the question shown in the image, please first conduct reasoning, and then answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.",
            "question_for_eval": "...",
            "image": picture(),
        },
        {
            "sample_index": "3",
            "problem_index": "2",
            "problem_version": "Text Lite",
            "question_type": "free-form",
            "question": "Find the perimeter of the triangle.",
            "answer": "12",
            "query_cot": "...",
            "query_wo": "...",
            "question_for_eval": "...",
            "image": picture(),
        },
    ]
    folder = tmp_path / "mathverse"
    datasets.DatasetDict({"testmini": image_dataset(records, ("image",))}).save_to_disk(str(folder))
    parsed, vision_only, free = load_benchmark("mathverse", path=folder)
    assert parsed.question == "As shown in the figure, angle BAC = 60.0, then the length of BC is ()"
    assert (parsed.options, parsed.answer, parsed.answer_letter) == (["2", "2√{3}", "√{3}", "2√{2}"], "√{3}", "C")
    assert (vision_only.format, vision_only.options, vision_only.answer) == ("mc", None, "C")
    assert vision_only.question.startswith("According to the question shown in the image")
    assert (free.format, free.answer, free.metadata["problem_version"]) == ("ff", "12", "Text Lite")
    assert all(isinstance(i.image, Image.Image) for i in (parsed, vision_only, free))


def test_mmstar_hub_repository_folder(tmp_path, cache):
    records = [
        {
            "index": 0,
            "question": "Which option describe the object relationship in the image correctly?\nOptions: A: The suitcase is on the book., B: The suitcase is beneath the cat., C: The suitcase is beneath the bed., D: The suitcase is beneath the book.",
            "answer": "A",
            "category": "coarse perception",
            "l2_category": "image scene and topic",
            "image": picture(),
        },
        {
            "index": 1,
            "question": "What is the total of 3, 4, and 5?\nOptions: A: 12, B: 3, 4, and 5, C: 10, D: 11",
            "answer": "A",
            "category": "math",
            "l2_category": "numeric commonsense and calculation",
            "image": picture(),
        },
        {
            "index": 2,
            "question": "Pick the odd one out shown in the image.",
            "answer": "B",
            "category": "logical reasoning",
            "l2_category": "diagram reasoning",
            "image": picture(),
        },
    ]
    repo = tmp_path / "MMStar"
    (repo / "data").mkdir(parents=True)
    image_dataset(records, ("image",)).to_parquet(str(repo / "data" / "val-00000-of-00001.parquet"))
    first, commas, unparsed = load_benchmark("mmstar", path=repo, cache_dir=cache)
    assert first.question == "Which option describe the object relationship in the image correctly?"
    assert first.options[0] == "The suitcase is on the book." and first.answer == "The suitcase is on the book."
    assert commas.options == ["12", "3, 4, and 5", "10", "11"]  # commas inside an option stay in it
    assert (unparsed.options, unparsed.answer, unparsed.question) == (
        None,
        "B",
        "Pick the odd one out shown in the image.",
    )
    assert isinstance(first.image, Image.Image)


def test_ai2d_parquet_index_answers(tmp_path, cache):
    records = [
        {"question": "Which label shows the leaf?", "options": ["A", "B", "C", "D"], "answer": "2", "image": picture()},
        {
            "question": "What eats grass?",
            "options": ["hawk", "rabbit", "snake", "owl"],
            "answer": "1",
            "image": picture(),
        },
    ]
    path = tmp_path / "ai2d_test.parquet"
    image_dataset(records, ("image",)).to_parquet(str(path))
    labels, food = load_benchmark("ai2d", path=path, cache_dir=cache)
    assert (labels.id, labels.answer_letter, labels.answer) == ("ai2d/0", "C", "C")
    assert (food.id, food.answer_letter, food.answer) == ("ai2d/1", "B", "rabbit")


def test_vmcbench_letter_and_index_answers(tmp_path, cache):
    (tmp_path / "img.png").write_bytes(b"")
    path = write_jsonl(
        tmp_path / "vmc.jsonl",
        [
            {
                "index": 5,
                "question": "What color is the bus?",
                "A": "red",
                "B": "yellow",
                "C": "blue",
                "D": "green",
                "answer": "B",
                "category": "General",
                "image": "img.png",
            },
            {
                "index": 6,
                "question": "How many dogs?",
                "A": "1",
                "B": "2",
                "C": "3",
                "D": "4",
                "answer": 3,
                "category": "Counting",
                "image": "img.png",
            },
        ],
    )
    bus, dogs = load_benchmark("vmcbench", path=path, cache_dir=cache)
    assert (bus.id, bus.answer, bus.answer_letter, bus.metadata["category"]) == ("vmcbench/5", "yellow", "B", "General")
    assert (dogs.answer, dogs.answer_letter) == ("4", "D")
    assert bus.image == str(tmp_path / "img.png")


def test_split_options_edge_cases():
    assert split_options("Q\nOptions: A: x", "Options:") is None  # one option is no list
    assert split_options("Q\nOptions: A: x, B: ", "Options:") is None  # an empty option
    assert split_options("Q\nChoices:\nA. one\nB. two", "Choices:") == ("Q", ["one", "two"])


def test_items_table_and_validation():
    items = load_benchmark("champ", n=2) + load_benchmark("mmlu-sample", n=2)
    table = items_table(items)
    assert list(table.columns) == [
        "id",
        "benchmark",
        "format",
        "question",
        "answer",
        "answer_letter",
        "options",
        "has_image",
    ]
    assert table["format"].tolist() == ["ff", "ff", "mc", "mc"] and not table["has_image"].any()
    with pytest.raises(ValueError, match="empty question and no image"):
        QAItem("x/1", "x", "  ", "1")
    with pytest.raises(ValueError, match="format must be"):
        QAItem("x/1", "x", "q", "1", "open")


def test_item_images_become_request_images(tmp_path, cache):
    "A figure loaded as a PIL image (parquet) or as a file path (JSONL) goes into a request, with a stable content key."
    from reasoning_study.backends.request import RequestImage, chat
    from reasoning_study.tasks.qa import has_images

    (tmp_path / "images").mkdir()
    picture("green").save(tmp_path / "images" / "1.png")
    records = [
        {"id": "1", "question": "<image1> How many triangles?", "options": [], "answer": "7", "image": "images/1.png"}
    ]
    path = write_jsonl(tmp_path / "mathvision.jsonl", records)
    [from_path] = load_benchmark("mathvision", path=path, cache_dir=cache)
    [again] = load_benchmark("mathvision", path=path, cache_dir=cache)
    request = chat(from_path.question, images=from_path.images)
    # a PNG file is sent byte for byte
    assert request.images == (RequestImage.of((tmp_path / "images" / "1.png").read_bytes()),)
    assert request.prompt_key() == chat(again.question, images=again.images).prompt_key()
    assert request.images[0].to_pil().getpixel((0, 0)) == (0, 128, 0)
    parquet = tmp_path / "mathvista.parquet"
    image_dataset(
        [
            {
                "pid": "1",
                "question": "Slope?",
                "choices": None,
                "answer": "2",
                "question_type": "free_form",
                "answer_type": "integer",
                "precision": None,
                "unit": None,
                "query": "Slope?",
                "image": "x.png",
                "decoded_image": picture("blue"),
            }
        ],
        ("decoded_image",),
    ).to_parquet(str(parquet))
    [decoded] = load_benchmark("mathvista", path=parquet, cache_dir=cache)
    assert chat("q", images=decoded.images).images[0].to_pil().size == (8, 6)
    assert not load_benchmark("champ", n=1)[0].images
    assert [has_images(b) for b in ("champ", "mmlu-sample", "gpqa", "aime2025", "mathvista", "ai2d")] == [False] * 4 + [
        True
    ] * 2
