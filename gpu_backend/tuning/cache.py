"""The measurement cache of the auto-configuration and the dtype probe: one JSON file,
``autoconfig.json`` in the model cache or the file ``$SPECTR_GBV_AUTOCONFIG`` names.

``{"version": CACHE_VERSION, "entries": {key: value}}``: ``autoconfig.configure`` and
``dtype_probe`` file their measurements under their own keys; a file of another version is
read as empty (measured again).  A path that is a folder, or a file that is not such a cache,
is refused (``check_cache_path``) and never overwritten.
"""

from __future__ import annotations

import json

# 2: verifier costs measured before the K-SEQ solver and MDBV-KSEQ host-plan changes
# are stale; the dtype probe (dtype_probe.py) shares this file
# 3: costs carry ``refeed_accepted`` (llama.cpp's K > 1 re-feed, timed over more tokens)
CACHE_VERSION = 3


def cache_path():
    """``$SPECTR_GBV_AUTOCONFIG`` if set, else ``autoconfig.json`` in the model cache
    (``weights.cache_dir``)."""
    import os
    from pathlib import Path

    from spectr_gbv.gpu_backend.models.weights import cache_dir

    override = os.environ.get("SPECTR_GBV_AUTOCONFIG")
    return Path(override).expanduser() if override else cache_dir() / "autoconfig.json"


def check_cache_path():
    """The cache file's path, refused early when it cannot be a file.

    Raises:
        ValueError: the path is a directory, or an existing file that is not this cache (it is
            never overwritten).
    """
    path = cache_path()
    if path.is_dir():
        raise ValueError(f"the auto-configuration cache {path} is a directory (SPECTR_GBV_AUTOCONFIG names a file)")
    if path.is_file() and not _is_cache_file(path):
        raise ValueError(f"{path} exists and is not an auto-configuration cache; it is not overwritten "
                         f"(point SPECTR_GBV_AUTOCONFIG at another file)")
    return path


def _is_cache_file(path) -> bool:
    """An empty or unreadable file, or JSON with a "version" field: ours to (re)write."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if not text.strip():
        return True
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and "version" in data


def read_cache() -> dict:
    """The cache's data, or {} when it is missing, unreadable or of another version."""
    path = cache_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("entries"), dict):
        return {}
    return data


def write_cache(data: dict, log) -> None:
    """Write the cache, merged with what another process wrote since ``data`` was read (under
    the file's lock, ``<path>.lock``); a path that cannot be written is reported and skipped
    (the measurement is still used for this run)."""
    from spectr_gbv.gpu_backend.models.weights import atomic_write_text

    from filelock import FileLock

    data["version"] = CACHE_VERSION
    try:
        path = check_cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        # another process may have filed its own measurements since ``data`` was read: merge
        # under the file's lock (ours win for the keys we wrote), so that neither is lost
        with FileLock(str(path) + ".lock"):
            entries = {**read_cache().get("entries", {}), **data.get("entries", {})}
            data["entries"] = entries
            atomic_write_text(path, json.dumps(data))
    except (OSError, ValueError) as err:
        log(f"auto-configuration: not cached ({err})")


def mark_stale(key: str, reason: str, log) -> bool:
    """Mark the cache entry ``key`` stale (``entry["stale"] = reason``): the next
    ``autoconfig.configure`` measures it again instead of reading it.

    Args:
        key: an entry's key (a dict entry: the costs); reason: one line, kept in the entry.
        log: receives a line when the cache cannot be written (``write_cache``).
    Returns:
        True when the entry was found and marked; False when the cache holds no such dict entry
        (nothing is written).
    """
    data = read_cache()
    entry = data.get("entries", {}).get(key)
    if not isinstance(entry, dict):
        return False
    entry["stale"] = reason
    write_cache(data, log)
    return True
