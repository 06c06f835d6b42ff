"""The testbed's images: an offline base image, the build context, the role images.

No image registry is reachable on our machines, so the base image is made from a
``debootstrap --variant=minbase`` tree imported with ``docker import`` (cached as
``cosched-testbed-base:SUITE``); where a registry answers (or ``debian:SUITE`` is already
present) ``--base registry`` uses ``FROM debian:SUITE`` instead. The role images
(``testbed/docker/Dockerfile``: slurmctld, node, controller) install the project from
wheels built on the host out of the working tree, so the build itself needs no Python
registry: ``pip`` on the host fetches the dependencies' wheels once (cached) and the
image installs them with ``--no-index``.

Image tags are content hashes of what goes in (the build file, the wheels, the base
image), so an unchanged tree reuses its images and ``up`` starts in seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from coscheduler.resources import resource_dir

from .engine import DockerError, Engine, EngineUnavailable
from .mirror import resolve_mirror

ROOT = Path(__file__).resolve().parent.parent         # the working tree
DOCKER_DIR = resource_dir(__package__, "docker")    # package data (pyproject.toml)
ROLES = ("slurmctld", "node", "controller")
DOCKER_FILES = ("Dockerfile", "entrypoint.sh", "health.sh")
# Debian suite -> its python3 (the wheels must match it) and the Slurm it ships.
SUITES: dict[str, dict[str, str]] = {
    "bookworm": {"python": "3.11", "slurm": "22.05"},
    "trixie": {"python": "3.13", "slurm": "24.11"},
}
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR: str | None = None   # None: the mirror of this machine's apt (testbed/mirror.py)
BASE_REPO = "cosched-testbed-base"
IMAGE_PREFIX = "cosched-testbed-"
LABEL = "cosched.testbed"
# Runtime dependencies the containers do not need (heavy, used on the host only):
# wfcommons (workflow recipes, with pandas and matplotlib) is for generating workloads.
HOST_ONLY_DEPS = frozenset({"wfcommons", "matplotlib"})
# The project's packages (pyproject's packages.find) and the files that make the wheel.
_SOURCE_DIRS = ("coscheduler", "slurm_plugin", "mesos_framework", "monitoring", "testbed")

Say = Callable[[str], None]


def check_suite(suite: object) -> str:
    if suite not in SUITES:
        raise ValueError(f"unknown Debian suite {suite!r}: use one of {', '.join(SUITES)}")
    return str(suite)


def cache_dir() -> Path:
    """Where base trees, wheels and build contexts are cached ($COSCHED_TESTBED_CACHE)."""
    env = os.environ.get("COSCHED_TESTBED_CACHE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/cosched-testbed")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cosched-testbed"


def role_image(role: str, tag: str) -> str:
    return f"{IMAGE_PREFIX}{role}:{tag}"


# -- pure helpers -------------------------------------------------------------------------------

_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def container_requirements(pyproject: str) -> list[str]:
    """The project's dependencies (pyproject.toml text) that the containers install: all
    but HOST_ONLY_DEPS, with their version ranges as written (no second list to keep)."""
    deps = tomllib.loads(pyproject)["project"]["dependencies"]
    out = []
    for d in deps:
        m = _REQ_NAME.match(d)
        name = m.group(1).lower().replace("_", "-") if m else d
        if name not in HOST_ONLY_DEPS:
            out.append(d)
    return out


def digest(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def source_digest(root: Path = ROOT) -> str:
    """A hash of every file that goes into the project's wheel (sources, pyproject, README)."""
    parts: list[bytes | str] = []
    files = [root / "pyproject.toml", root / "README.md"]
    for d in _SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(root / d):
            dirnames[:] = sorted(n for n in dirnames if n != "__pycache__" and not n.startswith("."))
            files += [Path(dirpath) / f for f in sorted(filenames) if not f.endswith(".pyc")]
    for f in files:
        if f.is_file():
            parts += [str(f.relative_to(root)), f.read_bytes()]
    return digest(parts)


# -- the base image -----------------------------------------------------------------------------

