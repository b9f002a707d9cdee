"""Structured outputs on the default model (SmolLM2, real `deepinfer serve`, the official openai
SDK): `chat.completions.parse` and `responses.parse` with a Pydantic model give valid objects,
json_object always parses, regex and choice outputs match, streaming included; a malformed
schema is a 400 invalid_constraint before anything runs; constrained and free requests share
batches."""

import json
import re
import threading

import httpx
import pytest

from conftest import Server, smollm_path
from helpers import concurrently, metric_value

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")


class Person(pydantic.BaseModel):
    name: str
    age: int
    city: str


PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Linus Torvalds", "Marie Curie",
          "Isaac Newton", "Albert Einstein", "Rosalind Franklin", "Niels Bohr", "Emmy Noether",
          "Charles Darwin", "Nikola Tesla", "Katherine Johnson", "Tim Berners-Lee",
          "Barbara Liskov", "Dennis Ritchie", "Margaret Hamilton", "John von Neumann",
          "Hedy Lamarr", "Claude Shannon"]


@pytest.fixture(scope="module")
def server():
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    s = Server(smollm_path(), "smol", ["--max-model-len", "2048", "--max-num-seqs", "16"])
    yield s
    assert s.alive(), "the server died during the tests:\n" + s.logs()
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0,
                         timeout=300)


def test_chat_parse_gives_a_valid_object_for_every_prompt(client):
    """20 prompts at once (constrained requests batched together), each parsed by the SDK."""
    results = concurrently(
        lambda i: client.chat.completions.parse(
            model="smol", temperature=0, max_tokens=80, response_format=Person,
            messages=[{"role": "user",
                       "content": f"Describe {PEOPLE[i]} as JSON with name, age and city."}]),
        len(PEOPLE))
    for r in results:
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        person = choice.message.parsed
        assert isinstance(person, Person)
        assert Person.model_validate_json(choice.message.content) == person


def test_responses_parse_gives_a_valid_object(client):
    r = client.responses.parse(model="smol", temperature=0, max_output_tokens=80,
                               input="Describe Ada Lovelace as JSON with name, age and city.",
                               text_format=Person)
    assert isinstance(r.output_parsed, Person)


def test_json_object_always_parses_streamed_or_not(client):
    for i, stream in enumerate([False, True, False, True, False]):
        kwargs = dict(model="smol", temperature=0.7, seed=i, max_tokens=200,
                      response_format={"type": "json_object"},
                      messages=[{"role": "user", "content": "Give me a JSON object with the "
                                 f"name and birth year of {PEOPLE[i]}."}])
        if stream:
            text, finish = "", None
            for chunk in client.chat.completions.create(stream=True, **kwargs):
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
        else:
            r = client.chat.completions.create(**kwargs)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert finish == "stop", text
        assert isinstance(json.loads(text), dict), text


def test_regex_and_choice_outputs_match(client, server):
    for i in range(3):
        r = client.completions.create(model="smol", prompt=f"Call me at {i}", max_tokens=20,
                                      temperature=1.0, seed=i,
                                      extra_body={"guided_regex": r"\d{3}-\d{4}"})
        assert re.fullmatch(r"\d{3}-\d{4}", r.choices[0].text), r.choices[0].text
        assert r.choices[0].finish_reason == "stop"
    choices = ["positive", "negative", "neutral"]
    for text in ["I love it!", "This is awful.", "It is a chair."]:
        r = client.chat.completions.create(
            model="smol", temperature=0, max_tokens=10,
            messages=[{"role": "user", "content": f"Sentiment of: {text}"}],
            extra_body={"structured_outputs": {"choice": choices}})
        assert r.choices[0].message.content in choices
    # A free request beside constrained ones is unaffected (same text as alone).
    free = dict(model="smol", prompt="The capital of France is", max_tokens=8, temperature=0)
    alone = client.completions.create(**free).choices[0].text
    out = {}

    def constrained():
        out["c"] = client.completions.create(model="smol", prompt="Pick", max_tokens=8,
                                             extra_body={"guided_choice": ["yes", "no"]})

    t = threading.Thread(target=constrained)
    t.start()
    together = client.completions.create(**free).choices[0].text
    t.join()
    assert together == alone
    assert out["c"].choices[0].text in ("yes", "no")


def test_a_malformed_constraint_is_a_400_before_anything_runs(client, server):
    for extra in ({"guided_json": {"type": "object", "properties": {"a": {"type": 7}}}},
                  {"guided_regex": "(unclosed"},
                  {"guided_grammar": "root ::= "}):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="smol", max_tokens=4, extra_body=extra,
                                           messages=[{"role": "user", "content": "x"}])
        assert e.value.body["code"] == "invalid_constraint", e.value.body
        assert e.value.body["param"] == next(iter(extra))
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": "x"}], "stream": True,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                                                                    "schema": {"type": "nope"}}}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_constraint", r.text


def test_required_tool_choice_without_a_tool_call_syntax_is_a_400(server):
    """SmolLM2's chat template has no tool-call syntax the server reads: a required tool choice
    cannot be enforced, and the answer says so instead of ignoring it."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                   json={"model": "smol", "max_tokens": 4, "tools": tools, "tool_choice": "required",
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "unsupported_value"
    assert r.json()["error"]["param"] == "tool_choice"


def test_mask_cost_is_in_the_metrics(client, server):
    """Every token sampled under a constraint is counted with the time its mask took."""
    def metrics():
        text = httpx.get(server.base_url + "/metrics", timeout=10).text
        return (metric_value(text, "deepinfer_structured_output_masks_total"),
                metric_value(text, "deepinfer_structured_output_mask_seconds_total"))

    masks, seconds = metrics()
    r = client.chat.completions.create(
        model="smol", max_tokens=16, temperature=0,
        messages=[{"role": "user", "content": "A number?"}],
        extra_body={"structured_outputs": {"regex": "[0-9]{1,12}"}})
    masks_after, seconds_after = metrics()
    assert masks_after - masks >= r.usage.completion_tokens > 0
    assert 0 < seconds_after - seconds < 1.0 * r.usage.completion_tokens
