# Sourced by the venv scripts (tf_venvs.sh, engine_venvs.sh): one way to create a venv and install into it.
# uv (pinned, bootstrapped once into $ROOT/uv with pip) installs from its cache by hard links: a venv with torch
# takes seconds instead of pip's minutes of unpacking, which is most of a fresh CI run's venv time. Where uv cannot
# be installed, pip does the same work, slower. PIP_FIND_LINKS (a local wheel folder, e.g. the CPU torch) is passed on.
UV_PIN=${UV_PIN:-uv==0.13.9}
UV=""
if [ -z "${ROPECTL_NO_UV:-}" ]; then
    # Built beside and renamed into place: CI runs several venv scripts at once, and none may run a half-installed uv.
    # Where another script's rename came first, that uv is used and this one's is dropped.
    if [ ! -x "$ROOT/uv/bin/uv" ]; then
        if [ -e "$ROOT/uv" ] && [ ! -x "$ROOT/uv/bin/uv" ]; then  # broken, from before this rule (a good one only
            # ever appears whole, by rename, and none can while this folder holds the name): moved aside, then removed
            mv "$ROOT/uv" "$ROOT/uv.broken.$$" 2>/dev/null && rm -rf "$ROOT/uv.broken.$$"
        fi
        _uv_tmp="$ROOT/uv.$$"
        rm -rf "$_uv_tmp"
        if { "$PYTHON" -m venv "$_uv_tmp" && "$_uv_tmp/bin/python" -m pip install -q --disable-pip-version-check \
                "$UV_PIN"; } >/dev/null 2>&1; then
            mv -T "$_uv_tmp" "$ROOT/uv" 2>/dev/null || rm -rf "$_uv_tmp"
        else
            rm -rf "$_uv_tmp"
        fi
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
        # No --compile-bytecode: compiling all of a vLLM venv (22,000 files) costs more CPU than the tiers' imports
        # save; the tests write the .pyc files of what they import, once (tests/conftest.py).
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
