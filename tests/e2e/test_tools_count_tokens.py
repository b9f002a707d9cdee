"""`deepinfer count-tokens` counts exactly what the server charges: on 50 chat requests (tool
definitions, tool calls and results, content parts, special-token text, unicode, thinking mode)
its count equals usage.prompt_tokens of a real chat completion, /tokenize and
/v1/messages/count_tokens.

SmolLM2's ChatML template renders no tool definitions (they add nothing on either side); the
tiny DeepSeek-V3 checkpoint's V4.1 encoder renders them, and there the counts still agree.
"""

import concurrent.futures
import json
import random
import subprocess

import httpx
import pytest

from conftest import STORIES, Server, binary, smollm_path
from test_deepseek import checkpoint  # noqa: F401 (module fixture: a tiny DeepSeek-V3 checkpoint)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def make_requests(n: int, seed: int) -> list:
    rng = random.Random(seed)
    words = ["weather", "Paris", "tomorrow", "résumé", "数据", "🙂", "tokens", "<|im_end|>",
             "the", "quick", "brown", "fox", "  spaced  ", "line\nbreak", "tab\there"]

    def text(k):
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, k)))

    out = []
    for i in range(n):
        messages = []
        if i % 3 == 0:
            messages.append({"role": "system", "content": text(12)})
        if i % 7 == 1:
            messages.append({"role": "developer", "content": text(6)})
        for turn in range(rng.randint(1, 3)):
            if i % 5 == 2:
                messages.append({"role": "user", "content": [
                    {"type": "text", "text": text(8)}, {"type": "text", "text": text(4)}]})
            else:
                messages.append({"role": "user", "content": text(20), "name": "alice"})
            if i % 4 == 3:
                call_id = f"call_{i}_{turn}"
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]})
                messages.append({"role": "tool", "tool_call_id": call_id, "content": text(10)})
            messages.append({"role": "assistant", "content": text(15)})
        messages.append({"role": "user", "content": text(10)})
        body = {"messages": messages, "max_tokens": 1, "temperature": 0}
        if i % 2 == 0:
            body["tools"] = TOOLS
            body["tool_choice"] = "auto"
        if i % 6 == 5:
            body["chat_template_kwargs"] = {"thinking": True}
        out.append(body)
    return out


def served_answer(server, body: dict) -> tuple:
    """(usage.prompt_tokens of a real chat completion, True), or (n_prompt_tokens, False) when
    the prompt does not fit the window (the server counted it all the same)."""
    chat = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)
    if chat.status_code == 400 and chat.json()["error"]["code"] == "context_length_exceeded":
        return chat.json()["error"]["n_prompt_tokens"], False
    assert chat.status_code == 200, chat.text
    return chat.json()["usage"]["prompt_tokens"], True


def served_prompt_tokens(server, body: dict) -> int:
    return served_answer(server, body)[0]


def count_cli(model, body: dict, *extra):
    result = subprocess.run([str(binary()), "count-tokens", "--model", str(model), "--request",
                             "-", "--json", *extra], input=json.dumps(body), capture_output=True,
                            text=True, timeout=120)
    return result


def check_equal_counts(server, model, requests):
    def one(body):
        cli = count_cli(model, body)
        assert cli.returncode == 0, cli.stderr
        return json.loads(cli.stdout)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        counted = list(pool.map(one, requests))
    for body, mine in zip(requests, counted):
        served = served_prompt_tokens(server, body)
        tokenized = httpx.post(server.base_url + "/tokenize",
                               json={"messages": body["messages"]}, timeout=60).json()["count"]
        assert mine["input_tokens"] == mine["text_tokens"] == served == tokenized, (body, mine)
        assert mine["verdict"] == "fits"


def test_counts_equal_prompt_tokens_on_50_requests(smollm):
    check_equal_counts(smollm, smollm_path(), make_requests(45, seed=1))


def test_counts_equal_prompt_tokens_on_llama2c(stories):
    check_equal_counts(stories, STORIES, make_requests(5, seed=2))


@pytest.fixture(scope="module")
def deepseek(checkpoint):  # noqa: F811
    server = Server(checkpoint, "tiny-deepseek", ["--chat-template", "deepseek-v4.1"])
    yield server
    server.stop()


def test_tool_definitions_count_the_same_on_a_deepseek_encoder(deepseek, checkpoint):  # noqa: F811
    requests = make_requests(6, seed=5)
    with_tools = [r for r in requests if "tools" in r]
    assert with_tools
    for body in requests:
        cli = count_cli(checkpoint, body, "--chat-template", "deepseek-v4.1")
        tokens, accepted = served_answer(deepseek, body)
        # The tiny model's window is 256 tokens: the verdict is the server's.
        assert cli.returncode == (0 if accepted else 1), (cli.stdout, cli.stderr)
        assert json.loads(cli.stdout)["input_tokens"] == tokens, body
    # The encoder renders the definitions: they cost tokens.
    bare = {k: v for k, v in with_tools[0].items() if k not in ("tools", "tool_choice")}
    counts = [json.loads(count_cli(checkpoint, b, "--chat-template", "deepseek-v4.1").stdout)
              ["input_tokens"] for b in (bare, with_tools[0])]
    assert counts[1] > counts[0]
    # The Anthropic shape of a request with tools and thinking, on the server and the CLI.
    anthropic = {"system": "Be terse.", "thinking": {"type": "enabled", "budget_tokens": 64},
                 "tools": [{"name": "get_weather", "description": "Weather for a city.",
                            "input_schema": TOOLS[0]["function"]["parameters"]}],
                 "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    served = httpx.post(deepseek.base_url + "/v1/messages/count_tokens", json=anthropic,
                        timeout=60)
    assert served.status_code == 200, served.text
    cli = count_cli(checkpoint, anthropic, "--chat-template", "deepseek-v4.1")
    assert served.json()["input_tokens"] == json.loads(cli.stdout)["input_tokens"]
    openai_shape = {"messages": [{"role": "system", "content": "Be terse."},
                                 {"role": "user", "content": "Weather in Paris?"}],
                    "tools": TOOLS, "chat_template_kwargs": {"thinking": True}, "max_tokens": 1}
    assert served.json()["input_tokens"] == served_prompt_tokens(deepseek, openai_shape)


