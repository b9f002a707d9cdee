"""Image inputs against a real `deepinfer serve` of a tiny DeepSeek-V4.1 checkpoint with a vision
tower (../shared/goldens/deepseek_v41_vision/v41vis_b_engram: its own toy tokenizer, vocabulary
320, image_token_id 319, small image knobs so that spans are 47-64 tokens; weights written at test
time by `synthetic_checkpoint`). Counting: /tokenize and /v1/messages/count_tokens count each image
as its real span n_h (n_w + 1) + 2 (the goldens' plans), through raw requests of the openai and
anthropic SDKs. Bad input: every case gets its 400 code before any stream byte, and the server
stays healthy. Running: chat, Responses and Anthropic requests with images answer; greedy answers
are deterministic and streaming equals non-streaming; the same image in a later request hits the
prefix cache through its span and is not encoded again, another image with the same token ids
shares no block at or after its span. https image URLs: served by a local TLS server with a
certificate made at test time (the openssl CLI), trusted through SSL_CERT_FILE in the server's
environment; the same answer as the image as a data: URI, the domain list still applies, and a
server that does not trust the certificate refuses the fetch. Skips when ../shared is absent (a
user's clone)."""

import base64
import http.server
import io
import json
import shutil
import ssl
import subprocess
import threading
import time

import anthropic
import httpx
import openai
import pytest

from conftest import REPO, Server
from test_deepseek import synthetic_checkpoint
from test_tools_count_tokens import count_cli
from test_tools_smoke import smoke

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
def tls_cert(tmp_path_factory):
    """(cert, key): a self-signed certificate for 127.0.0.1 and localhost, made now."""
    d = tmp_path_factory.mktemp("tls")
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command (Debian package openssl) makes the test certificate"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem"), "-days", "2", "-subj", "/CN=deepinfer test",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


@pytest.fixture(scope="module")
def https_media_server(tls_cert):
    """The goldens' images over https on 127.0.0.1 (an allowed media domain), with `tls_cert`."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls_cert)
    # The handshake runs in accept(); one that fails (an untrusting client) drops that connection.
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


SERVE_ARGS = ["--threads", "2", "--allowed-local-media-path", str(IMAGES),
              "--allowed-media-domains", "127.0.0.1", "--limit-images-per-request", "3",
              "--max-image-pixels", "4000000", "--media-fetch-timeout", "5"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tls_cert):
    """Trusts `tls_cert` (SSL_CERT_FILE), besides the system's CAs."""
    d = tmp_path_factory.mktemp("v41vis_b")
    for f in ["config.json", "weights.json", "tokenizer.json"]:
        shutil.copy(CASE / f, d / f)
    synthetic_checkpoint(d, d)
    s = Server(d, NAME, SERVE_ARGS, env={"SSL_CERT_FILE": str(tls_cert[0])})
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
] if CASE.is_dir() else []


@pytest.mark.parametrize("code,parts", BAD, ids=[f"{i}-{c}" for i, (c, _) in enumerate(BAD)])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_image_inputs_get_their_400_and_the_server_stays_healthy(server, code, parts, stream):
    error = error_of(server, chat_with(*parts, stream=stream))
    assert error["code"] == code, error
    if code != "too_many_images":
        assert error["param"] == "messages[0].content[1]", error
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_fetch_errors_over_http(server, media_server):
    assert error_of(server, chat_with(image_part(f"{media_server}/missing.png")))["code"] == \
        "image_fetch_failed"
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=120,
                   json={"model": NAME, "max_tokens": 4,
                         **chat_with(image_part(f"{media_server}/p01_1x1.png"))})
    assert r.status_code == 200, r.text


def greedy_chat(s, part):
    """(answer, usage) of a greedy chat request with one image part."""
    c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    r = c.chat.completions.create(model=NAME, max_tokens=4, temperature=0,
                                  messages=chat_with(part)["messages"])
    return r.choices[0].message.content, r.usage


