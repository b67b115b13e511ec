"""Tests of `reasoning_study.tasks.qa.write_image_samples`: made-here stand-ins of the six image benchmarks, in each
benchmark's record schema and hub-repository layout, go through the real loader (`load_benchmark(path=)`, `datasets`
with the hub switched off) into items with their figure, their options and gold answer as each reader defines them,
which the answer checker (`probing.answers.verify`) accepts while rejecting another option; and the overthinking study
takes them as its `data_paths` (config, pre-flight, item loading)."""

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing here may touch the hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import io
import json
from collections import Counter
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from PIL import Image

from reasoning_study.probing.answers import verify
from reasoning_study.tasks.qa import (
    HUB_BENCHMARKS,
    IMAGE_SAMPLE_LAYOUT,
    has_images,
    load_benchmark,
    record_image,
    write_image_samples,
)

IMAGE_BENCHMARKS = [b for b in HUB_BENCHMARKS if has_images(b)]

# id -> (format, gold answer, gold letter, options, unit, precision, figure size, predictions verify accepts, ones it
# rejects): what each reader makes of the stand-in records
EXPECTED = {
    "mathvista": {
        "mathvista/1": ("ff", "5", None, None, None, None, (56, 56), ["5", "$5$"], ["6", "4"]),
        # MathVista's float rule: rounded to `precision` places, the unit may be written or left out
        "mathvista/2": ("ff", "2.5", None, None, "cm", 1, (56, 56), ["2.5", "2.5 cm", "2.54"], ["3.5", "2.56"]),
        "mathvista/3": ("ff", "0.67", None, None, None, 2, (56, 56), ["0.67", "0.667"], ["0.6", "0.7"]),
        "mathvista/4": ("mc", "triangle", "C", ["circle", "square", "triangle"], None, None, (56, 56),
                        ["C", "triangle", "(C) triangle"], ["A", "square"]),
        "mathvista/5": ("mc", "9", "C", ["7", "8", "9", "10"], None, None, (56, 56), ["C", "9"], ["B", "8"]),
    },
    "mathvision": {
        # the options are drawn in the figure: the item holds letters only
        "mathvision/1": ("mc", "D", "D", None, None, None, (140, 56), ["D", "(D)"], ["C", "E"]),
        "mathvision/2": ("ff", "7", None, None, None, None, (56, 56), ["7"], ["6"]),
        "mathvision/3": ("mc", "16", "C", ["4", "8", "16", "32", "64"], None, None, (56, 56), ["C", "16"], ["B", "8"]),
    },
    "mathverse": {
        "mathverse/1": ("mc", "12", "C", ["6", "9", "12", "16"], None, None, (56, 56), ["C", "12"], ["D", "16"]),
        "mathverse/2": ("mc", "B", "B", None, None, None, (112, 56), ["B"], ["A"]),  # Vision Only: all in the figure
        "mathverse/3": ("ff", "12", None, None, None, None, (56, 56), ["12"], ["9"]),
        "mathverse/4": ("ff", "10", None, None, None, None, (56, 56), ["10"], ["8"]),
    },
    "mmstar": {
        "mmstar/0": ("mc", "4", "C", ["2", "3", "4", "5"], None, None, (56, 56), ["C", "4"], ["D", "5"]),
        "mmstar/1": ("mc", "blue", "C", ["red", "green", "blue", "yellow"], None, None, (56, 56), ["C", "blue"],
                     ["A", "red"]),
        "mmstar/2": ("mc", "3, 4, and 5", "B", ["1 and 2", "3, 4, and 5", "6", "7 and 8"], None, None, (56, 56),
                     ["B", "3, 4, and 5"], ["A", "6"]),
    },
    "ai2d": {  # the answers are 0-based indices: 1, 2, 0
        "ai2d/0": ("mc", "B", "B", ["A", "B", "C", "D"], None, None, (56, 56), ["B"], ["A", "C"]),
        "ai2d/1": ("mc", "3", "C", ["1", "2", "3", "4"], None, None, (56, 56), ["C", "3"], ["B", "2"]),
        "ai2d/2": ("mc", "red", "A", ["red", "blue", "green", "yellow"], None, None, (56, 56), ["A", "red"],
                   ["B", "blue"]),
    },
    "vmcbench": {
        "vmcbench/0": ("mc", "17", "A", ["17", "71", "11", "77"], None, None, (56, 56), ["A", "17"], ["B", "71"]),
        "vmcbench/1": ("mc", "6", "D", ["2", "3", "5", "6"], None, None, (56, 56), ["D", "6"], ["C", "5"]),
        "vmcbench/2": ("mc", "circle", "B", ["square", "circle", "triangle", "star"], None, None, (56, 56),
                       ["B", "circle"], ["A", "square"]),
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return write_image_samples(tmp_path_factory.mktemp("image-samples"))


@pytest.fixture(scope="module")
def loaded(samples, tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("hf-cache"))
    return {name: load_benchmark(name, path=path, cache_dir=cache) for name, path in samples.items()}


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def test_every_image_benchmark_in_its_hub_layout(samples):
    assert list(samples) == list(IMAGE_SAMPLE_LAYOUT) == IMAGE_BENCHMARKS == list(EXPECTED)
    for name, path in samples.items():
        spec, (_, file, config) = HUB_BENCHMARKS[name], IMAGE_SAMPLE_LAYOUT[name]
        files = tree(path)
        figures = sorted(f for f in files if f.startswith("images/"))
        assert sorted(files) == sorted(["README.md", file, *figures]), name
        card = files["README.md"].decode()
        assert f"config_name: {config}" in card and f"split: {spec.split}" in card and "Not the benchmark" in card
        assert spec.config in (None, config)  # the loader asks for the config the README declares (or its only one)
        table = pq.read_table(Path(path) / file)
        features = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
        image_columns = [c for c, f in features.items() if f.get("_type") == "Image"]
        assert image_columns == (["decoded_image"] if name in ("mathvista", "mathvision") else ["image"]), name
        for cell in table.column(image_columns[0]).to_pylist():  # PNG bytes inside the parquet file, as on the hub
            assert (
                cell["bytes"].startswith(b"\x89PNG\r\n\x1a\n")
                and max(Image.open(io.BytesIO(cell["bytes"])).size) <= 140
            )
        if name in ("mathvista", "mathvision"):  # the figures as files too, named by the `image` column
            named = table.column("image").to_pylist()
            assert figures == sorted(named) and all(Image.open(record_image({"image": n}, Path(path))) for n in named)
            assert [files[n] for n in named] == [c["bytes"] for c in table.column("decoded_image").to_pylist()]


def test_same_bytes_on_every_call(samples, tmp_path):
    again = write_image_samples(tmp_path / "again")
    assert {name: tree(p) for name, p in again.items()} == {name: tree(p) for name, p in samples.items()}


@pytest.mark.parametrize("name", IMAGE_BENCHMARKS)
def test_records_load_with_figure_options_and_gold(name, loaded):
    items, expected = loaded[name], EXPECTED[name]
    assert [i.id for i in items] == list(expected)
    for item in items:
        fmt, answer, letter, options, unit, precision, size, right, wrong = expected[item.id]
        assert (item.benchmark, item.format, item.answer, item.answer_letter) == (name, fmt, answer, letter), item.id
        assert (item.options, item.unit, item.precision) == (options, unit, precision), item.id
        assert isinstance(item.image, Image.Image) and item.image.size == size and item.images == (item.image,)
        pixels = item.image.convert("RGB").getcolors(size[0] * size[1])
        assert len(pixels) >= 2, item.id  # something is drawn on the white
        assert item.question.strip(), item.id
        if fmt == "mc" and options is None:
            assert item.letters == ("ABCDE" if name == "mathvision" else "ABCD"), item.id
        for prediction in right:
            assert verify(prediction, item), (item.id, prediction)
        for prediction in wrong:
            assert not verify(prediction, item), (item.id, prediction)


def test_each_figure_goes_with_its_own_record(loaded):
    "Colours drawn for one record only: the loader hands each item its own row's figure."
    centre = lambda item: item.image.convert("RGB").getpixel((item.image.width // 2, item.image.height // 2))
    found = {i.id: centre(i) for items in loaded.values() for i in items}
    assert found["mmstar/1"] == (30, 70, 220)  # the blue square
    assert found["ai2d/2"] == (220, 30, 30)  # the red circle
    assert found["vmcbench/2"] == (0, 0, 0) and found["vmcbench/0"] != (0, 0, 0)


def test_overthinking_config_reads_them_as_data_paths(samples, tmp_path, monkeypatch):
    "The grid's multimodal cell with the stand-ins as `data_paths`: the config, the pre-flight and the run's loading."
    from reasoning_study.studies.overthinking.config import OverthinkingConfig
    from reasoning_study.studies.overthinking.run import load_items
    from reasoning_study.studies.overthinking.study import datasets as dataset_refs
    from reasoning_study.sweep.preflight import check_dataset

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    config = OverthinkingConfig(
        preset="qwen2.5-vl-7b-instruct",
        benchmarks=IMAGE_BENCHMARKS,
        n_items=None,
        extractors=["rules"],
        judge="qwen3-vl-judge",
        musobench_tasks=[],
        data_paths=samples,
    )
    assert config.data_paths == samples
    refs = dataset_refs(config)
    assert {r.name: r.path for r in refs} == samples and not any(r.reads_hub for r in refs)
    assert [check_dataset(r, env={"HF_HUB_OFFLINE": "1"}) for r in refs] == [None] * len(refs)
    items = load_items(config)
    assert Counter(i.benchmark for i in items) == {name: len(expected) for name, expected in EXPECTED.items()}
    assert all(i.multimodal for i in items)
