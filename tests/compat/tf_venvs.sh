#!/bin/sh
# Create (or reuse) one cached virtualenv per transformers version of the compat tier.
# Usage: tests/compat/tf_venvs.sh [VERSION ...]   (default: every version in tests/compat/versions.txt)
# A venv is reused when its stamp file names the same torch and transformers; delete the folder to rebuild.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ROPECTL_COMPAT_CACHE:-$HOME/.cache/ropectl-compat}
TORCH=${TORCH:-torch==2.13.0}
PYTHON=${PYTHON:-python3}
VERSIONS=${*:-$(grep -v '^#' "$HERE/versions.txt")}
mkdir -p "$ROOT"
. "$HERE/installer.sh"
for v in $VERSIONS; do
    venv="$ROOT/tf-$v"
    stamp="$TORCH transformers==$v"
    if [ -f "$venv/.ropectl-stamp" ] && [ "$(cat "$venv/.ropectl-stamp")" = "$stamp" ]; then
        echo "tf-$v: cached"
        continue
    fi
    echo "tf-$v: creating"
    mkvenv "$venv"
    install "$venv" "$TORCH"
    install "$venv" "transformers==$v" numpy safetensors
    echo "$stamp" > "$venv/.ropectl-stamp"
done
