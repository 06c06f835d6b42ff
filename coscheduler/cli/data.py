"""``cosched data list|fetch``: the bundled traces, the catalogue and the trace cache."""

from __future__ import annotations

from pathlib import Path

import click
from ._common import echo_json


def _dir(data_dir: Path | None) -> Path:
    from ..data.fetch import default_dir

    return data_dir if data_dir is not None else default_dir()


_DATA_DIR = click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Cache folder for fetched traces [default: $COSCHED_DATA_DIR, else "
         "$XDG_CACHE_HOME/coscheduler/traces].")


@click.group()
def data() -> None:
    """Workload traces: the bundled ones, and archive traces fetched into a cache."""


@data.command("list")
@_DATA_DIR
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def list_cmd(data_dir: Path | None, as_json: bool) -> None:
    """The bundled traces, the catalogue of archive traces `fetch` knows, and the cache."""
    from ..data import SWF_TRACES, swf_dir
    from ..data.fetch import CATALOGUE, cached, file_name

    folder = _dir(data_dir)
    in_cache = {p.name: p for p in cached(folder)}
    out = {
        "bundled": [str(swf_dir() / n) for n in SWF_TRACES],
        "data_dir": str(folder),
        "catalogue": [{"name": e.name, "file": file_name(e.url), "url": e.url,
                       "sha256": e.sha256, "note": e.note,
                       "cached": str(in_cache[file_name(e.url)])
                       if file_name(e.url) in in_cache else None}
                      for e in CATALOGUE.values()],
        "cached": [str(p) for p in in_cache.values()],
    }
    if as_json:
        echo_json(out)
        return
    click.echo(f"bundled ({swf_dir()}):")
    for n in SWF_TRACES:
        click.echo(f"  {n}")
    click.echo(f"catalogue (cosched data fetch NAME; cache {folder}):")
    width = max(len(e["name"]) for e in out["catalogue"])
    for e in out["catalogue"]:
        mark = "cached" if e["cached"] else ("sha256 recorded" if e["sha256"] else
                                            "sha256 not recorded")
        click.echo(f"  {e['name'].ljust(width)}  {e['file']}  [{mark}]  {e['note']}")
    others = [p for p in out["cached"]
              if Path(p).name not in {c["file"] for c in out["catalogue"]}]
    if others:
        click.echo("also in the cache:")
        for p in others:
            click.echo(f"  {p}")


@data.command("fetch")
@click.argument("what", metavar="NAME|URL")
@_DATA_DIR
@click.option("--sha256", default=None, help="The expected sha256 (for a URL not in the "
                                             "catalogue); a mismatch keeps nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def fetch_cmd(what: str, data_dir: Path | None, sha256: str | None, as_json: bool) -> None:
    """Download an archive trace into the cache folder, check its sha256, resume a
    partial download. Prints the path (use it with cosched simulate swf)."""
    from ..data.fetch import FetchError, fetch, resolve

    folder = _dir(data_dir)
    try:
        entry = resolve(what, sha256=sha256)
        res = fetch(entry, folder, say=lambda m: click.echo(m, err=True))
    except FetchError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json({"path": str(res.path), "url": entry.url, "sha256": res.sha256,
                               "verified": res.verified, "cached": res.cached,
                               "resumed_from": res.resumed_from,
                               "downloaded": res.downloaded}, indent=None)
        return
    how = ("already in the cache" if res.cached else
           f"resumed at byte {res.resumed_from}, {res.downloaded} more" if res.resumed_from else
           f"{res.downloaded} bytes")
    click.echo(f"{res.path} ({how})", err=True)
    if res.verified:
        click.echo(f"sha256 {res.sha256} verified", err=True)
    else:
        click.echo(f"sha256 {res.sha256} (not verified: no sha256 recorded for {entry.url}; "
                   "pass --sha256 to check one)", err=True)
    click.echo(str(res.path))
