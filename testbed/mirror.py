"""The Debian mirror this machine's apt already uses, for debootstrap and image builds.

Sites build behind their own mirror or proxy, so no mirror host is written in the code: the
mirror is read from apt's own configuration, and ``--mirror`` overrides it.

- deb822 files (``/etc/apt/sources.list.d/*.sources``): stanzas separated by blank lines,
  with ``Types:``, ``URIs:``, ``Suites:`` and optionally ``Enabled: no``.
- one-line files (``/etc/apt/sources.list``, ``sources.list.d/*.list``):
  ``deb [options] URI SUITE COMPONENT...``.

The mirror is the first ``deb`` (not ``deb-src``) source whose suites are not all security
suites (``bookworm-security`` lives on another archive, which debootstrap cannot use).

``parse_apt_sources`` is pure (text in, sources out); ``system_mirror`` reads the files.
``python -m testbed.mirror`` prints the mirror (used by shell scripts).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

APT_DIR = Path("/etc/apt")


class MirrorNotFound(ValueError):
    """No Debian mirror in apt's configuration; the message says where it looked."""


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]


def _deb822(text: str) -> list[AptSource]:
    out: list[AptSource] = []
    for stanza in _stanzas(text):
        if stanza.get("enabled", "yes").strip().lower() == "no":
            continue
        if "deb" not in stanza.get("types", "").split():
            continue
        suites = tuple(stanza.get("suites", "").split())
        out.extend(AptSource(uri, suites) for uri in stanza.get("uris", "").split())
    return out


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    key = None
    for raw in text.splitlines() + [""]:
        if raw.lstrip().startswith("#"):
            continue
        if not raw.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
            continue
        if raw[0] in " \t" and key is not None:          # a continuation line
            cur[key] += " " + raw.strip()
            continue
        name, sep, value = raw.partition(":")
        if sep:
            key = name.strip().lower()
            cur[key] = value.strip()
    return stanzas


def _one_line(text: str) -> list[AptSource]:
    out: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "[" in line:                                    # deb [arch=amd64 signed-by=...] URI ...
            head, _, rest = line.partition("[")
            line = head + rest.partition("]")[2]
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "deb":
            out.append(AptSource(fields[1], (fields[2],)))
    return out


def parse_apt_sources(text: str, deb822: bool) -> list[AptSource]:
    """The ``deb`` sources of one apt file (deb822 ``.sources`` or one-line format)."""
    return _deb822(text) if deb822 else _one_line(text)


def pick_mirror(sources: list[AptSource]) -> str | None:
    """The first source that is not only a security archive; None if there is none."""
    for s in sources:
        if not s.uri.startswith(("http://", "https://", "file:/", "ftp://")):
            continue                                       # cdrom:, mirror+file: and the like
        if s.suites and all(x.endswith(("-security", "/updates")) for x in s.suites):
            continue
        if s.uri.rstrip("/").endswith("-security"):
            continue
        return s.uri.rstrip("/")
    return None


def apt_files(apt_dir: Path = APT_DIR) -> list[Path]:
    """The files apt reads, in its order: sources.list, then sources.list.d sorted."""
    files = [apt_dir / "sources.list"]
    d = apt_dir / "sources.list.d"
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.suffix in (".sources", ".list"))
    return [p for p in files if p.is_file()]


def system_mirror(apt_dir: Path = APT_DIR) -> str:
    """The mirror of this machine's apt configuration, or ``MirrorNotFound``."""
    sources: list[AptSource] = []
    files = apt_files(apt_dir)
    for p in files:
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        sources += parse_apt_sources(text, deb822=p.suffix == ".sources")
    uri = pick_mirror(sources)
    if uri is None:
        looked = ", ".join(str(p) for p in files) or f"no file under {apt_dir}"
        raise MirrorNotFound(f"no Debian mirror in apt's configuration (looked in {looked}); "
                             "give one with --mirror URL")
    return uri


def resolve_mirror(override: str | None, apt_dir: Path = APT_DIR) -> str:
    """``--mirror`` when given, else the machine's own."""
    if override:
        if not override.startswith(("http://", "https://", "file:/", "ftp://")):
            raise MirrorNotFound(f"--mirror {override!r}: not a URL (http://HOST/debian)")
        return override.rstrip("/")
    return system_mirror(apt_dir)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        print(resolve_mirror(args[0] if args else None))
    except MirrorNotFound as exc:
        print(f"mirror: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