def image_exists(engine: Engine, ref: str) -> bool:
    return engine.docker("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0


def image_id(engine: Engine, ref: str) -> str:
    return engine.docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.decode().strip()


def ensure_base(engine: Engine, suite: str, mode: str = "auto",
                mirror: str | None = DEFAULT_MIRROR, say: Say = lambda _m: None) -> str:
    """The base image's reference: ``debian:SUITE`` (mode registry, or auto when present or
    pullable) or the debootstrap import ``cosched-testbed-base:SUITE`` (made once, cached)."""
    suite = check_suite(suite)
    if mode not in ("auto", "registry", "debootstrap"):
        raise ValueError(f"unknown base mode {mode!r}: use auto, registry or debootstrap")
    official = f"debian:{suite}"
    if mode in ("auto", "registry"):
        if image_exists(engine, official):
            return official
        pulled = engine.docker("pull", "-q", official, check=False, timeout=120)
        if pulled.returncode == 0:
            say(f"base image: {official} from the registry")
            return official
        if mode == "registry":
            raise EngineUnavailable(f"cannot pull {official}: "
                                    f"{pulled.stdout.decode(errors='replace').strip()}")
    ours = f"{BASE_REPO}:{suite}"
    if image_exists(engine, ours):
        return ours
    debootstrap_import(engine, suite, ours, mirror, say)
    return ours


def debootstrap_import(engine: Engine, suite: str, ref: str, mirror: str | None,
                       say: Say) -> None:
    """debootstrap a minimal tree with python3 and import it as ``ref``; ``mirror`` None:
    the one this machine's apt uses."""
    mirror = resolve_mirror(mirror)
    tool = shutil.which("debootstrap") or ("/usr/sbin/debootstrap"
                                           if Path("/usr/sbin/debootstrap").exists() else None)
    if tool is None:
        raise EngineUnavailable("debootstrap is not installed (apt-get install debootstrap), and "
                                "no registry is reachable for a debian base image")
    if os.geteuid() != 0:
        raise EngineUnavailable("building the base image with debootstrap needs root")
    work = cache_dir() / "rootfs"
    work.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix=f"{suite}-", dir=work))
    log = work / f"debootstrap-{suite}.log"
    say(f"base image: debootstrap {suite} from {mirror} (about 30-70 s; log {log})")
    try:
        with open(log, "wb") as out:
            proc = subprocess.run([tool, "--variant=minbase", "--include=python3", suite,
                                   str(tree), mirror], stdout=out, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-8:])
            raise EngineUnavailable(f"debootstrap {suite} failed (exit {proc.returncode}):\n{tail}")
        say(f"base image: importing the tree as {ref}")
        tar = subprocess.Popen(["tar", "-C", str(tree), "-c", "."], stdout=subprocess.PIPE)
        try:
            imp = subprocess.run([engine.docker_bin, "import", "--change",
                                  f"LABEL {LABEL}.base={suite}", "-", ref],
                                 stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise DockerError(["docker", "import", ref], imp.returncode or tar.returncode,
                              imp.stdout.decode(errors="replace"))
    finally:
        remove_tree(tree)


def remove_tree(tree: Path) -> None:
    """Remove a debootstrap tree, unmounting first whatever an interrupted run left mounted
    inside it (its /proc, /sys): rmtree must never walk into a live mount."""
    prefix = str(tree.resolve()) + "/"
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split()[4] for line in f]
    except OSError:
        mounts = []
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(tree, ignore_errors=True)


# -- wheels and the build context ---------------------------------------------------------------

def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _source_tree() -> Path:
    """The checkout the images are built from: a wheel install has no pyproject.toml beside
    its packages, and says so instead of failing on a missing file."""
    if not (ROOT / "pyproject.toml").is_file():
        raise EngineUnavailable(f"the testbed builds its images from a source checkout of "
                                f"coscheduler, and {ROOT} is an installed package (no "
                                "pyproject.toml): run `cosched testbed` from a clone")
    return ROOT


