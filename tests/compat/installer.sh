# Sourced by the venv scripts (tf_venvs.sh, engine_venvs.sh): one way to create a venv and install into it.
# uv (pinned, bootstrapped once into $ROOT/uv with pip) installs from its cache by hard links: a venv with torch
# takes seconds instead of pip's minutes of unpacking, which is most of a fresh CI run's venv time. Where uv cannot
# be installed, pip does the same work, slower. PIP_FIND_LINKS (a local wheel folder, e.g. the CPU torch) is passed on.
UV_PIN=${UV_PIN:-uv==0.13.9}
UV=""
if [ -z "${ROPECTL_NO_UV:-}" ]; then
    if [ ! -x "$ROOT/uv/bin/uv" ]; then
        rm -rf "$ROOT/uv"
        { "$PYTHON" -m venv "$ROOT/uv" && "$ROOT/uv/bin/python" -m pip install -q --disable-pip-version-check "$UV_PIN"; } \
            >/dev/null 2>&1 || rm -rf "$ROOT/uv"
    fi
    [ -x "$ROOT/uv/bin/uv" ] && UV="$ROOT/uv/bin/uv"
fi

# mkvenv DIR: a fresh venv at DIR (with pip where uv is absent).
mkvenv() {
    rm -rf "$1"
    if [ -n "$UV" ]; then "$UV" venv -q --python "$PYTHON" "$1"; else "$PYTHON" -m venv "$1"; fi
}

# install VENV ARGS...: pip-style install arguments into VENV.
install() {
    _venv=$1; shift
    if [ -n "$UV" ]; then
        # shellcheck disable=SC2086
        "$UV" pip install -q --python "$_venv/bin/python" ${PIP_FIND_LINKS:+--find-links $PIP_FIND_LINKS} "$@"
    else
        "$_venv/bin/python" -m pip install -q --disable-pip-version-check "$@"
    fi
}

# uninstall VENV NAMES...
uninstall() {
    _venv=$1; shift
    if [ -n "$UV" ]; then "$UV" pip uninstall -q --python "$_venv/bin/python" "$@" || true
    else "$_venv/bin/python" -m pip uninstall -q -y "$@" || true; fi
}
