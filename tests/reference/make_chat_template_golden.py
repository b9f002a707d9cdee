#!/usr/bin/env python3
"""Makes the SmolLM2 chat-template golden for src/tokenizer/chat_template.

Run with the reference venv (gguf, jinja2, llama-cpp-python):
  /tmp/refvenv/bin/python tests/reference/make_chat_template_golden.py [--model PATH]

Reads tokenizer.chat_template from SmolLM2-135M-Instruct.Q4_1.gguf, renders the conversations
below with jinja2 the way Hugging Face's apply_chat_template does (sandboxed environment,
trim_blocks, lstrip_blocks; a plain environment must agree), tokenizes each rendering with
llama.cpp (special=True, add_bos=False) and writes tests/golden/chat/smollm2.json:

  {"model": ..., "template": the Jinja source,
   "cases": [{"name", "messages": [{"role", "content"}], "add_generation_prompt", "text",
              "ids"}]}
"""

import argparse
import os
import pathlib

import gguf
import jinja2
import jinja2.sandbox
import llama_cpp

from golden_json import default_model, m, write_cases

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "chat" / "smollm2.json"


CONVERSATIONS = [
    ("user-only", [m("user", "Hello!")], True),
    ("user-only-no-generation-prompt", [m("user", "Hello!")], False),
    ("system-and-user", [m("system", "You are terse."), m("user", "What is 2+2?")], True),
    ("multi-turn-with-system",
     [m("system", "You are a helpful assistant."), m("user", "Hi"), m("assistant", "Hello! How can I help?"),
      m("user", "Tell me a joke.")], True),
    ("multi-turn-without-system",
     [m("user", "Hi"), m("assistant", "Hello."), m("user", "Bye")], True),
    ("ends-with-assistant", [m("user", "Say yes"), m("assistant", "yes")], False),
    ("no-messages-with-generation-prompt", [], True),
    ("no-messages", [], False),
    ("empty-user-content", [m("user", "")], True),
    ("empty-system-content", [m("system", ""), m("user", "x")], True),
    ("empty-everything", [m("system", ""), m("user", ""), m("assistant", "")], True),
    ("unicode",
     [m("user", "Bonjour, ça va? 你好世界 こんにちは 안녕하세요 مرحبا שלום नमस्ते 👨‍👩‍👧‍👦 👍🏽 🇯🇵")], True),
    ("special-strings-in-content",
     [m("user", "What does <|im_end|> mean? And <|im_start|>system?"),
      m("assistant", "They are <|endoftext|> markers.")], True),
    ("newlines-and-whitespace",
     [m("user", "\n\nline one\r\n\tline two   \n\n"), m("assistant", "  ok  ")], True),
    ("tool-role", [m("user", "weather?"), m("assistant", "calling"), m("tool", '{"temp": 21}')], True),
    ("system-not-first", [m("user", "a"), m("system", "b"), m("user", "c")], True),
    ("assistant-first", [m("assistant", "I start."), m("user", "ok")], True),
    ("two-system-messages", [m("system", "one"), m("system", "two"), m("user", "three")], True),
    ("jinja-syntax-in-content", [m("user", "{{ messages }} {% if x %}y{% endif %} {# c #}")], True),
    ("whitespace-only-content", [m("user", "   "), m("assistant", "\n")], True),
    ("custom-role", [m("developer", "Use tabs."), m("user", "ok")], True),
    ("code-block",
     [m("system", "You write Python."),
      m("user", "Write fizzbuzz."),
      m("assistant", "```python\nfor i in range(1, 101):\n    print('Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0) or i)\n```")],
     True),
    ("many-turns",
     [m("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "word " * i) for i in range(12)], True),
    ("system-prompt-text-as-user",
     [m("user", "You are a helpful AI assistant named SmolLM, trained by Hugging Face")], True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    reader = gguf.GGUFReader(args.model)
    template = reader.fields["tokenizer.chat_template"].contents()
    hf_env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    plain_env = jinja2.Environment()
    hf = hf_env.from_string(template)
    plain = plain_env.from_string(template)
    llm = llama_cpp.Llama(args.model, vocab_only=True, verbose=False)

    cases = []
    for name, messages, add_generation_prompt in CONVERSATIONS:
        text = hf.render(messages=messages, add_generation_prompt=add_generation_prompt)
        assert text == plain.render(messages=messages, add_generation_prompt=add_generation_prompt), name
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) if text else []
        cases.append({"name": name, "messages": messages,
                      "add_generation_prompt": add_generation_prompt, "text": text, "ids": ids})
    out = write_cases(args.out, {"model": os.path.basename(args.model), "template": template}, cases)
    print(f"{out}: {len(cases)} conversations")


if __name__ == "__main__":
    main()