def dependency_wheels(suite: str, say: Say) -> Path:
    """Wheels of the containers' dependencies for the suite's python (cached by the
    requirement list), fetched with the host's pip (its index, certificates, proxy)."""
    pyver = SUITES[check_suite(suite)]["python"]
    reqs = container_requirements((_source_tree() / "pyproject.toml").read_text())
    key = digest([pyver, *reqs])[:16]
    out = cache_dir() / "wheels" / f"deps-py{pyver}-{key}"
    if (out / "requirements.txt").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix="deps-", dir=_mk(out.parent)))
    try:
        say(f"wheels: fetching the containers' dependencies for Python {pyver} "
            f"({', '.join(_REQ_NAME.match(r).group(1) for r in reqs)})")
        args = ["download", "-q", "-d", str(tmp), "--only-binary=:all:"]
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if pyver != here:
            args += ["--python-version", pyver, "--implementation", "cp",
                     "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                     "--platform", "manylinux2014_x86_64", "--platform", "manylinux2010_x86_64"]
        proc = _pip(*args, *reqs)
        if proc.returncode != 0:
            raise EngineUnavailable("could not fetch the dependency wheels with pip:\n"
                                    + _tail(proc.stdout))
        (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def project_wheel(say: Say) -> tuple[Path, str]:
    """The project's wheel built from the working tree (cached by a hash of its sources)."""
    key = source_digest(_source_tree())[:16]
    out = cache_dir() / "wheels" / f"project-{key}"
    if out.is_dir() and any(out.glob("coscheduler-*.whl")):
        return out, key
    _mk(out.parent)
    tmp = Path(tempfile.mkdtemp(prefix="project-", dir=out.parent))
    build = Path(tempfile.mkdtemp(prefix="build-", dir=out.parent))
    try:
        say("wheels: building the project's wheel from the working tree")
        # Copy the tree first: building in place would leave build/ and *.egg-info behind.
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, build / name)
        for d in _SOURCE_DIRS:
            shutil.copytree(ROOT / d, build / d,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        proc = _pip("wheel", "-q", "--no-deps", "-w", str(tmp), str(build))
        if proc.returncode != 0:
            raise EngineUnavailable("could not build the project's wheel:\n" + _tail(proc.stdout))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)
    return out, key


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _tail(out: bytes, n: int = 10) -> str:
    lines = [ln for ln in out.decode(errors="replace").splitlines() if "WARNING" not in ln]
    return "\n".join(lines[-n:])


@dataclass(frozen=True)
class BuildContext:
    path: Path
    tag: str          # SUITE-hash: a hash of everything in it plus the base image


def build_context(engine: Engine, suite: str, base: str, say: Say) -> BuildContext:
    """The build context (build file, entrypoint, health check, wheels) in the cache, one
    folder per tag, made in a temporary folder and renamed into place: several checkouts
    may bring testbeds up on one machine at once."""
    deps = dependency_wheels(suite, say)
    proj, proj_key = project_wheel(say)
    tag = suite + "-" + digest([*((DOCKER_DIR / f).read_bytes() for f in DOCKER_FILES),
                                deps.name, proj_key, image_id(engine, base)])[:12]
    ctx = cache_dir() / "context" / tag
    if (ctx / "Dockerfile").exists():
        return BuildContext(ctx, tag)
    tmp = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=_mk(ctx.parent)))
    try:
        (tmp / "wheels").mkdir()
        for f in DOCKER_FILES:
            shutil.copy2(DOCKER_DIR / f, tmp / f)
        # Hard links: one context per tag costs no space beyond the cached wheels.
        shutil.copytree(deps, tmp / "wheels" / "deps", copy_function=_link_or_copy)
        shutil.copytree(proj, tmp / "wheels" / "project", copy_function=_link_or_copy)
        try:
            tmp.rename(ctx)
        except OSError:
            if not (ctx / "Dockerfile").exists():   # not another process's identical one
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BuildContext(ctx, tag)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def build_images(engine: Engine, suite: str, base_mode: str = "auto",
                 mirror: str | None = DEFAULT_MIRROR,
                 say: Say = lambda _m: None) -> dict[str, str]:
    """Every role's image (built when missing); role -> image reference."""
    base = ensure_base(engine, suite, base_mode, mirror, say)
    ctx = build_context(engine, suite, base, say)
    images = {role: role_image(role, ctx.tag) for role in ROLES}
    if all(image_exists(engine, ref) for ref in images.values()):
        return images
    for role, ref in images.items():
        say(f"building {ref}" + (" (Slurm, munge and the project: about 40 s the first time)"
                                 if role == ROLES[0] else ""))
        engine.docker("build", "-q", "--build-arg", f"BASE_IMAGE={base}", "--target", role,
                      "--label", f"{LABEL}.role={role}", "-t", ref, str(ctx.path))
    # Older tags are not removed here: another checkout may be bringing its own testbed up
    # on the same engine with them (seen: one test run's images deleted under another's
    # feet). They share every layer but the project's (a few MB); `down --purge` removes them.
    return images


def remove_images(engine: Engine, base_too: bool = False) -> list[str]:
    """Every testbed image (for ``down --purge``): the role images, and the base images;
    and the cached build contexts (the next ``up`` makes them again)."""
    removed = []
    shutil.rmtree(cache_dir() / "context", ignore_errors=True)
    out = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}", check=False)
    repos = {f"{IMAGE_PREFIX}{r}" for r in ROLES} | ({BASE_REPO} if base_too else set())
    for ref in out.stdout.decode().split():
        if ref.partition(":")[0] in repos:
            if engine.docker("rmi", ref, check=False).returncode == 0:
                removed.append(ref)
    return removed


__all__ = ["BuildContext", "DEFAULT_MIRROR", "DEFAULT_SUITE", "ROLES", "SUITES", "build_context",
           "build_images", "cache_dir", "check_suite", "container_requirements",
           "ensure_base", "remove_images", "role_image", "source_digest"]