def test_https_images_are_fetched_under_the_same_policy(server, https_media_server):
    url = f"{https_media_server}/p07_gray_300x180.png"
    data = data_uri("p07_gray_300x180.png")
    assert tokenize(server, [image_part(url)])["count"] == \
        tokenize(server, [image_part(data)])["count"]
    fetched, fetched_usage = greedy_chat(server, image_part(url))
    sent, sent_usage = greedy_chat(server, image_part(data))
    assert fetched == sent
    assert (fetched_usage.prompt_tokens, fetched_usage.completion_tokens) == \
        (sent_usage.prompt_tokens, sent_usage.completion_tokens)
    # The allow-list is by host name: localhost is the same server, but not an allowed domain.
    other = https_media_server.replace("127.0.0.1", "localhost")
    error = error_of(server, chat_with(image_part(f"{other}/p07_gray_300x180.png")))
    assert error["code"] == "image_url_not_allowed", error
    error = error_of(server, chat_with(image_part(f"{https_media_server}/missing.png")))
    assert error["code"] == "image_fetch_failed" and "404" in error["message"], error
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_an_untrusted_certificate_is_refused(server, https_media_server):
    """A server started without SSL_CERT_FILE trusts only the system's CAs, which never signed a
    certificate made a moment ago."""
    s = Server(server.model_dir, NAME, SERVE_ARGS)
    try:
        error = error_of(s, chat_with(image_part(f"{https_media_server}/p01_1x1.png")))
        assert error["code"] == "image_fetch_failed", error
        assert "certificate could not be verified" in error["message"], error
        assert error["param"] == "messages[0].content[1]", error
        assert httpx.get(s.base_url + "/health", timeout=10).status_code == 200
        assert s.alive()
    finally:
        s.stop()


def test_every_api_runs_images(server):
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    r = c.responses.create(model=NAME, max_output_tokens=4, temperature=0, input=[
        {"role": "user", "content": [
            {"type": "input_text", "text": "Two images:"},
            {"type": "input_image", "image_url": data_uri("p07_gray_300x180.png")},
            {"type": "input_image", "image_url": data_uri("p01_1x1.png")}]}])
    assert r.status == "completed" or r.status == "incomplete", r
    assert r.usage.input_tokens > span_of("p07_gray_300x180.png")
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=NAME, max_output_tokens=4, input=[
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-123"}]}])
    assert e.value.body["code"] == "unsupported_value"
    a = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    content = [anthropic_image("p01_1x1.png"), {"type": "text", "text": "What is it?"}]
    greedy = {"temperature": 0}  # the SDK has no sampling parameters; the server reads them
    m = a.messages.create(model=NAME, max_tokens=4, extra_body=greedy,
                          messages=[{"role": "user", "content": content}])
    assert m.usage.output_tokens >= 1
    with a.messages.stream(model=NAME, max_tokens=4, extra_body=greedy,
                           messages=[{"role": "user", "content": content}]) as st:
        streamed = st.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in m.content]
    # Text still works after all of the above.
    ok = c.chat.completions.create(model=NAME, max_tokens=4, temperature=0,
                                   messages=[{"role": "user", "content": "Hi"}])
    assert ok.usage.completion_tokens >= 1


def metric(s, name):
    text = httpx.get(s.base_url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def png_uri(color):
    """A 300x180 PNG of one colour with a diagonal line, as a data: URI (two colours: two
    images of the same size, so the same span and token ids, and different content)."""
    from PIL import Image, ImageDraw  # Pillow is in the test venv (tests/requirements)
    im = Image.new("RGB", (300, 180), color)
    ImageDraw.Draw(im).line((0, 0, 299, 179), fill=(255, 255, 255), width=5)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_the_same_image_hits_the_caches_and_another_shares_nothing_after_it(server):
    """Greedy chat with an image twice: the same answer, the second served from the prefix cache
    through the span (cached tokens past the image) and not encoded again; the same question
    with another image of the same size (the same token ids) finds only the blocks before it."""
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    question = "Describe the picture in a few words, please, with care and detail. " * 3
    red, blue = png_uri((200, 30, 30)), png_uri((30, 30, 200))

    def content(uri):
        return [{"type": "text", "text": question}, image_part(uri),
                {"type": "text", "text": "Thanks."}]

    def ask(uri, stream=False):
        messages = [{"role": "user", "content": content(uri)}]
        if stream:
            chunks = list(c.chat.completions.create(
                model=NAME, max_tokens=8, temperature=0, messages=messages, stream=True,
                stream_options={"include_usage": True}))
            return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices), \
                chunks[-1].usage
        r = c.chat.completions.create(model=NAME, max_tokens=8, temperature=0, messages=messages)
        return r.choices[0].message.content, r.usage

    encoded = metric(server, "deepinfer_images_encoded_total")
    first, u1 = ask(red)
    assert metric(server, "deepinfer_images_encoded_total") == encoded + 1
    second, u2 = ask(red, stream=True)
    assert second == first
    # Everything but the block holding the last prompt token comes from the cache (16-token
    # blocks), the image's span included.
    assert u2.prompt_tokens_details.cached_tokens >= u2.prompt_tokens - 16, u2
    assert metric(server, "deepinfer_images_encoded_total") == encoded + 1  # not encoded again
    # The same token ids with the other image: only whole blocks before the span may be cached.
    text_before = tokenize(server, [{"type": "text", "text": question}, image_part(blue)])
    span = max(runs_of_image_tokens(text_before["tokens"]))
    image_start = text_before["count"] - span
    third, u3 = ask(blue)
    assert u3.prompt_tokens == u1.prompt_tokens
    assert u3.prompt_tokens_details.cached_tokens <= image_start, (u3, image_start)
    assert metric(server, "deepinfer_images_encoded_total") == encoded + 2