def test_anthropic_shape_counts_the_same_on_server_and_cli(smollm):
    body = {
        "model": "SmolLM2-135M-Instruct",
        "system": [{"type": "text", "text": "You are terse."}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "t1", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "Sunny, 21 C"},
                {"type": "text", "text": "And tomorrow?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}}]},
        ],
    }
    served = httpx.post(smollm.base_url + "/v1/messages/count_tokens", json=body, timeout=60)
    assert served.status_code == 200, served.text
    cli = count_cli(smollm_path(), body)
    assert cli.returncode == 0, cli.stderr
    mine = json.loads(cli.stdout)
    assert mine["format"] == "anthropic" and mine["num_images"] == 1
    assert served.json() == {"input_tokens": mine["input_tokens"]}
    assert mine["input_tokens"] == mine["text_tokens"] + 1024
    # Anthropic-shaped errors.
    bad = httpx.post(smollm.base_url + "/v1/messages/count_tokens", json={"messages": 3},
                     timeout=60)
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"


def test_budget_verdict_and_compaction_plan(smollm):
    body = make_requests(8, seed=3)[3]  # has tool calls
    fits = count_cli(smollm_path(), body, "--profile", "operator")
    n = json.loads(fits.stdout)["input_tokens"]
    assert json.loads(fits.stdout)["limit"] == 999424
    over = count_cli(smollm_path(), body, "--window", str(n + 100), "--output-tokens", "64",
                     "--headroom", "37", "--plan-compaction")
    assert over.returncode == 1, over.stderr
    result = json.loads(over.stdout)
    assert result["verdict"] == "compact" and result["limit"] == n
    plan = result["compaction_plan"]
    assert plan["possible"], plan
    kept_roles = [m["role"] for m in body["messages"]]
    # The range never starts or ends between a tool call and its result.
    assert kept_roles[plan["end"]] != "tool"
    assert plan["input_tokens_after"] < n
    text = count_cli(smollm_path(), body, "--window", str(n + 100), "--output-tokens", "64",
                     "--headroom", "37", "--plan-compaction")
    table = subprocess.run([str(binary()), "count-tokens", "--model", str(smollm_path()),
                            "--request", "-", "--window", str(n + 100), "--output-tokens", "64",
                            "--headroom", "37"], input=json.dumps(body), capture_output=True,
                           text=True, timeout=120)
    assert table.returncode == 1 and "COMPACT" in table.stdout and "headroom" in table.stdout
    assert text.returncode == 1


def test_uncountable_requests_exit_2_with_the_reason(smollm):
    for body, reason in (("not json", "invalid_json"),
                         ('{"messages": [{"role": "wizard", "content": "x"}]}', "invalid_value")):
        result = subprocess.run([str(binary()), "count-tokens", "--model", str(smollm_path()),
                                 "--request", "-"], input=body, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 2 and reason in result.stderr, result.stderr
        assert result.stdout == ""


def test_default_verdict_is_the_servers_at_the_edge_of_the_window(smollm):
    # The server runs with --max-model-len 2048; count-tokens --window 2048 judges against that
    # window (capping the model's 8,192), with the request's own max_tokens as the reservation.
    body = {"messages": [{"role": "user", "content": "tokens " * 300}], "temperature": 0}
    first = count_cli(smollm_path(), body)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["window"] == result["model_window"] == 8192 and result["profile"] == "model"
    n = result["input_tokens"]
    for max_tokens in (2048 - n, 2048 - n + 1):
        request = {**body, "max_tokens": max_tokens}
        verdict = count_cli(smollm_path(), request, "--window", "2048")
        served = httpx.post(smollm.base_url + "/v1/chat/completions", timeout=120,
                            json={**request, "max_tokens": max_tokens})
        fits = served.status_code == 200
        assert verdict.returncode == (0 if fits else 1), (max_tokens, verdict.stdout, served.text)
        assert json.loads(verdict.stdout)["verdict"] == ("fits" if fits else "compact")
        if not fits:
            assert served.json()["error"]["code"] == "context_length_exceeded"
    # No max_tokens: the prompt alone must leave one token.
    window = str(n + 1)
    assert count_cli(smollm_path(), body, "--window", window).returncode == 0
    assert count_cli(smollm_path(), body, "--window", str(n)).returncode == 1
