"""``cosched data fetch``: download a Parallel Workloads Archive trace into a cache folder.

- Where: ``--data-dir``, else ``$COSCHED_DATA_DIR``, else ``$XDG_CACHE_HOME/coscheduler/traces``
  (``~/.cache/coscheduler/traces`` when XDG_CACHE_HOME is unset).
- What: a catalogue name (``CATALOGUE``; the archive's file name works too) or any http(s)
  URL. The file keeps the name the URL ends with.
- Integrity: the bytes go to ``NAME.part`` and are renamed to ``NAME`` only once whole and,
  where a sha256 is known (the catalogue, or ``--sha256``), matching it. A mismatch removes
  the download, so nothing corrupt stays in the cache. A URL without a known hash is kept and
  its computed sha256 printed as not verified.
- Resuming: an interrupted download leaves ``NAME.part``; the next fetch asks for the rest
  with an HTTP Range request (a server that ignores Range sends the whole file again, and the
  part is restarted).

urllib from the standard library: it honours a site's http(s)_proxy settings.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from ..model import InvalidInput

ENV_DIR = "COSCHED_DATA_DIR"
ARCHIVE = "https://www.cs.huji.ac.il/labs/parallel/workload"
CHUNK = 1 << 16
TIMEOUT_S = 60.0
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,200}\Z")
_SHA = re.compile(r"^[0-9a-f]{64}\Z")


class FetchError(InvalidInput):
    """A download that failed or was refused; the message names the trace and the reason."""


@dataclass(frozen=True)
class Entry:
    name: str
    url: str
    sha256: str | None      # None: not recorded here; the download is not verified
    note: str = ""


def _pwa(name: str, folder: str, file: str, sha256: str | None, note: str) -> Entry:
    return Entry(name, f"{ARCHIVE}/{folder}/{file}", sha256, note)


# The archive's cleaned logs most used in scheduling papers. The sha256s recorded are those of
# the copies bundled in coscheduler/data/swf (taken from the archive unchanged); the others
# are not recorded here, and a fetch of them says so.
CATALOGUE: dict[str, Entry] = {e.name: e for e in (
    _pwa("ctc-sp2", "l_ctc_sp2", "CTC-SP2-1996-3.1-cln.swf.gz",
         "aa3474a82a3f99e1f0d74f84d1f9473767022b99bcbe3a8ff1f01ab66a3f6ba6",
         "Cornell Theory Center IBM SP2, 1996-97 (bundled)"),
    _pwa("hpc2n", "l_hpc2n", "HPC2N-2002-2.2-cln.swf.gz",
         "2fc3500bc59247d1a3d33f30d04aaaef5ed7638d773a667933672e5ec4d48cdf",
         "HPC2N Seth Linux cluster, 2002-06 (bundled)"),
    _pwa("sdsc-sp2", "l_sdsc_sp2", "SDSC-SP2-1998-4.2-cln.swf.gz", None,
         "San Diego Supercomputer Center IBM SP2, 1998-2000"),
    _pwa("sdsc-blue", "l_sdsc_blue", "SDSC-BLUE-2000-4.2-cln.swf.gz", None,
         "SDSC Blue Horizon, 2000-03"),
    _pwa("kth-sp2", "l_kth_sp2", "KTH-SP2-1996-2.1-cln.swf.gz", None,
         "Swedish Royal Institute of Technology IBM SP2, 1996-97"),
    _pwa("llnl-thunder", "l_llnl_thunder", "LLNL-Thunder-2007-1.1-cln.swf.gz", None,
         "Lawrence Livermore Thunder, 2007"),
    _pwa("anl-intrepid", "l_anl_int", "ANL-Intrepid-2009-1.swf.gz", None,
         "Argonne Intrepid Blue Gene/P, 2009"),
    _pwa("ricc", "l_ricc", "RICC-2010-2.swf.gz", None,
         "RIKEN Integrated Cluster of Clusters, 2010"),
)}


def default_dir(env: dict[str, str] | None = None) -> Path:
    """``$COSCHED_DATA_DIR``, else the XDG cache folder's ``coscheduler/traces``."""
    env = os.environ if env is None else env
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "coscheduler" / "traces"


