"""The Debian mirror from apt's own configuration (testbed/mirror.py): both file formats."""

from __future__ import annotations

import pytest

from testbed.mirror import (AptSource, MirrorNotFound, parse_apt_sources, pick_mirror,
                            resolve_mirror, system_mirror)

DEB822 = """\
Types: deb
# http://snapshot.example.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# a comment
deb-src http://src.example.org/debian bookworm main
deb http://security.example.org/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] https://proxy.example.net/debian/ bookworm main contrib
"""


def test_deb822_stanzas():
    got = parse_apt_sources(DEB822, deb822=True)
    assert got == [AptSource("http://mirror.example.org/debian", ("bookworm", "bookworm-updates")),
                   AptSource("http://mirror.example.org/debian-security", ("bookworm-security",))]
    assert pick_mirror(got) == "http://mirror.example.org/debian"


def test_deb822_disabled_deb_src_and_continuation():
    text = ("Types: deb\nURIs: http://off.example.org/debian\nSuites: trixie\nEnabled: no\n\n"
            "Types: deb-src\nURIs: http://src.example.org/debian\nSuites: trixie\n\n"
            "Types: deb deb-src\nURIs:\n http://a.example.org/debian\n http://b.example.org/debian\n"
            "Suites: trixie\n")
    got = parse_apt_sources(text, deb822=True)
    assert [s.uri for s in got] == ["http://a.example.org/debian", "http://b.example.org/debian"]


def test_one_line_format_skips_src_security_and_options():
    got = parse_apt_sources(ONE_LINE, deb822=False)
    assert [s.uri for s in got] == ["http://security.example.org/debian-security",
                                    "https://proxy.example.net/debian/"]
    assert pick_mirror(got) == "https://proxy.example.net/debian"


def test_nothing_usable():
    assert pick_mirror(parse_apt_sources("deb cdrom:[Debian]/ bookworm main\n", False)) is None
    assert parse_apt_sources("", deb822=True) == []


def test_system_mirror_reads_an_apt_tree(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert system_mirror(tmp_path) == "http://mirror.example.org/debian"
    # sources.list comes first, as apt reads it first
    (tmp_path / "sources.list").write_text(ONE_LINE)
    assert system_mirror(tmp_path) == "https://proxy.example.net/debian"


def test_none_found_is_a_clear_error(tmp_path):
    (tmp_path / "sources.list").write_text("# empty\n")
    with pytest.raises(MirrorNotFound, match=r"no Debian mirror .*sources.list.*--mirror"):
        system_mirror(tmp_path)


def test_override_wins_and_is_checked(tmp_path):
    assert resolve_mirror("http://site.example.org/debian/", tmp_path) == \
        "http://site.example.org/debian"
    with pytest.raises(MirrorNotFound, match="not a URL"):
        resolve_mirror("site.example.org", tmp_path)


def test_this_machine_has_one():
    # the development and CI machines are Debian with apt configured
    assert system_mirror().startswith(("http://", "https://", "file:/"))
