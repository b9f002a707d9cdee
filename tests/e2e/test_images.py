"""Image inputs against a real `deepinfer serve` of a tiny DeepSeek-V4.1 checkpoint with a vision
tower (../shared/goldens/deepseek_v41_vision/v41vis_b_engram: its own toy tokenizer, vocabulary
320, image_token_id 319, small image knobs so that spans are 47-64 tokens; weights written at test
time by `synthetic_checkpoint`). Counting: /tokenize and /v1/messages/count_tokens count each image
as its real span n_h (n_w + 1) + 2 (the goldens' plans), through raw requests of the openai and
anthropic SDKs. Bad input: every case gets its 400 code before any stream byte, and the server
stays healthy. The engine does not run images yet: a good image request is 400
images_not_served_yet. Skips when ../shared is absent (a user's clone)."""

import base64
import http.server
import json
import shutil
import threading

import anthropic
import httpx
import openai
import pytest

from conftest import REPO, Server
from test_deepseek import synthetic_checkpoint
from test_tools_count_tokens import count_cli

VISION = REPO.parent / "shared" / "goldens" / "deepseek_v41_vision"
CASE = VISION / "v41vis_b_engram"
IMAGES = VISION / "preprocess"
NAME = "tiny-v41-vision"
IMAGE_TOKEN = 319

pytestmark = pytest.mark.skipif(not CASE.is_dir(),
                                reason="../shared/goldens/deepseek_v41_vision is absent (a user's "
                                       "clone has none)")


def span_of(stem):
    """The case's own plan for one image of its golden prompt: n_image_tokens."""
    golden = json.loads((CASE / "golden.json").read_text())
    for record in golden["images"]:
        if record["image"].endswith(stem):
            return record["plan"]["n_image_tokens"]
    raise KeyError(stem)


def data_uri(stem, media="image/png"):
    return f"data:{media};base64," + base64.b64encode((IMAGES / stem).read_bytes()).decode()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=str(IMAGES), **kwargs)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def media_server():
    """The goldens' images over plain http on 127.0.0.1 (an allowed media domain)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("v41vis_b")
    for f in ["config.json", "weights.json", "tokenizer.json"]:
        shutil.copy(CASE / f, d / f)
    synthetic_checkpoint(d, d)
    s = Server(d, NAME, ["--threads", "2", "--allowed-local-media-path", str(IMAGES),
                         "--allowed-media-domains", "127.0.0.1", "--limit-images-per-request",
                         "3", "--max-image-pixels", "4000000", "--media-fetch-timeout", "5"])
    s.model_dir = d
    yield s
    assert s.alive(), "the server died during the tests:\n" + s.logs()
    s.stop()


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url, "detail": "high"}}


def anthropic_image(stem, media="image/png"):
    data = base64.b64encode((IMAGES / stem).read_bytes()).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}


def tokenize(s, content):
    """POST /tokenize through the openai SDK's raw request."""
    c = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=120)
    r = c.post("/tokenize", cast_to=httpx.Response,
               body={"model": NAME, "messages": [{"role": "user", "content": content}]})
    return r.json()


def count_tokens(s, content):
    """POST /v1/messages/count_tokens through the anthropic SDK."""
    a = anthropic.Anthropic(base_url=s.base_url, api_key="unused", max_retries=0, timeout=120)
    return a.messages.count_tokens(model=NAME, messages=[{"role": "user", "content": content}]
                                   ).input_tokens


def runs_of_image_tokens(tokens):
    runs, n = [], 0
    for t in tokens + [-1]:
        if t == IMAGE_TOKEN:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


def test_one_image_counts_its_span(server):
    gray = span_of("p07_gray_300x180.png")
    assert gray == 47
    empty = tokenize(server, "")
    one = tokenize(server, [image_part(data_uri("p07_gray_300x180.png"))])
    assert one["count"] == empty["count"] + gray
    assert one["count"] == len(one["tokens"])
    assert gray in runs_of_image_tokens(one["tokens"])
    # The Anthropic count is the same prompt.
    assert count_tokens(server, [anthropic_image("p07_gray_300x180.png")]) == one["count"]


def test_two_images_count_both_spans_in_order(server, media_server):
    gray, photo = span_of("p07_gray_300x180.png"), span_of("p04_800x600.jpg")
    text = "Compare these."
    content = [{"type": "text", "text": text}, image_part(data_uri("p07_gray_300x180.png")),
               image_part(f"file://{IMAGES}/p04_800x600.jpg")]
    two = tokenize(server, content)
    runs = [n for n in runs_of_image_tokens(two["tokens"]) if n > 1]
    assert runs == [gray, photo], runs
    # The same images fetched over http, and as Anthropic base64 blocks, count the same.
    fetched = tokenize(server, [{"type": "text", "text": text},
                                image_part(f"{media_server}/p07_gray_300x180.png"),
                                image_part(f"{media_server}/p04_800x600.jpg?v=1")])
    assert fetched["count"] == two["count"]
    assert count_tokens(server, [{"type": "text", "text": text},
                                 anthropic_image("p07_gray_300x180.png"),
                                 anthropic_image("p04_800x600.jpg", "image/jpeg")]) == two["count"]


