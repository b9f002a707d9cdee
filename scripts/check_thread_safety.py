#!/usr/bin/env python3
"""Compiles every source under src/ that uses absl::Mutex with clang's thread-safety analysis.

The locking rules that comments used to describe are annotations now (ABSL_GUARDED_BY,
ABSL_EXCLUSIVE_LOCKS_REQUIRED on absl::Mutex): clang checks them at compile time, gcc (the
default build) does not. This runs `clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety`
with each file's own flags from compile_commands.json, on the files that include
absl/synchronization/mutex.h (directly or through the header of the same name), two at a time.
Run by ctest (test `thread_safety`). Exits 1 on any warning or compile error, 0 otherwise; skips
(exit 0 with a message) when clang++ is not installed.
Usage: scripts/check_thread_safety.py BUILD_DIR/compile_commands.json
"""
import concurrent.futures
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

MARKERS = ("absl/synchronization/mutex.h", "ABSL_GUARDED_BY")


def uses_mutex(path):
    candidates = [path, path.with_suffix(".h")]
    for c in candidates:
        if c.exists() and any(m in c.read_text(errors="replace") for m in MARKERS):
            return True
    return False


def clang_command(entry, clang):
    args = entry.get("arguments") or shlex.split(entry["command"])
    # Drop the launcher (ccache) if any, then the compiler itself.
    if os.path.basename(args[0]) in ("ccache", "sccache"):
        args = args[1:]
    args = args[1:]
    out = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch") or a.startswith("-fsanitize"):
            continue
        # GCC's precompiled header (cmake/deepinfer.cmake, DI_PCH), which clang cannot read:
        # the source is checked with only the headers it includes itself.
        if a == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            skip = True
            continue
        out.append(a)
    return [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
            "-Wno-unknown-warning-option"] + out


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    clang = shutil.which("clang++")
    if clang is None:
        print("thread_safety: clang++ not installed; skipped")
        return 0
    db = json.loads(pathlib.Path(sys.argv[1]).read_text())
    jobs = []
    for entry in db:
        f = pathlib.Path(entry["file"])
        if "/src/" not in f.as_posix() or not uses_mutex(f):
            continue
        jobs.append((f, entry["directory"], clang_command(entry, clang)))
    if not jobs:
        print("thread_safety: no file uses absl::Mutex")
        return 1

    def run(job):
        f, cwd, cmd = job
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        return f, r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for f, rc, err in pool.map(run, jobs):
            if rc != 0:
                failed += 1
                print(f"{f}:\n{err}")
    print(f"thread_safety: {len(jobs)} files checked, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
