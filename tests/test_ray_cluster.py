"""The Ray executor on a cluster as Ray clusters are: nodes that do not share the driver's folders.

A cluster of three Ray nodes on this machine (`ray.cluster_utils.Cluster`: a head without CPUs, two worker nodes of one
CPU each), each worker node with its own scratch folder (`REASONING_STUDY_RAY_SCRATCH`). The sweep's tasks get the
checkout through Ray's `runtime_env` and run in a sweep folder of their node; what the driver's sweep folder holds came
back through Ray (the object store, or `storage`). Two cells of the benchmark build (seconds each, no model), then one
of them changed (stale) and run again through a storage folder; the report is compiled from the driver's copy.
"""

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from reasoning_study.cli import compile_report
from reasoning_study.sweep.executors import RAY_SCRATCH, run_sweep
from reasoning_study.sweep.index import DONE_FILE, STALE, WORK, finished_runs
from reasoning_study.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
# one Ray cluster per run of this module, on the worker that runs the other Ray tests
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

SWEEP = """
name: cluster
experiments:
  - notebook: musobench_build
    label: first
    parameters: {tasks: [subsetsum], levels: [1], per_level: 1, workers: 1, seed: 0}
  - notebook: musobench_build
    label: second
    parameters: {tasks: [subsetsum], levels: [1], per_level: 1, workers: 1, seed: %d}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        import ray
        from ray._common.utils import get_ray_address_file
        from ray.cluster_utils import Cluster
    except ImportError:
        if os.environ.get("CI"):
            raise  # CI installs the dev extra, which includes ray: the test must run there
        pytest.skip("the Ray executor needs the 'ray' extra")
    scratch = tmp_path_factory.mktemp("nodes")
    # Cluster writes its address where `ray.init()` looks for a running instance: put back what was there, so that a
    # local instance started by another test does not join this cluster
    address_file = Path(get_ray_address_file(None))
    previous = address_file.read_text() if address_file.is_file() else None
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    if previous is None:
        address_file.unlink(missing_ok=True)
    else:
        address_file.write_text(previous)
    for node in ("node0", "node1"):
        cluster.add_node(num_cpus=1, env_vars={RAY_SCRATCH: str(scratch / node)})
    cluster.wait_for_nodes()
    print(f"cluster of 3 nodes up in {time.perf_counter() - started:.1f} s")
    yield cluster, scratch
    ray.shutdown()
    cluster.shutdown()


def ran_in(run_folder: Path) -> Path:
    "Where the notebook wrote its run: the out_dir papermill gave it."
    return Path(yaml.safe_load((run_folder / "sweep_parameters.yaml").read_text())["out_dir"])


def test_a_sweep_runs_on_the_nodes_and_comes_back_to_the_driver(cluster, tmp_path):
    cluster, scratch = cluster
    out, spec = tmp_path / "outputs", tmp_path / "cluster.yaml"
    spec.write_text(SWEEP % 0)
    sweep_dir = out / "cluster"
    # an interrupted earlier run of `second` left its work folder here: it travels with the task and is resumed there
    (sweep_dir / WORK / "second").mkdir(parents=True)
    (sweep_dir / WORK / "second" / "kept.txt").write_text("from the driver's copy")

    started = time.perf_counter()
    table = run_sweep(load_sweep(spec, ROOT), out, "ray", ray_address=cluster.address, root=ROOT, progress=False)
    print(f"two cells on two nodes: {time.perf_counter() - started:.1f} s")
    assert dict(zip(table.cell, table.status)) == {"first": "done", "second": "done"}, table.to_string()
    runs = finished_runs(sweep_dir).set_index("cell")
    assert sorted(runs.index) == ["first", "second"]
    for cell in ("first", "second"):
        folder = sweep_dir / cell
        assert Path(runs.folder[cell]) == folder and (folder / "subsetsum.jsonl").is_file()
        assert (folder / "notebook.ipynb").is_file() and (folder / DONE_FILE).is_file()
    # the notebooks wrote in their nodes' sweep folders, one cell on each node, never in the driver's
    nodes = {ran_in(sweep_dir / cell).relative_to(scratch).parts[0] for cell in ("first", "second")}
    assert nodes == {"node0", "node1"}
    assert (sweep_dir / "second" / "kept.txt").read_text() == "from the driver's copy"  # shipped there and back
    assert not (sweep_dir / WORK).exists()  # nothing left half-way
    assert all(not any((scratch / node).iterdir()) for node in ("node0", "node1"))  # the nodes' copies are gone

    # resumed: finished cells are skipped; a changed cell is stale: it runs again (here through a storage folder),
    # the old run folder set aside by the driver
    spec.write_text(SWEEP % 7)
    storage = tmp_path / "storage"
    table = run_sweep(
        load_sweep(spec, ROOT), out, "ray", ray_address=cluster.address, root=ROOT, progress=False, ray_storage=storage
    )
    assert dict(zip(table.cell, table.status)) == {"first": "skipped", "second": "done"}, table.to_string()
    record = json.loads((sweep_dir / "second" / DONE_FILE).read_text())
    assert record["parameters"]["seed"] == 7 and record["replaced"]["changed"] == ["seed"]
    [aside] = list((sweep_dir / STALE).iterdir())
    assert json.loads((aside / DONE_FILE).read_text())["parameters"]["seed"] == 0
    assert ran_in(sweep_dir / "second").is_relative_to(scratch)
    assert not [p for p in storage.rglob("*") if p.is_file()]  # what travelled through storage was taken from it

    started = time.perf_counter()
    html = compile_report(sweep_dir, root=ROOT, progress=False)
    print(f"report: {time.perf_counter() - started:.1f} s")
    runs = pd.read_csv(html.parent / "runs.csv").set_index("cell")  # the report read the driver's run folders
    assert sorted(runs.index) == ["first", "second"]
    assert all(Path(runs.folder[cell]) == sweep_dir / cell for cell in runs.index)
    assert html.is_file() and html.stat().st_size > 0