def resolve(what: str, catalogue: dict[str, Entry] = CATALOGUE,
            sha256: str | None = None) -> Entry:
    """A catalogue name, an archive file name or an http(s) URL -> the entry to fetch."""
    text = what.strip()
    if sha256 is not None and not _SHA.match(sha256.lower()):
        raise FetchError(f"--sha256 {sha256!r}: not 64 hexadecimal digits")
    if text.lower() in catalogue:
        e = catalogue[text.lower()]
        return Entry(e.name, e.url, sha256.lower() if sha256 else e.sha256, e.note)
    for e in catalogue.values():
        if text == file_name(e.url):
            return Entry(e.name, e.url, sha256.lower() if sha256 else e.sha256, e.note)
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise FetchError(f"{text!r}: only http:// and https:// URLs can be fetched")
        name = file_name(text)
        if not _SAFE_NAME.match(name):
            raise FetchError(f"{text!r}: the URL does not end with a usable file name")
        known = next((e for e in catalogue.values() if e.url == text), None)
        digest = sha256.lower() if sha256 else (known.sha256 if known else None)
        return Entry(name, text, digest)
    raise FetchError(f"unknown trace {what!r}: give a URL or one of "
                     f"{', '.join(sorted(catalogue))} (cosched data list)")


def file_name(url: str) -> str:
    return urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class Fetched:
    path: Path
    sha256: str
    verified: bool
    resumed_from: int       # bytes already there from an earlier, interrupted attempt
    downloaded: int         # bytes received this time
    cached: bool = False    # already complete in the cache; nothing downloaded


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(entry: Entry, data_dir: Path, *, timeout: float = TIMEOUT_S,
          say: Callable[[str], None] = lambda _m: None) -> Fetched:
    """Download ``entry`` into ``data_dir`` (resuming a ``.part``), check it, rename it."""
    name = file_name(entry.url)
    if not _SAFE_NAME.match(name):
        raise FetchError(f"{entry.url!r}: the URL does not end with a usable file name")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot make the data folder {data_dir}: {exc.strerror or exc}") from None
    target, part = data_dir / name, data_dir / f"{name}.part"
    if target.is_file():
        digest = _sha256_of(target)
        if entry.sha256 is None or digest == entry.sha256:
            return Fetched(target, digest, entry.sha256 is not None, 0, 0, cached=True)
        say(f"{target}: sha256 {digest} differs from the recorded {entry.sha256}; fetching again")
        target.unlink()

    have = part.stat().st_size if part.is_file() else 0
    req = urllib.request.Request(entry.url, headers={"User-Agent": "coscheduler-data-fetch"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:        # the part already holds everything the server has
            resp = None
        else:
            raise FetchError(f"{entry.url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise FetchError(f"{entry.url}: cannot connect ({reason})") from None

    got = 0
    if resp is not None:
        with resp:
            resumed = have and resp.status == 206
            if have and not resumed:
                say(f"{entry.url}: the server ignored the Range request; starting again")
                have = 0
            length = resp.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            try:
                with open(part, "ab" if resumed else "wb") as out:
                    while True:
                        block = resp.read(CHUNK)
                        if not block:
                            break
                        out.write(block)
                        got += len(block)
                    out.flush()
                    os.fsync(out.fileno())   # whole on disk before it is renamed a trace
            except (OSError, http.client.HTTPException) as exc:
                raise FetchError(f"{entry.url}: interrupted after {have + got} bytes "
                                 f"({exc}); run the same command again to resume") from None
            if expected is not None and got < expected:
                raise FetchError(f"{entry.url}: incomplete, {have + got} of {have + expected} "
                                 "bytes; run the same command again to resume")

    digest = _sha256_of(part)
    if entry.sha256 is not None and digest != entry.sha256:
        part.unlink()
        raise FetchError(f"{entry.url}: sha256 {digest} does not match the recorded "
                         f"{entry.sha256}; the download was removed, nothing was kept")
    part.replace(target)
    return Fetched(target, digest, entry.sha256 is not None, have, got)


def cached(data_dir: Path) -> list[Path]:
    """Complete traces in the cache folder (not ``.part`` files)."""
    if not data_dir.is_dir():
        return []
    return sorted(p for p in data_dir.iterdir() if p.is_file() and not p.name.endswith(".part"))
