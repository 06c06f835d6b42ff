"""``cosched testbed``: the Docker Compose testbed (an emulated cluster of containers).

up / run / report / down / status / smoke; the work lives in ``testbed/`` (engine, images,
compose, instance, run, report, smoke); this module only parses options and prints.
"""

from __future__ import annotations

import sys
import time

import click

from coscheduler.cli._common import echo_json


def _say(quiet: bool = False):
    start = time.monotonic()

    def say(msg: str) -> None:
        if not quiet:
            click.echo(f"[{time.monotonic() - start:6.1f}s] {msg}", err=True)

    return say


def _fail(exc: BaseException) -> click.ClickException:
    return click.ClickException(str(exc))


def _errors():
    from coscheduler.model import InvalidInput
    from testbed.engine import DockerError, EngineUnavailable
    from testbed.instance import TestbedError

    return (InvalidInput, DockerError, EngineUnavailable, TestbedError, ValueError)


@click.group()
def testbed() -> None:
    """An emulated multi-node Slurm cluster in Docker containers (docs/testbed.md)."""


@testbed.command("up")
@click.option("--nodes", type=int, default=2, show_default=True, help="slurmd node containers.")
@click.option("--cpus", type=int, default=8, show_default=True,
              help="CPUs per node as Slurm sees them (CPUs= in slurm.conf).")
@click.option("--cpu-limit", type=float, default=None,
              help="Real CPUs per node container (its CFS quota); default: this machine's CPUs "
                   "shared evenly over the nodes.")
@click.option("--port-base", type=int, default=None,
              help="Publish the node agents on 127.0.0.1:PORT_BASE.. (default: free ports).")
@click.option("--suite", default="bookworm", show_default=True,
              help="Debian suite of the images (bookworm: Slurm 22.05, trixie: 24.11).")
@click.option("--base", type=click.Choice(["auto", "debootstrap", "registry"]), default="auto",
              show_default=True, help="Base image: debian:SUITE from a registry, or a "
                                      "debootstrap tree imported offline; auto tries both.")
@click.option("--mirror", default=None,
              help="Debian mirror for debootstrap [default: the one this machine's apt uses, "
                   "from /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list].")
@click.option("--mesos", is_flag=True, help="Add the emulated Mesos master (testbed/mesos: an "
                                            "emulator of the v1 scheduler API, not Mesos).")
@click.option("--guest-weight", default="100", show_default=True,
              help="How the nodes' agents run guest jobs (cosched agent --guest-weight): 'idle' "
                   "or a cpu.weight 1-10000. Not idle by default: an emulated node has no "
                   "cpuset, so an idle guest would wait behind every job of its node.")
@click.option("--no-install", is_flag=True, help="Do not install the Docker engine when missing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def up_cmd(nodes, cpus, cpu_limit, port_base, suite, base, mirror, mesos, guest_weight,
           no_install, as_json) -> None:
    """Build the images (cached) and start slurmctld, the nodes and the controller."""
    from testbed import instance

    say = _say()
    try:
        res = instance.up(nodes=nodes, cpus=cpus, cpu_limit=cpu_limit, port_base=port_base,
                          suite=suite, base=base, mirror=mirror, install=not no_install, say=say,
                          mesos=mesos, guest_weight=guest_weight)
    except KeyboardInterrupt:
        click.echo("cosched testbed up: interrupted; what it had made was removed", err=True)
        sys.exit(130)
    except _errors() as exc:
        raise _fail(exc) from None
    spec = res.spec
    if as_json:
        echo_json({"instance": spec.instance, "seconds": round(res.seconds, 1),
                   "built": res.built, "images": res.images, "spec": spec.as_json()})
        return
    click.echo(f"testbed {spec.instance} is up in {res.seconds:.1f} s "
               f"({'images built' if res.built else 'cached images'}): slurmctld, "
               f"{spec.nodes} node(s) x {spec.cpus} CPUs ({spec.cpu_limit:g} real CPU each), "
               "controller")
    for node, port in zip(spec.node_names(), spec.agent_ports):
        click.echo(f"  {node}: agent on http://127.0.0.1:{port}")
    if spec.mesos_port:
        click.echo(f"  emulated Mesos master on http://127.0.0.1:{spec.mesos_port} "
                   "(cosched run --backend mesos --master URL)")
    click.echo("next: cosched testbed run; cosched testbed report; cosched testbed down")


