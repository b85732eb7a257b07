"""Hugging Face cache rules: which files a hub snapshot folder may bring along (symlinks into its blobs only)."""

from __future__ import annotations

from pathlib import Path


def is_inside(child: Path, parent: Path) -> bool:
    child, parent = Path(child).resolve(), Path(parent).resolve()
    return child == parent or parent in child.parents


CACHE_REPO_PREFIXES = ("models--", "datasets--", "spaces--")


def hf_cache_blobs(folder: Path) -> Path | None:
    """The ``blobs/`` folder of the Hugging Face cache repo whose snapshot holds ``folder``, if it is in one.

    huggingface_hub stores ``models--org--name/snapshots/<rev>/<file>`` as symlinks to ``../../blobs/<sha>``.
    """
    for path in {Path(folder).absolute(), Path(folder).resolve()}:
        for snap in (path, *path.parents):
            repo = snap.parent.parent
            if snap.parent.name == "snapshots" and repo.name.startswith(CACHE_REPO_PREFIXES) \
                    and (repo / "blobs").is_dir():
                return repo / "blobs"
    return None


def inside_checkpoint(path: Path, folder: Path) -> bool:
    """``path`` (after symlinks) lies in ``folder``, or in the blobs of the hub cache repo ``folder`` is a snapshot of."""
    if is_inside(path, folder):
        return True
    blobs = hf_cache_blobs(folder)
    return blobs is not None and is_inside(path, blobs)


def symlink_refusal(path: Path, folder: Path) -> str | None:
    """Why a side file / folder of a checkpoint is not brought along, or None when it may be.

    A symlinked file is followed only into the checkpoint folder or its hub cache blobs: a link elsewhere
    (``README.md -> ~/.ssh/id_rsa``) would copy something the checkpoint's author never shipped. Symlinked
    folders are never followed.
    """
    path = Path(path)
    if not path.is_symlink():
        return None
    if path.is_dir():
        return "symlinked folder, not followed"
    if not path.exists():
        return "broken symlink"
    return None if inside_checkpoint(path, folder) else "symlink to outside the checkpoint folder"
