#!/usr/bin/env python3
"""Makes the continued-final-message golden for tokenizer::RenderChat (assistant prefill).

Run with the reference venv (gguf, transformers):
  .venv-reference/bin/python tests/reference/make_chat_continue_golden.py [--model PATH]

Reads tokenizer.chat_template from SmolLM2-135M-Instruct.Q4_1.gguf and renders each
conversation below with transformers' render_jinja_template(continue_final_message=True,
add_generation_prompt=False) (what apply_chat_template and vLLM's chat `continue_final_message`
call), writing tests/golden/chat/smollm2_continue.json:

  {"model": ..., "transformers": version, "template": the Jinja source,
   "cases": [{"name", "messages": [{"role", "content"}], "text"}]}
"""

import argparse
import os
import pathlib

import gguf
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

from golden_json import default_model, m, write_cases

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "chat" / "smollm2_continue.json"


CONVERSATIONS = [
    ("assistant-prefill", [m("user", "What is the capital of France?"),
                           m("assistant", "The capital of France is")]),
    ("assistant-prefill-trailing-space", [m("user", "Count."), m("assistant", "One, two, ")]),
    ("assistant-prefill-with-system",
     [m("system", "You are terse."), m("user", "Hi"), m("assistant", "Hello"),
      m("user", "Again"), m("assistant", "Hel")]),
    ("empty-assistant", [m("user", "Hi"), m("assistant", "")]),
    ("whitespace-assistant", [m("user", "Hi"), m("assistant", "  \n")]),
    ("continue-user", [m("user", "Once upon a")]),
    ("special-strings", [m("user", "x"), m("assistant", "a <|im_end|> b")]),
    ("multi-line", [m("user", "code"), m("assistant", "```python\ndef f():\n    ")]),
    ("tag-text-in-content",
     [m("user", "x"), m("assistant", "CONTINUE_FINAL_MESSAGE_TAG and more")]),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    reader = gguf.GGUFReader(args.model)
    template = reader.fields["tokenizer.chat_template"].contents()
    cases = []
    for name, messages in CONVERSATIONS:
        rendered, _ = render_jinja_template(
            conversations=[[dict(x) for x in messages]], chat_template=template,
            continue_final_message=True, add_generation_prompt=False)
        cases.append({"name": name, "messages": messages, "text": rendered[0]})
    out = write_cases(args.out, {"model": os.path.basename(args.model), "transformers": transformers.__version__,
                             "template": template}, cases)
    print(f"{out}: {len(cases)} conversations")


if __name__ == "__main__":
    main()
