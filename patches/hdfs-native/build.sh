#!/usr/bin/env bash
# Build hdfs-native with the patches of this folder applied: a wheel in ./dist (or $1).
# Needs curl, a Rust toolchain (cargo) and network access to PyPI and crates.io; about 6
# minutes on 2 cores. Install the wheel it prints into the job's environment with
# `pip install --force-reinstall --no-deps <wheel>`.
set -euo pipefail
version=0.14.7
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:-dist}")
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v cargo >/dev/null || { echo "build.sh: cargo (a Rust toolchain) is needed" >&2; exit 2; }
url=$(curl -fsS "https://pypi.org/simple/hdfs-native/" \
  | grep -o "https://[^\"]*/hdfs_native-$version.tar.gz" | head -1)
[ -n "$url" ] || { echo "build.sh: hdfs-native $version's sdist is not on PyPI" >&2; exit 1; }
curl -fsSL "$url" | tar xz -C "$work"
cd "$work/hdfs_native-$version"
for p in "$here"/*.patch; do
  patch -p1 --forward < "$p"
done
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q maturin
"$work/venv/bin/maturin" build --release -o "$out"
ls "$out"/hdfs_native-"$version"-*.whl
