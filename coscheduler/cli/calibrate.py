"""``cosched calibrate``: measure interference on this machine and fit the simulator's model.

``cosched calibrate [--quick | --waiting | --idle | --spread] [--json] [--save FILE] [--from FILE] [--shares N]``

Runs the testbed's stage programs for real under real cgroup CPU quotas, alone and in
pairs (coscheduler/calibration/measure.py), fits the virtual backend's interference model
to what was measured (calibration/fit.py) and prints, for every measured point, the measured
slowdown beside the freshly fitted model's and beside the model the simulator uses
(``interference.CALIBRATED``), and the fit's error on pairs left out of it (leave-one-pair-
out: the rms of log(predicted / measured)). ``--from FILE`` refits saved raw figures
without measuring.
docs/calibration.md describes the method and holds the development machine's figures.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from .. import boundedjson, outputs
from ..model import InvalidInput
from ._common import echo_json


def _pct(x: float) -> str:
    return f"{100 * x:+.0f} %"


@click.command()
@click.option("--quick", is_flag=True,
              help="Four points, two rounds (about half a minute); default: 41 points, five "
                   "rounds (about 17 minutes on two cores).")
@click.option("--waiting", is_flag=True,
              help="Only the waiting hosts (disk, sleepy) beside a CPU-bound guest at 50/50 and "
                   "75/25, seven rounds (about four minutes): checks a model on a second "
                   "session.")
@click.option("--idle", is_flag=True,
              help="Hosts beside a CPU-bound guest in the idle class (cpu.idle, as the agent "
                   "places guests) and that guest beside them, with the same pairs in the "
                   "normal class, five rounds (about six minutes); fits only the idle terms.")
@click.option("--spread", is_flag=True,
              help="Probes free to run on every CPU beside CPU-bound co-runners (a host and "
                   "its guests share the host's cores), with the same pairs pinned to one CPU "
                   "for comparison, five rounds (about three minutes on two CPUs); fits only "
                   "spill.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (docs/cli-json.md).")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the raw figures (JSON) to this file.")
@click.option("--from", "from_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Fit raw figures saved earlier instead of measuring.")
@click.option("--shares", type=click.IntRange(2, 262144), default=65536, show_default=True,
              help="cpu.shares of the calibration cgroups (high: other load on the machine "
                   "must not hide what the quotas do).")
def calibrate(quick: bool, waiting: bool, idle: bool, spread: bool, as_json: bool,
              save: Path | None, from_file: Path | None, shares: int) -> None:
    """Measure how co-located real jobs slow each other under CPU quotas, and fit the
    simulator's interference model to it."""
    from ..backends.interference import CALIBRATED
    from ..calibration import fit as fitting

    if from_file is not None:
        try:
            raw = boundedjson.load_file(from_file, what="JSON")
        except (OSError, ValueError) as exc:
            raise click.ClickException(f"{from_file}: not a calibration file ({exc})") from None
        mode = f"from {from_file}"
        source = str(from_file)
    else:
        from ..calibration.measure import CalibrationUnavailable, Settings, measure

        if save is not None:   # before the measuring a --save that cannot be written loses
            try:
                outputs.check_output(save)
            except InvalidInput as exc:
                raise click.ClickException(str(exc)) from None

        if quick + waiting + idle + spread > 1:
            raise click.ClickException("--quick, --waiting, --idle and --spread: choose one")
        settings = (Settings.quick() if quick else Settings.waiting() if waiting
                    else Settings.idle() if idle else Settings.spread() if spread
                    else Settings.full())
        settings.shares = shares
        t0 = time.monotonic()

        def progress(msg: str) -> None:
            click.echo(f"[{time.monotonic() - t0:5.0f} s] {msg}", err=True)

        try:
            raw = measure(settings, progress).to_dict()
        except CalibrationUnavailable as exc:
            raise click.ClickException(f"cannot calibrate here: {exc}") from None
        mode = ("quick" if quick else "waiting" if waiting else "idle" if idle
                else "spread" if spread else "full")
        source = "this calibration's measurements"
        if save is not None:
            try:
                outputs.write_text(save, json.dumps(raw, indent=1) + "\n")
            except InvalidInput as exc:
                raise click.ClickException(str(exc)) from None
    try:
        fitting.validate(raw, source)
        # A session of idle pairs tells the idle terms; the rest stays as calibrated.
        # A session of shared-CPU pairs tells spill.
        only = ("idle_yield", "idle_penalty") if _idle_only(raw) else \
            ("spill",) if _shared(raw) else None
        fitted = fitting.fit(raw, CALIBRATED, only=only)
        check_fitted = fitting.check(raw, fitted)
        check_used = fitting.check(raw, CALIBRATED)
        held = fitting.held_out(raw)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    def worst(rows):
        return max((abs(r["error"]) for r in rows), default=0.0)

    def in_sample(rows):
        return round(fitting.rms_log_error([r for r in rows if r["fitted"]]), 4)

    if as_json:
        echo_json({
            "mode": mode, "measurements": raw, "fitted": fitted.as_dict(),
            "in_use": CALIBRATED.as_dict(), "check_fitted": check_fitted,
            "check_in_use": check_used, "max_error_fitted": round(worst(check_fitted), 3),
            "max_error_in_use": round(worst(check_used), 3),
            "rms_log_error_fitted": in_sample(check_fitted),
            "rms_log_error_in_use": in_sample(check_used), "held_out": held})
        return
    d = fitting.demands(raw)
    click.echo(f"Calibration ({mode}): {raw.get('cpus', '?')} CPUs, load average "
               f"{raw.get('load_avg', '?')}, {raw.get('repeats', '?')} rounds, "
               f"{raw.get('wall_s', '?')} s of measuring")
    click.echo(f"{'probe':<6} {'CPU use':>7} {'membw':>6} {'io':>5}  what")
    for name, dem in d.items():
        what = raw.get("probes", {}).get(name, {}).get("what", "")
        click.echo(f"{name:<6} {dem.cpu:>7.2f} {dem.membw:>6.2f} {dem.io:>5.2f}  {what}")
    click.echo("")
    click.echo(f"{'slowdown (x alone)':<44} {'runs':>4} {'measured':>8} {'fitted':>7} {'err':>6}"
               f" {'in use':>7} {'err':>6}")
    used = {r["point"]: r for r in check_used}
    for r in check_fitted:
        u = used.get(r["point"], {})
        click.echo(f"{r['point']:<44} {r['runs']:>4} {r['measured']:>8.2f} {r['model']:>7.2f} "
                   f"{_pct(r['error']):>6} {u.get('model', float('nan')):>7.2f} "
                   f"{_pct(u.get('error', float('nan'))):>6}")
    click.echo("")
    def fmt(m):
        return ", ".join(f"{k} {v:g}" for k, v in m.as_dict().items())

    click.echo(f"fitted here: {fmt(fitted)} (largest error {_pct(worst(check_fitted))})")
    click.echo(f"in use (coscheduler/backends/interference.py CALIBRATED): {fmt(CALIBRATED)} "
               f"(largest error here {_pct(worst(check_used))})")
    click.echo("")
    click.echo(f"pairs left out of the fit ({held['method']}: each refitted without it, then "
               f"predicted):")
    for r in held["rows"]:
        click.echo(f"  {r['point']:<44} measured {r['measured']:5.2f}  predicted "
                   f"{r['predicted']:5.2f}  log error {r['log_error']:+.3f}")
    rms = held["rms_log_error"]
    click.echo(f"held-out rms log error: {'-' if rms is None else f'{rms:.3f}'} over "
               f"{held['points']} pairs (in-sample: fitted {in_sample(check_fitted):.3f}, "
               f"in use {in_sample(check_used):.3f})")
    if sys.stdout.isatty() and from_file is None and save is None:
        click.echo("(--save FILE keeps the raw figures; docs/calibration.md says how they become "
                   "CALIBRATED)")


def _idle_only(raw: dict) -> bool:
    """Whether a session measured the idle class and nothing but same-CPU pairs beside it."""
    pairs = raw.get("pairs", []) if isinstance(raw, dict) else []
    return any(isinstance(p, dict) and p.get("idle") for p in pairs) and all(
        isinstance(p, dict) and p.get("placement") == "same-cpu" for p in pairs)


def _shared(raw: dict) -> bool:
    """Whether a session measured probes sharing every CPU."""
    pairs = raw.get("pairs", []) if isinstance(raw, dict) else []
    return any(isinstance(p, dict) and p.get("placement") == "shared-cpus" for p in pairs)


__all__ = ["calibrate"]
