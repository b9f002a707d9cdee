"""DeepSeek-V4.1 with images, end to end through `deepinfer generate --image`: the tiny vision
checkpoints of ../shared/goldens/deepseek_v41_vision (weights written at test time from their
recipes), the image files decoded and preprocessed by the engine's own image library, the ViT,
aligner and span rows, the text model with bias_vl routing and Engram masks, greedy decoding
through the scheduler and cache: DeepSeek's reference tokens exactly. Also the refusals of
images a model or a prompt cannot take. Skips when ../shared is absent (a user's clone)."""

import json
import shutil
import subprocess

import pytest

from conftest import REPO, binary
from test_deepseek import synthetic_checkpoint

VISION = REPO.parent / "shared" / "goldens" / "deepseek_v41_vision"
TEXT = REPO.parent / "shared" / "goldens" / "deepseek_v41"

pytestmark = pytest.mark.skipif(not VISION.is_dir(),
                                reason="../shared/goldens/deepseek_v41_vision is absent (a "
                                       "user's clone has none)")


def make(root, case, tmp_path_factory):
    d = tmp_path_factory.mktemp(case)
    for f in ["config.json", "weights.json", "tokenizer.json"]:
        if (root / case / f).exists():
            shutil.copy(root / case / f, d / f)
    synthetic_checkpoint(d, d)
    return d


def generate(*args):
    return subprocess.run([str(binary()), "generate", *args], capture_output=True, text=True,
                          timeout=300)


def case_prompt(case):
    """The golden's prompt with one image token id per image, and its image files in order."""
    g = json.loads((VISION / case / "golden.json").read_text())
    images = [str((VISION / case / s["image"]).resolve()) for s in g["e2e"]["spans"]]
    return g["e2e"]["prompt_with_placeholders"], images, g["image_token_id"]


@pytest.mark.parametrize("case", ["v41vis_a", "v41vis_b_engram"])
def test_greedy_tokens_with_images_equal_deepseeks_reference(case, tmp_path_factory):
    """Two images (A: a PNG and a JPEG) or three (B: gray PNG, EXIF JPEG, wide PNG through
    solve_resize_ratio, with Engram): 16 greedy tokens equal the reference's."""
    d = make(VISION, case, tmp_path_factory)
    prompt, images, _ = case_prompt(case)
    tokens = json.loads((VISION / case / "greedy.json").read_text())["tokens"]
    args = ["--model", str(d), "--prompt-ids", ",".join(map(str, prompt)),
            "--max-tokens", str(len(tokens)), "--ignore-eos", "--threads", "2", "--print-ids"]
    for f in images:
        args += ["--image", f]
    r = generate(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ",".join(map(str, tokens)), r.stderr


def test_images_the_prompt_cannot_place_are_refused(tmp_path_factory):
    """More --image files than image token ids, or a text-only model: a coded error, exit 2."""
    d = make(VISION, "v41vis_a", tmp_path_factory)
    prompt, images, _ = case_prompt("v41vis_a")
    r = generate("--model", str(d), "--prompt-ids", ",".join(map(str, prompt)),
                 "--max-tokens", "1", "--print-ids", "--image", images[0])
    assert r.returncode == 2 and "bad_flags" in r.stderr, r.stderr
    text = make(TEXT, "v41_noengram_noqat", tmp_path_factory)
    r = generate("--model", str(text), "--prompt-ids", "0,7,9", "--max-tokens", "1",
                 "--print-ids", "--image", images[0])
    assert r.returncode == 2 and "unsupported_content" in r.stderr, r.stderr