def test_count_tokens_command_counts_spans_as_the_server_does(server):
    """`deepinfer count-tokens` reads data: URIs and file:// paths itself: the same count as
    /v1/messages/count_tokens; an image it cannot read (http) counts the reserve."""
    content = [{"type": "text", "text": "Compare these."}, anthropic_image("p07_gray_300x180.png"),
               {"type": "image", "source": {"type": "url",
                                            "url": f"file://{IMAGES}/p04_800x600.jpg"}}]
    body = {"model": NAME, "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    cli = count_cli(server.model_dir, body)
    assert cli.returncode == 0, cli.stderr
    mine = json.loads(cli.stdout)
    assert mine["num_images"] == 2 and mine["num_planned_images"] == 2, mine
    assert mine["input_tokens"] == count_tokens(server, content)
    assert mine["image_tokens"] == span_of("p07_gray_300x180.png") + span_of("p04_800x600.jpg")
    content[2]["source"]["url"] = "http://example.com/p04.jpg"
    far = json.loads(count_cli(server.model_dir, body).stdout)
    assert far["num_planned_images"] == 1
    assert far["input_tokens"] == mine["input_tokens"] - span_of("p04_800x600.jpg") + 1024


def error_of(s, body, path="/v1/chat/completions"):
    r = httpx.post(s.base_url + path, json={"model": NAME, "max_tokens": 4, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json")  # before any stream byte
    return r.json()["error"]


def chat_with(*parts, stream=False):
    return {"stream": stream,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                      *parts]}]}


BAD = [
    ("too_many_images", [image_part(data_uri("p01_1x1.png"))] * 4),
    ("invalid_image", [image_part("data:image/png;base64," + base64.b64encode(
        (IMAGES / "p03_544x544.png").read_bytes()[:2000]).decode())]),
    ("invalid_image", [image_part("data:image/png;base64,")]),
    ("invalid_image", [image_part("data:image/png;base64,@@@")]),
    ("unsupported_image_format", [image_part("data:image/png;base64," +
                                             base64.b64encode(b"hello, world").decode())]),
    ("image_too_large", [image_part(data_uri("p06_2048x2048.webp", "image/webp"))]),
    ("image_url_not_allowed", [image_part("http://example.com/cat.png")]),
    ("image_url_not_allowed", [image_part("file:///etc/passwd")]),
    ("image_url_not_allowed", [image_part(f"file://{IMAGES}/../v41vis_b_engram/config.json")]),
    ("image_url_not_allowed", [image_part("ftp://127.0.0.1/cat.png")]),
    ("image_fetch_failed", [image_part("https://127.0.0.1/cat.png")]),
    ("image_fetch_failed", [image_part(f"file://{IMAGES}/missing.png")]),
    ("images_not_served_yet", [image_part(data_uri("p07_gray_300x180.png"))]),
] if CASE.is_dir() else []


@pytest.mark.parametrize("code,parts", BAD, ids=[f"{i}-{c}" for i, (c, _) in enumerate(BAD)])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_image_inputs_get_their_400_and_the_server_stays_healthy(server, code, parts, stream):
    error = error_of(server, chat_with(*parts, stream=stream))
    assert error["code"] == code, error
    if code not in ("too_many_images", "images_not_served_yet"):
        assert error["param"] == "messages[0].content[1]", error
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_fetch_errors_over_http(server, media_server):
    assert error_of(server, chat_with(image_part(f"{media_server}/missing.png")))["code"] == \
        "image_fetch_failed"
    assert error_of(server, chat_with(image_part(f"{media_server}/p01_1x1.png")))["code"] == \
        "images_not_served_yet"


def test_every_api_takes_images_and_gates_them(server):
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=NAME, max_output_tokens=4, input=[
            {"role": "user", "content": [
                {"type": "input_text", "text": "Two images:"},
                {"type": "input_image", "image_url": data_uri("p07_gray_300x180.png")},
                {"type": "input_image", "image_url": data_uri("p01_1x1.png")}]}])
    assert e.value.body["code"] == "images_not_served_yet"
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=NAME, max_output_tokens=4, input=[
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-123"}]}])
    assert e.value.body["code"] == "unsupported_value"
    a = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    for stream in (False, True):
        with pytest.raises(anthropic.BadRequestError) as e:
            r = a.messages.create(model=NAME, max_tokens=4, stream=stream, messages=[
                {"role": "user", "content": [anthropic_image("p01_1x1.png"),
                                             {"type": "text", "text": "What is it?"}]}])
            list(r) if stream else None
        assert "does not run image inputs yet" in e.value.body["error"]["message"]
    # Text still works after all of the above.
    ok = c.chat.completions.create(model=NAME, max_tokens=4, temperature=0,
                                   messages=[{"role": "user", "content": "Hi"}])
    assert ok.usage.completion_tokens >= 1
