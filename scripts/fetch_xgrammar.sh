#!/usr/bin/env bash
# Fetches the pinned xgrammar source (Apache-2.0; its C++ core is the structured-output backend,
# src/constraint/) from its PyPI sdist into .deps/ and unpacks it there. Build time only: nothing
# is fetched when the server runs, and nothing of it is committed. Idempotent.
# Usage: scripts/fetch_xgrammar.sh   (prints the unpacked folder)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.2.9
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
DEST=.deps/xgrammar-$VERSION
if [ ! -f "$DEST/CMakeLists.txt" ]; then
  mkdir -p .deps
  archive=.deps/xgrammar-$VERSION.tar.gz
  if [ ! -f "$archive" ] || ! echo "$SHA256  $archive" | sha256sum -c --quiet 2>/dev/null; then
    # The sdist's address from PyPI's simple index (pip cannot download this sdist without
    # building its metadata, which needs its Python build tools).
    url=$(curl -fsSL https://pypi.org/simple/xgrammar/ |
          grep -o "https://[^\"#]*/xgrammar-$VERSION\.tar\.gz" | head -1)
    [ -n "$url" ] || { echo "fetch_xgrammar: xgrammar $VERSION not on PyPI's index" >&2; exit 1; }
    curl -fsSL --retry 3 -o "$archive.part" "$url"
    mv "$archive.part" "$archive"
  fi
  echo "$SHA256  $archive" | sha256sum -c --quiet ||
    { echo "fetch_xgrammar: $archive does not have the pinned sha256" >&2; exit 1; }
  rm -rf "$DEST.part" && mkdir -p "$DEST.part"
  tar -xzf "$archive" -C "$DEST.part" --strip-components=1
  mv "$DEST.part" "$DEST"
fi
echo "$DEST"