@testbed.command("down")
@click.option("--instance", default=None, help="Instance id (default: the current one).")
@click.option("--purge", is_flag=True, help="Also remove the testbed's images (the next up "
                                            "rebuilds them).")
@click.option("--json", "as_json", is_flag=True)
def down_cmd(instance, purge, as_json) -> None:
    """Remove every container, network and volume the testbed made (safe to run twice)."""
    from testbed import instance as inst_mod

    say = _say(quiet=as_json)
    try:
        inst = instance if instance is not None else inst_mod.current_instance()
        if inst is None:
            if as_json:
                echo_json({"instance": None, "removed": {}, "results_kept": None})
            else:
                click.echo("no testbed is up: nothing to remove")
            return
        res = inst_mod.down(inst, purge_images=purge, say=say)
    except _errors() as exc:
        raise _fail(exc) from None
    if as_json:
        echo_json({"instance": res.instance, "removed": res.removed,
                   "results_kept": res.results_kept})
        return
    n = {k: len(v) for k, v in res.removed.items()}
    click.echo(f"testbed {res.instance} is down: removed "
               + ", ".join(f"{v} {k}" for k, v in n.items()))
    if res.results_kept:
        click.echo(f"results kept in {res.results_kept} (cosched testbed report --results DIR)")


@testbed.command("status")
@click.option("--instance", default=None, help="Instance id (default: the current one).")
@click.option("--json", "as_json", is_flag=True)
def status_cmd(instance, as_json) -> None:
    """The engine, the containers and their health, Slurm's nodes, the agents."""
    from testbed import instance as inst_mod

    try:
        st = inst_mod.status(instance)
    except _errors() as exc:
        raise _fail(exc) from None
    if as_json:
        echo_json(st)
        return
    eng = st["engine"]
    click.echo(f"engine: {'running ' + eng['server_version'] if eng['running'] else 'not running'}"
               + ("" if eng["installed"] else f" (missing: {', '.join(eng['missing'])})"))
    if st["instance"] is None or st["spec"] is None:
        click.echo("testbed: none is up")
        return
    spec = st["spec"]
    click.echo(f"testbed {st['instance']}: {st['state']} ({spec['nodes']} node(s) x "
               f"{spec['cpus']} CPUs, {spec['cpu_limit']:g} real CPU each, images :{spec['tag']})")
    for svc, c in st["containers"].items():
        click.echo(f"  {svc:<12} {c['name']:<34} {c['state']:<9} {c['health']}")
    if st["slurm"]:
        click.echo("  slurm: " + ", ".join(f"{n['node']} {n['state']}" for n in st["slurm"]["nodes"]))
    for node, a in st["agents"].items():
        click.echo(f"  agent {node}: {a['url']} {'ok' if a['ok'] else 'NOT ANSWERING'}")
    if st.get("mesos_master"):
        m = st["mesos_master"]
        click.echo(f"  emulated Mesos master: {m['url']} {'ok' if m['ok'] else 'NOT ANSWERING'}")


@testbed.command("smoke")
@click.option("--keep", is_flag=True, help="Leave the smoke testbed up (for a look inside).")
@click.option("--no-install", is_flag=True, help="Do not install the Docker engine when missing.")
@click.option("--suite", default="bookworm", show_default=True)
@click.option("--base", type=click.Choice(["auto", "debootstrap", "registry"]), default="auto",
              show_default=True)
@click.option("--json", "as_json", is_flag=True)
def smoke_cmd(keep, no_install, suite, base, as_json) -> None:
    """Build, up, one host/guest pair through real Slurm with quotas measured inside the
    node container, down. Exits 1 when a step fails (and cleans up even then)."""
    from testbed.smoke import smoke

    say = _say()
    try:
        res = smoke(say=say, keep=keep, install=not no_install, suite=suite, base=base)
    except KeyboardInterrupt:
        click.echo("cosched testbed smoke: interrupted; the smoke testbed was removed", err=True)
        sys.exit(130)
    if as_json:
        echo_json(res.as_json())
    else:
        for s in res.steps:
            click.echo(f"{'ok  ' if s.ok else 'FAIL'} {s.name:<38} {s.seconds:6.1f} s  {s.detail}")
        click.echo(f"smoke {'passed' if res.ok else 'FAILED'} in {res.seconds:.1f} s")
    if not res.ok:
        sys.exit(1)


