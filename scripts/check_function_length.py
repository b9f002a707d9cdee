#!/usr/bin/env python3
"""Lists functions in src/ longer than a limit (default 150 lines, body braces included).

A function is a brace block opened at namespace or class scope whose header has a parameter list
(lambdas inside count toward their function). Functions that register command-line flags (their
name starts with `Add` and ends with `Flags` or `Command`, or they live in src/cli/ and are named
`Register*`) are exempt: they are lists, not logic. Strings, characters, comments and preprocessor lines are skipped.
Run by ctest (test `function_length`); prints `path:line: name is N lines` per finding and exits 1
when there is any.
Usage: scripts/check_function_length.py [REPO_ROOT] [LIMIT]
"""
import pathlib
import re
import sys

SCOPE_WORDS = re.compile(r"^\s*(?:template\s*<.*>\s*)?(namespace|class|struct|union|enum)\b")
NAME = re.compile(r"([A-Za-z_~][A-Za-z0-9_:~<>]*)\s*\(")
EXEMPT = re.compile(r"^(?:.*::)?(?:Add\w*(?:Flags|Command)|Register\w*)$")


def strip(text):
    """The text with comments, strings, character literals and preprocessor lines blanked
    (newlines kept)."""
    text = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                  text)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(first line, line count, name) of every function body in `text`."""
    code = strip(text)
    stack = []  # per open brace: "scope", "function" or "block"
    header_start = 0  # where the current statement's text begins
    found = []
    starts = []
    for i, c in enumerate(code):
        if c in ";}":
            header_start = i + 1
        if c == "{":
            header = code[header_start:i]
            kind = "block"
            if all(k == "scope" for k in stack):
                if SCOPE_WORDS.match(header) or ("(" not in header and "=" not in header):
                    kind = "scope"
                elif "(" in header and not header.strip().endswith("="):
                    kind = "function"
                    names = NAME.findall(header.split("(")[0] + "(")
                    starts.append((i, names[-1] if names else "?"))
            stack.append(kind)
            header_start = i + 1
        elif c == "}" and stack:
            kind = stack.pop()
            if kind == "function":
                begin, name = starts.pop()
                first = code.count("\n", 0, code.rfind("\n", 0, header_start_of(code, begin)) + 1) + 1
                last = code.count("\n", 0, i) + 1
                found.append((first, last - first + 1, name))
    return found


def header_start_of(code, brace):
    """The start of the declaration whose body opens at `brace`."""
    j = max(code.rfind(";", 0, brace), code.rfind("}", 0, brace), code.rfind("{", 0, brace))
    k = j + 1
    while k < brace and code[k].isspace():
        k += 1
    return k


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    problems = []
    for f in sorted((root / "src").rglob("*")):
        if f.suffix not in (".cc", ".h") or f.name.endswith("_test.cc") or "testing" in f.parts:
            continue
        for line, count, name in functions(f.read_text()):
            if count > limit and not EXEMPT.match(name):
                problems.append(f"{f.relative_to(root)}:{line}: {name} is {count} lines")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