def test_smoke_sends_an_image_to_a_vision_model(server):
    result = smoke(server.base_url, "--json")
    report = json.loads(result.stdout)
    image = [c for c in report["checks"] if c["name"] == "image"][0]
    assert image["ok"] and "answered" in image["detail"], image


def test_a_prefix_checkpoint_carries_its_image_and_serves_only_that_image(server, tmp_path):
    """A prompt with an image is checkpointed with the image's content hash (file version 2); a
    server restarted on the folder restores it at start and answers the same image hot (its span
    from the checkpoint: nothing encoded) with the same tokens, while the same token ids with
    another image reuse nothing past the image."""
    question = "Look at this picture, please, and say what you see in it. " * 3
    red, blue = png_uri((200, 30, 30)), png_uri((30, 30, 200))
    args = ["--threads", "2", "--prefix-checkpoint-dir", str(tmp_path), "--checkpoint-min-tokens",
            "16"]

    def ask(s, uri):
        c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0)
        r = c.chat.completions.create(model=NAME, max_tokens=8, temperature=0, messages=[
            {"role": "user", "content": [{"type": "text", "text": question}, image_part(uri),
                                         {"type": "text", "text": "Thanks."}]}])
        return r.choices[0].message.content, r.usage

    first = Server(server.model_dir, NAME, args)
    try:
        cold, u1 = ask(first, red)
        deadline = time.monotonic() + 30
        while metric(first, "deepinfer_prefix_checkpoint_saved_total") < 1:
            assert time.monotonic() < deadline, first.logs()
            time.sleep(0.05)
    finally:
        first.stop()
    (file,) = [p for p in tmp_path.iterdir() if p.name.endswith(".dipc")]
    raw = file.read_bytes()
    header = json.loads(raw[12:12 + int.from_bytes(raw[8:12], "little")])
    assert header["version"] == 2 and len(header["images"]) == 1, header
    assert header["images"][0]["length"] == span_len(tokenize(server, [image_part(red)]))

    second = Server(server.model_dir, NAME, args)
    try:
        hot, u2 = ask(second, red)
        assert hot == cold
        assert u2.prompt_tokens == u1.prompt_tokens
        assert u2.prompt_tokens_details.cached_tokens >= u2.prompt_tokens - 16, u2
        assert metric(second, "deepinfer_images_encoded_total") == 0  # the span was restored
        before = tokenize(server, [{"type": "text", "text": question}, image_part(blue)])
        image_start = before["count"] - max(runs_of_image_tokens(before["tokens"]))
        _, u3 = ask(second, blue)
        assert u3.prompt_tokens == u1.prompt_tokens
        assert u3.prompt_tokens_details.cached_tokens <= image_start, (u3, image_start)
        assert metric(second, "deepinfer_images_encoded_total") == 1
        assert second.alive()
    finally:
        second.stop()


def span_len(tokenized):
    return max(runs_of_image_tokens(tokenized["tokens"]))
