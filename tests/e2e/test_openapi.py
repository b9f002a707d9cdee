"""schemathesis against a real `deepinfer serve` on the default model (SmolLM2-135M-Instruct), driven
by the OpenAPI document the server serves at GET /openapi.json (src/api/openapi.json).

Every operation of the document gets schemathesis's coverage cases (boundary values, wrong types,
missing fields, unlisted methods) and 25 generated requests, valid (positive) and invalid
(negative), with a fixed seed and derandomized so that a run is reproducible. Each answer is
checked: no 5xx (not_a_server_error), a documented status and content type, the body valid
against the documented schema, errors and each streamed event included (OpenAI's error shape,
Anthropic's on /v1/messages paths), 405 with `Allow` for an unlisted method. The server must be
alive at the end. src/api/openapi_test.cc checks the same document against the route table.

Output stays short without a false limit in the document: the server runs with
`--max-output-tokens 16`, and _shape_case brings most generated budgets within 1..16.
About 2.5 minutes on 2 cores (schemathesis 4.32.5).

The same run from the command line, against a server on 127.0.0.1:8900 (without _shape_case):
  .venv/bin/schemathesis run http://127.0.0.1:8900/openapi.json --seed 20261205 \
    --generation-deterministic --generation-codec utf-8 --max-examples 25 --mode all \
    --phases examples,coverage,fuzzing --request-timeout 60 \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,\
response_schema_conformance,unsupported_method
"""

import json
import zlib

import httpx
import pytest

from conftest import REPO, Server, smollm_path

schemathesis = pytest.importorskip("schemathesis")

SPEC = REPO / "src" / "api" / "openapi.json"
MODEL = "SmolLM2-135M-Instruct.Q4_1"  # serve's default name for the default model

CONFIG = schemathesis.Config.from_dict({
    "seed": 20261205,
    "request-timeout": 60,
    "generation": {
        "mode": "all",  # positive and negative
        "max-examples": 25,
        "deterministic": True,
        "database": "none",
        # Strings a JSON text can carry as UTF-8: lone surrogates would make most bodies
        # invalid_json (a 400) before they reach the parsers under test.
        "codec": "utf-8",
    },
    # Stateful links are not in the document (no route creates a resource another reads).
    "phases": {"stateful": {"enabled": False}},
    "checks": {
        "enabled": False,
        "not_a_server_error": {"enabled": True},
        "status_code_conformance": {"enabled": True},
        "content_type_conformance": {"enabled": True},
        "response_schema_conformance": {"enabled": True},
        "unsupported_method": {"enabled": True},
    },
})

schema = schemathesis.openapi.from_path(SPEC, config=CONFIG)


@pytest.fixture(scope="module")
def served():
    path = smollm_path()
    if not path.exists():
        pytest.skip(f"SmolLM2 not found at {path} (run `make setup`)")
    server = Server(path, MODEL,
                    ["--max-model-len", "2048", "--max-output-tokens", "16", "--log-requests"])
    yield server
    alive = server.alive()
    logs = server.logs()
    server.stop()
    assert alive, "the server died under schemathesis:\n" + logs


def _shape_case(case) -> None:
    """Three in four generated requests are aimed at the work the server does, the fourth is sent
    as generated (chosen by a hash of the value, so the run stays reproducible): a random model
    name becomes the served name (any other name is a 404 before the body is read further), and
    an output budget over 16 becomes one within 1..16 (a random one mostly overflows the context
    window, a 400 before anything runs)."""
    def sent_as_generated(value) -> bool:
        return zlib.crc32(repr(value).encode("utf-8", "replace")) % 4 == 0

    body = case.body if isinstance(case.body, dict) else {}
    if isinstance(body.get("model"), str) and not sent_as_generated(body["model"]):
        body["model"] = MODEL
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 16 and \
                not sent_as_generated(value):
            body[key] = value % 16 + 1
    params = case.path_parameters or {}
    if isinstance(params.get("id"), str) and not sent_as_generated(params["id"]):
        params["id"] = MODEL


@schema.parametrize()
def test_api(case, served):
    _shape_case(case)
    case.call_and_validate(base_url=served.base_url)


def test_served_document_is_the_source_file(served):
    r = httpx.get(served.base_url + "/openapi.json", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.content == SPEC.read_bytes()
    assert json.loads(r.content)["openapi"].startswith("3.1.")
