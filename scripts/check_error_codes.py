#!/usr/bin/env python3
"""Checks the stable error codes against their registry, src/util/error_codes.h.

1. No error anywhere under src/ (every layer: each folder of src/, read from the directory
   listing; tests, testing/ folders and the registry itself are left out) is raised with a bare
   string code: every MakeError / *Error / http::RequestError call names a util::codes constant,
   and a constructor's canonical status agrees with the one the registry gives (the codes in
   SEVERAL_STATUSES are raised with more than one).
2. docs/api.md's and docs/gateway.md's "## Errors" tables list exactly the registered codes a
   client of serve (resp. the gateway) can receive, each in the row of its HTTP status.
Run by ctest (test `error_codes`); prints one line per problem and exits 1 when there is any.
Usage: scripts/check_error_codes.py [REPO_ROOT]
"""
import pathlib
import re
import sys

CTOR_STATUS = {
    "InvalidArgumentError": "kInvalidArgument", "NotFoundError": "kNotFound",
    "UnavailableError": "kUnavailable", "InternalError": "kInternal",
    "DataLossError": "kDataLoss", "UnimplementedError": "kUnimplemented",
    "ResourceExhaustedError": "kResourceExhausted",
}
ENTRY = re.compile(
    r'inline constexpr ErrorCode (k\w+)\{\s*"([a-z_0-9]+)",\s*absl::StatusCode::(k\w+),\s*(\d+),'
    r'\s*([^,]+),', re.S)
# Codes genuinely raised with more than one canonical status: io_error is Internal for a file and
# Unavailable for a socket (the HTTP status then follows the canonical code). Prefer making call
# sites agree; bad_header and bad_metadata, once split between DataLoss and InvalidArgument, now
# agree on their registered status (both map to the same exit code, 2).
SEVERAL_STATUSES = {"io_error"}
CTOR_CALL = re.compile(r"\b(" + "|".join(CTOR_STATUS) + r")\(\s*([^,()]*)")
MAKE_CALL = re.compile(r"\bMakeError\(\s*absl::StatusCode::(k\w+),\s*([^,()]*)")
REQUEST_CALL = re.compile(r"\bRequestError\(((?:[^,()]|\([^()]*\))*),\s*([^,()]*)")
CONSTANT = re.compile(r"^(?:util::)?codes::(k\w+)$")


def registry(root):
    text = (root / "src/util/error_codes.h").read_text()
    entries = {}
    for const, name, status, http, surfaces in ENTRY.findall(text):
        entries[const] = {"name": name, "status": status, "http": int(http),
                          "serve": "kServe" in surfaces, "gateway": "kGateway" in surfaces}
    return entries


def layers(root):
    """Every folder directly under src/ (util, model, engine, ...): all of them are checked."""
    return sorted(d.name for d in (root / "src").iterdir() if d.is_dir())


def check_sources(root, entries, problems):
    for layer in layers(root):
        for f in sorted((root / "src" / layer).rglob("*")):
            if f.suffix not in (".cc", ".h") or f.name.endswith("_test.cc"):
                continue
            if "testing" in f.parts or f.name.startswith("error_codes"):
                continue
            text = f.read_text()
            rel = f.relative_to(root)
            calls = [(m.start(), m.group(2).strip(), CTOR_STATUS[m.group(1)])
                     for m in CTOR_CALL.finditer(text)]
            calls += [(m.start(), m.group(2).strip(), m.group(1)) for m in MAKE_CALL.finditer(text)]
            calls += [(m.start(), m.group(2).strip(), "kInvalidArgument")
                      for m in REQUEST_CALL.finditer(text)]
            for pos, arg, status in calls:
                line = text.count("\n", 0, pos) + 1
                if arg.startswith('"'):
                    problems.append(f"{rel}:{line}: error code {arg} is a bare string; name a "
                                    "util::codes constant (register it in src/util/error_codes.h)")
                    continue
                m = CONSTANT.match(arg)
                if not m:
                    continue  # a variable passed through (checked where it was made)
                entry = entries.get(m.group(1))
                if entry is None:
                    problems.append(f"{rel}:{line}: {arg} is not in src/util/error_codes.h")
                elif entry["status"] != status and entry["name"] not in SEVERAL_STATUSES:
                    problems.append(f"{rel}:{line}: {entry['name']} raised as {status}, "
                                    f"registered as {entry['status']}")


def docs_table(path):
    """{code: http status} of the table under "## Errors" in `path`."""
    text = path.read_text()
    start = text.find("\n## Errors")
    if start < 0:
        return None
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    table = {}
    column = None
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if column is None:
            heads = [c.lower() for c in cells]
            column = next((i for i, h in enumerate(heads) if h.startswith("code")), None)
            continue
        if len(cells) <= column or not re.match(r"^\d{3}", cells[0]):
            continue
        http = int(cells[0][:3])
        for code in re.findall(r"`([a-z0-9_]+)`", cells[column]):
            table.setdefault(code, http)
    return table


def check_docs(root, entries, problems):
    by_name = {e["name"]: e for e in entries.values()}
    for doc, surface in (("docs/api.md", "serve"), ("docs/gateway.md", "gateway")):
        table = docs_table(root / doc)
        if table is None:
            problems.append(f"{doc}: no '## Errors' section")
            continue
        for name, entry in sorted(by_name.items()):
            if entry[surface] and name not in table:
                problems.append(f"{doc}: the Errors table lacks {name} ({entry['http']})")
        for name, http in sorted(table.items()):
            entry = by_name.get(name)
            if entry is None or not entry[surface]:
                problems.append(f"{doc}: {name} is not a registered code of {surface}")
                continue
            if http != entry["http"]:
                problems.append(f"{doc}: {name} is listed under {http}, registered as "
                                f"{entry['http']}")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    entries = registry(root)
    problems = []
    if len(entries) < 10:
        problems.append("src/util/error_codes.h: could not read the registry")
    names = [e["name"] for e in entries.values()]
    if len(names) != len(set(names)):
        problems.append("src/util/error_codes.h: a code is registered twice")
    check_sources(root, entries, problems)
    check_docs(root, entries, problems)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
