"""Issue 42, parts 3 and 4: `rs-sweep GRID --preflight` asks every model server and dataset before a grid runs, and the
loader turns the hub's refusal of a gated dataset into one line.

Real servers on 127.0.0.1 (port 0, threads): a provider that answers as OpenAI does (404 `model_not_found`, 401
`invalid_api_key`, 403, 429 with `Retry-After`, 200), and a hub that answers as huggingface.co does for a gated dataset
(401 without a token, 403 with a token whose account was not granted access, both with `X-Error-Code: GatedRepo`, the
header huggingface_hub turns into `GatedRepoError`; 404 `RepoNotFound` for an unknown id). Nothing leaves this machine.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from local_server import LocalServer, chat_reply

from reasoning_study.backends.server import free_port
from reasoning_study.sweep.preflight import preflight, preflight_report, token_cells
from reasoning_study.sweep.spec import Cell, notebook_path

GOOD, BAD = "sk-" + "g00d" * 8, "sk-" + "bad0" * 8  # made-up keys
ENV = {"PF_GOOD_KEY": GOOD, "PF_BAD_KEY": BAD, "HF_HUB_OFFLINE": "1"}
OVERTHINKING = str(notebook_path("overthinking"))


def openai_error(message: str, code: str | None, kind: str = "invalid_request_error") -> dict:
    "OpenAI's error body."
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class Provider(LocalServer):
    """Answers as OpenAI does, by the request's model and key: `retired-model` 404, a bad key 401, `locked-model` 403,
    `busy-model` one 429 then 200, `always-busy` 429 each time, anything else 200. Records when each request came."""

    def __init__(self):
        super().__init__()
        self.arrivals: dict[str, list[float]] = {}

    def respond_with_headers(self, body, headers):
        model, key = body["model"], {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        with self.lock:
            self.record(body)
            seen = self.arrivals.setdefault(model, [])
            seen.append(time.monotonic())
        if key == f"Bearer {BAD}":
            return 401, {}, openai_error("Incorrect API key provided: sk-bad0***bad0.", "invalid_api_key")
        if model == "retired-model":
            message = f"The model `{model}` does not exist or you do not have access to it."
            return 404, {}, openai_error(message, "model_not_found")
        if model == "locked-model":
            return 403, {}, openai_error(f"Project `proj_x` does not have access to model `{model}`", "model_not_found")
        if model == "always-busy" or (model == "busy-model" and len(seen) == 1):
            limited = openai_error("Rate limit reached for requests", "rate_limit_exceeded", "requests")
            return 429, {"Retry-After": "0.3"}, limited
        return 200, {}, chat_reply("H", usage=(8, 1))


def judged(cell_id: str, base_url: str, model: str, key: str = "PF_GOOD_KEY", judge: str = "gpt-4o-mini") -> Cell:
    "An overthinking cell on the embedded model whose judge is an API model at `base_url`."
    options = {"base_url": base_url, "api_key_env": key, "model": model}
    return Cell(cell_id, OVERTHINKING, {"judge": judge, "judge_options": options})


def test_preflight_names_each_providers_answer_once_per_endpoint():
    with Provider() as server:
        url = server.base_url
        cells = [
            judged("ok", url, "good-model"),
            judged("ok-again", url, "good-model"),  # the same endpoint: asked once
            judged("retired", url, "retired-model"),
            judged("retired-too", url, "retired-model"),
            judged("bad-key", url, "good-model", key="PF_BAD_KEY"),
            judged("locked", url, "locked-model"),
            judged("busy", url, "busy-model"),
            judged("always-busy", url, "always-busy"),
            judged("deepseek", url, "deepseek-chat", judge="deepseek-v3"),
        ]
        started = time.monotonic()
        problems = preflight(cells, env=ENV, timeout=5, max_wait=2)
        took = time.monotonic() - started
    by_kind = {p.kind: p for p in problems}
    assert sorted(by_kind) == ["key refused", "model unknown or retired", "no access", "rate-limited"], problems
    assert len(problems) == 4
    retired = by_kind["model unknown or retired"]
    assert retired.cells == ("retired", "retired-too")
    assert str(retired).startswith(f"model unknown or retired: model retired-model at {url}, for judge (gpt-4o-mini): ")
    assert "HTTP 404 model_not_found: The model `retired-model` does not exist" in str(retired)
    assert str(retired).endswith("(2 cells: retired, retired-too)")
    refused = str(by_kind["key refused"])
    assert "HTTP 401 invalid_api_key" in refused and "the key in $PF_BAD_KEY was refused" in refused
    assert BAD not in refused and "(cell bad-key)" in refused
    assert by_kind["no access"].cells == ("locked",) and "HTTP 403" in str(by_kind["no access"])
    assert by_kind["rate-limited"].cells == ("always-busy",) and "after waiting 0.3 s" in str(by_kind["rate-limited"])
    # one request per endpoint; a 429 is honoured once: two requests, the second after Retry-After
    counts = {model: len(times) for model, times in server.arrivals.items()}
    assert counts == {
        "good-model": 2,  # two key variables: two endpoints
        "retired-model": 1,
        "locked-model": 1,
        "busy-model": 2,
        "always-busy": 2,
        "deepseek-chat": 1,
    }
    for model in ("busy-model", "always-busy"):
        first, second = server.arrivals[model]
        assert 0.3 <= second - first < 2, (model, second - first)
    # the budget of one token, in the field each provider reads
    fields = {b["model"]: {k: v for k, v in b.items() if k.startswith("max_")} for b in server.bodies}
    assert fields["good-model"] == {"max_completion_tokens": 1} and fields["deepseek-chat"] == {"max_tokens": 1}
    assert took < 10


def test_preflight_reports_an_unreachable_server_and_a_role_that_cannot_load():
    here = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens
    hosted = "https://api.example.invalid/v1"  # a hosted server needs its key: never asked without one
    cells = [judged("nobody-home", here, "good-model"), judged("no-key", hosted, "good-model", key="PF_UNSET_KEY")]
    text, problems = preflight_report(cells, env=ENV, timeout=5)
    assert [p.kind for p in problems] == ["not ready", "unreachable"]
    lines = text.splitlines()
    assert (
        lines[0].startswith("not ready: role judge (gpt-4o-mini): ") and "$PF_UNSET_KEY, which is not set" in lines[0]
    )
    assert lines[1].startswith(f"unreachable: model good-model at {here}, for judge (gpt-4o-mini): APIConnectionError")
    assert lines[-1] == "pre-flight: 1 model endpoint and 0 datasets of 2 cells checked: 2 problems"


# --- the hub ------------------------------------------------------------------------------------------------------

GPQA = "Idavidrein/gpqa"
ACCEPTED = "hf_" + "accepted" * 4  # the token of an account that accepted GPQA's terms
OTHER = "hf_" + "stranger" * 4  # a valid token of an account that did not


class Hub:
    """Answers as huggingface.co does for a gated dataset (GPQA) and an unknown one: the dataset's info is public, its
    files and its auth-check need a token of an account that accepted its terms; `busy/data` answers 429 once."""

    def __init__(self):
        self.seen, outer = [], self

        class Handler(BaseHTTPRequestHandler):
            def answer(self, with_body: bool):
                auth = self.headers.get("Authorization")
                outer.seen.append((self.command, self.path, auth))
                status, headers, body = outer.respond(self.path, auth)
                payload = json.dumps(body).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if with_body:
                    self.wfile.write(payload)

            def do_GET(self):
                self.answer(True)

            def do_HEAD(self):
                self.answer(False)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def respond(self, path: str, auth: str | None):
        repo = "/".join(path.split("/datasets/", 1)[-1].split("/")[:2]) if "/datasets/" in path else ""
        if repo == GPQA and path != f"/api/datasets/{GPQA}":
            if auth is None:
                message = (
                    f"Access to dataset {GPQA} is restricted. You must have access to it and be authenticated to "
                    "access it. Please log in."
                )
                return 401, {"X-Error-Code": "GatedRepo", "X-Error-Message": message}, {"error": message}
            if auth != f"Bearer {ACCEPTED}":
                message = (
                    f"Access to dataset {GPQA} is restricted and you are not in the authorized list. Visit "
                    f"https://huggingface.co/datasets/{GPQA} to ask for access."
                )
                return 403, {"X-Error-Code": "GatedRepo", "X-Error-Message": message}, {"error": message}
        if repo == "busy/data" and sum(p == path for _, p, _ in self.seen) == 1:
            return 429, {"Retry-After": "0.2"}, {"error": "Too many requests"}
        if repo in (GPQA, "busy/data"):
            return 200, {}, {"id": repo, "gated": "manual" if repo == GPQA else False}
        message = "Repository not found"
        return 404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": message}, {"error": message}

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def no_saved_token(monkeypatch, tmp_path):
    "No token but the one a test gives: none in the environment, none saved on this machine."
    import huggingface_hub.constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


def reading(cell_id: str, benchmarks: list[str], **parameters) -> Cell:
    return Cell(cell_id, OVERTHINKING, {"benchmarks": benchmarks, **parameters})


def test_preflight_says_how_to_read_a_gated_dataset(no_saved_token, tmp_path):
    (tmp_path / "gpqa.jsonl").write_text("{}\n")
    cells = [
        reading("gpqa-hub", ["gpqa", "aime2025"], allow_hub=True),
        reading("gpqa-local", ["gpqa"], data_paths={"gpqa": str(tmp_path / "gpqa.jsonl")}),  # no hub, no token
        reading("gpqa-lost", ["gpqa"], data_paths={"gpqa": "no/such/gpqa.jsonl"}),
        reading("gpqa-nowhere", ["gpqa"]),  # neither a copy nor the hub
    ]
    assert token_cells(cells) == {GPQA: ["gpqa-hub"]}
    with Hub() as hub:
        asked = preflight(cells, env={"HF_ENDPOINT": hub.url}, timeout=5, cwd=tmp_path)
        declined = preflight(cells[:1], env={"HF_ENDPOINT": hub.url, "HF_TOKEN": OTHER}, timeout=5)
        granted = preflight(cells[:1], env={"HF_ENDPOINT": hub.url, "HF_TOKEN": ACCEPTED}, timeout=5)
    lines = {p.kind: str(p) for p in asked}
    assert sorted(lines) == ["dataset not found", "gated dataset, no token", "missing local copy", "no source"], asked
    gated = lines["gated dataset, no token"]
    assert gated.startswith("gated dataset, no token: dataset gpqa (Idavidrein/gpqa, gpqa_diamond/train): ")
    assert f"accept them at https://huggingface.co/datasets/{GPQA}, then set HF_TOKEN" in gated
    assert "data_paths['gpqa']" in gated and gated.endswith("(cell gpqa-hub)")
    assert "simplescaling/aime25_nofigures" in lines["dataset not found"]
    assert str(tmp_path / "no/such/gpqa.jsonl") in lines["missing local copy"]
    assert lines["no source"].endswith("(data_paths['gpqa']) (cell gpqa-nowhere)")
    assert [p.kind for p in declined] == ["gated dataset, no access", "dataset not found"]
    assert [p.kind for p in granted] == ["dataset not found"]  # GPQA served: only the unknown id is left
    # the hub was asked the auth-check, with the token the run would send
    check = f"/api/datasets/{GPQA}/auth-check"
    assert [auth for _, path, auth in hub.seen if path == check] == [None, f"Bearer {OTHER}", f"Bearer {ACCEPTED}"]


def test_preflight_waits_once_for_a_busy_hub(no_saved_token):
    from reasoning_study.studies.registry import DatasetRef
    from reasoning_study.sweep.preflight import check_dataset

    with Hub() as hub:
        found = check_dataset(DatasetRef("busy", "busy/data"), env={"HF_ENDPOINT": hub.url}, timeout=5, max_wait=2)
    assert found is None and len(hub.seen) == 2


# --- the loader's line ----------------------------------------------------------------------------------------------


@pytest.fixture
def hub_here(monkeypatch):
    """`datasets` and huggingface_hub pointed at the local hub, online (both read HF_ENDPOINT and HF_HUB_OFFLINE when
    imported, so their module constants are set, as a process started with HF_ENDPOINT would have them)."""
    import datasets.config
    import huggingface_hub.constants

    with Hub() as hub:
        monkeypatch.setattr(datasets.config, "HF_ENDPOINT", hub.url)
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        yield hub


@pytest.mark.parametrize("token, why", [(None, "no token was sent"), (OTHER, "has not been granted access")])
def test_loading_a_gated_benchmark_says_what_to_do(no_saved_token, hub_here, monkeypatch, tmp_path, token, why):
    from reasoning_study.tasks.qa import HubAccessError, load_benchmark

    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(HubAccessError) as refused:
        load_benchmark("gpqa", n=2, allow_hub=True, cache_dir=str(tmp_path / "cache"))
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"gpqa: the Hugging Face hub refused {GPQA} (") and why in line
    assert f"accept its terms at https://huggingface.co/datasets/{GPQA}" in line and "set HF_TOKEN" in line
    assert "data_paths" in line
    assert any(path.startswith(f"/datasets/{GPQA}/resolve/") for _, path, _ in hub_here.seen)  # the hub was asked


def test_huggingface_hubs_own_gated_error_reads_as_the_same_line(no_saved_token, hub_here, tmp_path):
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError

    from reasoning_study.tasks.qa import hub_access_line

    with pytest.raises(GatedRepoError) as raised:
        hf_hub_download(GPQA, "data.parquet", repo_type="dataset", endpoint=hub_here.url, cache_dir=str(tmp_path))
    line = hub_access_line(raised.value, GPQA, "gpqa")
    assert line.startswith(f"gpqa: the Hugging Face hub refused {GPQA} (it is gated and no token was sent)")


# --- the command ---------------------------------------------------------------------------------------------------


def test_rs_sweep_preflight_and_dry_run_say_it_before_anything_runs(tmp_path, capsys, monkeypatch):
    "`rs-sweep --preflight` prints the providers' answers (exit 1 on a problem); `--dry-run` names the gated data."
    from reasoning_study.cli import main

    monkeypatch.setenv("PF_GOOD_KEY", GOOD)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with Provider() as server:
        judge = {"base_url": server.base_url, "api_key_env": "PF_GOOD_KEY", "model": "retired-model"}
        grid = tmp_path / "grid.yaml"
        grid.write_text(
            json.dumps(
                {
                    "name": "preflight",
                    "experiments": [
                        {
                            "notebook": "overthinking",
                            "label": "judged",
                            "parameters": {"judge": "gpt-4o-mini", "judge_options": judge},
                        },
                        {
                            "notebook": "overthinking",
                            "label": "gpqa",
                            "parameters": {"benchmarks": ["gpqa"], "allow_hub": True},
                        },
                    ],
                }
            )
        )
        assert main([str(grid), "--preflight", "--out", str(tmp_path / "out")]) == 1
        out = capsys.readouterr().out
        assert "model unknown or retired: model retired-model at " in out and "(cell judged)" in out
        assert [b["model"] for b in server.bodies] == ["retired-model"]  # one one-token request, nothing else
    assert main([str(grid), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "datasets gated on the hub" in out and "Idavidrein/gpqa: gpqa" in out
    assert "| **total** |" in out  # the bill
    assert not (tmp_path / "out").exists()  # nothing ran