@testbed.command("run")
@click.option("--instance", default=None, help="Instance id (default: the current one).")
@click.option("--workload", default="paper-small", show_default=True,
              help="paper-small: the paper's 15 workflows at 1/8 of their cores.")
@click.option("--policies", default="space-sharing,static,asax", show_default=True)
@click.option("--repeat", type=int, default=1, show_default=True)
@click.option("--scale", type=float, default=None,
              help="Work per task (default: the workload's, 0.1 for paper-small).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--timeout", type=float, default=3600.0, show_default=True,
              help="Stop a policy's run after this many seconds (its unfinished jobs fail).")
@click.option("--json", "as_json", is_flag=True)
def run_cmd(instance, workload, policies, repeat, scale, seed, timeout, as_json) -> None:
    """Run the scaled paper mix through real Slurm in the containers under each policy."""
    from testbed.run import run

    say = _say()
    try:
        res = run(instance, workload, policies, repeat, scale, seed, timeout, say)
    except KeyboardInterrupt:
        click.echo("cosched testbed run: interrupted; the run's jobs were cancelled and every "
                   "quota given back (the testbed stays up)", err=True)
        sys.exit(130)
    except _errors() as exc:
        raise _fail(exc) from None
    if as_json:
        echo_json({"run_id": res.run_id, "results": str(res.path), "setup": res.data["setup"],
                   "runs": [{k: v for k, v in r.items() if k != "stages"}
                            for r in res.data["runs"]]})
        return
    click.echo(f"run {res.run_id} done: {res.path}/run.json; next: cosched testbed report")


@testbed.command("report")
@click.option("--instance", default=None, help="Instance id (default: the current one).")
@click.option("--results", "results", type=click.Path(exists=True), default=None,
              help="A run folder or its run.json (default: the current testbed's latest run, "
                   "else the latest one kept by down).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Where the PNG plots go (default: the run's folder/plots).")
@click.option("--json", "as_json", is_flag=True)
def report_cmd(instance, results, out, as_json) -> None:
    """The tables of `cosched simulate paper` for the testbed's run, the simulator's
    prediction for the same setup beside it, and PNG plots."""
    from pathlib import Path

    from testbed import report as rep_mod
    from testbed.instance import current_instance, home, instance_dir
    from testbed.run import latest_run

    try:
        if results is not None:
            path = Path(results)
        else:
            inst = instance or current_instance()
            path = latest_run(instance_dir(inst) / "results") if inst else None
            if path is None:
                # Run folders are named by their start time: the newest across instances.
                kept = sorted(home().glob("results/*/*/run.json"), key=lambda p: p.parent.name)
                path = kept[-1].parent if kept else None
            if path is None:
                raise click.ClickException("no testbed run to report: run `cosched testbed run` "
                                           "first, or give --results DIR")
        data = rep_mod.load(path)
        rep = rep_mod.build(data)
        folder = path if path.is_dir() else path.parent
        plots = rep_mod.write_plots(rep["runs"], rep["sim_runs"], Path(out) if out else
                                    folder / "plots",
                                    f"{data['setup']['workload']}, {data['setup']['nodes']} x "
                                    f"{data['setup']['cpus']} CPUs, scale {data['setup']['scale']:g}")
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(exc) from None
    except (KeyError, TypeError, AttributeError) as exc:   # a run.json of another shape
        raise click.ClickException(f"{path} is not a testbed run.json that can be reported "
                                   f"({type(exc).__name__}: {str(exc)[:200]})") from None
    except _errors() as exc:
        raise _fail(exc) from None
    if as_json:
        echo_json({"results": str(folder), "setup": data["setup"], "testbed": rep["testbed"],
                   "simulator": rep["simulator"], "testbed_ratios": rep["testbed_ratios"],
                   "simulator_ratios": rep["simulator_ratios"], "comparison": rep["comparison"],
                   "plots": [str(p) for p in plots]})
        return
    click.echo(rep_mod.text(rep))
    click.echo("\nplots: " + ", ".join(str(p) for p in plots))
