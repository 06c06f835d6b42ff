"""The Slurm backend through slurmrestd (``cosched run --backend slurmrestd --url URL
--token-file F``): the same ``SlurmSource`` interface as the command line (source.py), so
the backend's policy code is shared; only reading and writing the cluster differ.

``RestClient`` speaks HTTP (urllib, no new dependency) with a JWT: the token file is
checked (a regular file, not readable by group or others, holding one token, either bare
or as ``SLURM_JWT=...`` from ``scontrol token``) and read again at each request, so a
rotated token is picked up; the token is never logged or put in an error. A refused
connection, a timeout, a 502/503/504 or an answer saying slurmctld cannot be reached is
retried with backoff like ``SlurmCommands``; then, like any other failure (401, 404, a
Slurm error), it raises ``RestError``, a ``BackendError`` of one line that names the
method, the URL and what went wrong: the controller notes it and carries on.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import socket
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from coscheduler import boundedjson
from coscheduler.backend import BackendError
from coscheduler.model import InvalidInput

from .answerstream import JobsStream, NodesStream, Surprise
from .commands import _TRANSIENT, MAX_OUTPUT_ENV, output_cap
from .contract import Release
from .parse import MAX_JSON_DEPTH, ParseError, SlurmJob, SlurmNode, printable
from .rest_contract import (PROBE_ORDER, answer_of, hold_body, parse_partition_max_time,
                            parse_rest_jobs, parse_rest_nodes, path, pinned, release_of_ping,
                            update_body)

log = logging.getLogger("slurm_plugin.rest")
R = TypeVar("R")

_ERROR_BODY = 64 << 10     # what an error message can use of a failed answer's body
_MAX_TOKEN_FILE = 64 << 10
_MAX_MARKS_FILE = 64 << 20


class RestError(BackendError):
    """A slurmrestd request failed; ``status``: the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None, transient: bool = False):
        super().__init__(message)
        self.status = status
        self.transient = transient


def check_url(url: str) -> str:
    """``http://host:port`` (a trailing slash or path prefix is kept, minus the slash)."""
    u = urllib.parse.urlsplit(url or "")
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InvalidInput(f"--url {url!r}: expected http://HOST:PORT or https://HOST:PORT "
                           "(slurmrestd's listening address)")
    try:
        u.port
    except ValueError:
        raise InvalidInput(f"--url {url!r}: the port is not a number in 1..65535") from None
    if u.query or u.fragment:
        raise InvalidInput(f"--url {url!r}: no query or fragment, only the server's address")
    return url.rstrip("/")


def read_token(token_file: str | Path) -> str:
    """The JWT in ``token_file``; InvalidInput naming the file (never its content)."""
    p = Path(token_file)
    try:
        st = p.stat()
    except OSError as exc:
        raise InvalidInput(f"token file {p}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInput(f"token file {p}: not a regular file")
    if st.st_mode & 0o077:
        raise InvalidInput(f"token file {p}: mode {stat.S_IMODE(st.st_mode):04o} lets others read "
                           f"the token; chmod 600 {p}")
    try:
        text = boundedjson.read_file(p, _MAX_TOKEN_FILE).decode(errors="strict").strip()
    except boundedjson.JSONUnusable as exc:
        raise InvalidInput(f"token file {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"token file {p}: cannot be read ({type(exc).__name__})") from None
    if not text:
        raise InvalidInput(f"token file {p}: empty; write a token there "
                           "(`scontrol token username=USER lifespan=SECONDS`)")
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    tok = lines[0].removeprefix("SLURM_JWT=").strip()
    parts = tok.split(".")
    if len(lines) != 1 or len(parts) != 3 or not all(parts[:2]) \
            or not all(c.isalnum() or c in "-_." for c in tok):
        raise InvalidInput(f"token file {p}: does not hold one JWT (header.payload.signature, "
                           "bare or as SLURM_JWT=... as `scontrol token` prints)")
    return tok


def token_user(token: str) -> str | None:
    """The ``sun`` claim (user name) of a JWT, sent as X-SLURM-USER-NAME (None: absent)."""
    try:
        payload = token.split(".")[1]
        data = boundedjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)),
                                 max_depth=8, what="token")
    except (ValueError, IndexError):
        return None
    sun = data.get("sun") if isinstance(data, dict) else None
    return sun if isinstance(sun, str) and sun else None


def _errors_text(body: bytes) -> str:
    """Slurm's own words from an answer's ``errors`` list (or the first 160 characters)."""
    try:
        data = boundedjson.loads(body, max_depth=MAX_JSON_DEPTH, what="answer")
    except ValueError:
        return printable(body.decode(errors="replace").strip(), 160)
    errs = data.get("errors") if isinstance(data, dict) else None
    if errs is not None and not isinstance(errs, list):
        errs = [errs]   # (a string is one message, not one per character)
    out = []
    for e in errs or ():
        if isinstance(e, dict):
            words = [str(e[k]) for k in ("description", "error") if e.get(k)]
            out.append(": ".join(dict.fromkeys(words)) or str(e.get("error_number") or e))
        else:
            out.append(str(e))
    return printable("; ".join(out), 300)


def _read_into(r, sink: Callable[[bytes], None], max_bytes: int, where: str,
               timeout_s: float) -> None:
    """A body fed to ``sink`` a piece at a time as it comes, at most ``max_bytes`` of it
    (JSONUnusable past that, as ``boundedjson.read_limited`` says it), within ``timeout_s``
    as a command's output is (commands.py): the time spent in ``sink`` (a parse) does not
    count. The socket's own timeout bounds each wait for bytes, not a body that trickles
    in; this bounds the whole, cut off at most one socket timeout late (a transient
    RestError, tried again as a timeout is)."""
    size = 0
    deadline = time.monotonic() + timeout_s
    read = getattr(r, "read1", None) or r.read     # (read1: what has come, not a full piece)
    while piece := read(1 << 16):
        size += len(piece)
        if size > max_bytes:
            raise boundedjson.JSONUnusable(f"{where}: more than the {max_bytes} bytes allowed")
        now = time.monotonic()
        if now > deadline:
            raise RestError(f"{where}: the answer did not come whole within {timeout_s:g} s "
                            f"({size} bytes came)", None, True)
        sink(piece)
        deadline += time.monotonic() - now


@dataclass
class RestClient:
    """HTTP to one slurmrestd. ``retries`` extra tries after a transient failure, waiting
    ``backoff_s * 3**k`` before try k+1; ``timeout_s`` per try. An answer's body is read
    as it comes, up to ``max_body_bytes`` (commands.py's cap, $COSCHED_SLURM_MAX_JSON_MB):
    one that is longer is a RestError, never read whole."""

    url: str
    token_file: str
    timeout_s: float = 15.0
    retries: int = 3
    backoff_s: float = 0.2
    sleep: Callable[[float], None] = time.sleep
    max_body_bytes: int = field(default_factory=output_cap)
    calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.url = check_url(self.url)
        read_token(self.token_file)     # a bad file is an error now, not at the first pass

    def request(self, method: str, p: str, body: Mapping[str, Any] | None = None,
                retry: bool = True) -> bytes:
        """The answer's body; RestError on failure (after retries when transient)."""
        return self._tries(method, p, body, retry, None)

    def stream(self, p: str, reader: Callable[[], R], retry: bool = True) -> R:
        """GET ``p`` with the body fed, as it comes, to ``reader()``'s ``feed`` (bytes); the
        reader of the try that succeeded (a failed try takes its reader with it)."""
        made: list[R] = []

        def sink() -> Callable[[bytes], None]:
            made.append(reader())
            return made[-1].feed
        self._tries("GET", p, None, retry, sink)
        return made[-1]

    def _tries(self, method: str, p: str, body: Mapping[str, Any] | None, retry: bool,
               sink: Callable[[], Callable[[bytes], None]] | None) -> bytes:
        tries = 1 + (self.retries if retry else 0)
        last: RestError | None = None
        for k in range(tries):
            if k:
                delay = self.backoff_s * 3 ** (k - 1)
                log.warning("%s; retrying in %.1f s", last, delay)
                self.sleep(delay)
            try:
                return self._once(method, p, body, sink() if sink else None)
            except RestError as exc:
                last = exc
                if not exc.transient:
                    raise
        assert last is not None
        raise last

    def _once(self, method: str, p: str, body: Mapping[str, Any] | None,
              sink: Callable[[bytes], None] | None = None) -> bytes:
        token = read_token(self.token_file)
        headers = {"X-SLURM-USER-TOKEN": token, "Accept": "application/json"}
        user = token_user(token)
        if user:
            headers["X-SLURM-USER-NAME"] = user
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + p, data=data, method=method, headers=headers)
        where = f"slurmrestd `{method} {self.url}{p}`"
        self.calls += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                parts: list[bytes] = []
                _read_into(r, sink or parts.append, self.max_body_bytes, where, self.timeout_s)
                return b"".join(parts)
        except boundedjson.JSONUnusable as exc:
            raise RestError(f"{exc}; the answer was not read further (a larger cluster: set "
                            f"${MAX_OUTPUT_ENV})") from None
        except urllib.error.HTTPError as exc:
            text = _errors_text(exc.read(_ERROR_BODY) or b"")
            code = exc.code
            if code in (401, 403, 511):     # 24.11: 511 "Protocol authentication error"
                raise RestError(f"{where} refused the token in {self.token_file} (HTTP {code})"
                                + (f": {text}" if text else "")
                                + "; is AuthAltTypes=auth/jwt set and the token still valid?",
                                code) from None
            if code == 404:
                raise RestError(f"{where}: HTTP 404" + (f": {text}" if text else "")
                                + " (this slurmrestd does not serve that endpoint)", code) from None
            transient = code in (502, 503, 504) or bool(_TRANSIENT.search(text))
            hint = ""
            if "slurmctld config is unable to load" in text:
                # what 22.05 answers to a token slurmctld rejected (recorded live)
                hint = f"; Slurm 22.05 answers so when slurmctld rejects the token in {self.token_file}"
            raise RestError(f"{where} failed (HTTP {code})" + (f": {text}" if text else "") + hint,
                            code, transient) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RestError(f"{where}: no answer ({reason})", None, True) from None

    def get_json(self, p: str, retry: bool = True) -> tuple[bytes, dict]:
        raw = self.request("GET", p, retry=retry)
        where = f"slurmrestd `GET {self.url}{p}`"
        try:
            data = boundedjson.loads(raw, max_bytes=len(raw), max_depth=MAX_JSON_DEPTH, what=where)
        except boundedjson.JSONUnusable as exc:
            why = str(exc).removeprefix(f"{where}: ")
            raise ParseError(f"{where} did not answer JSON ({why}); it began: {raw[:80]!r}") from None
        if not isinstance(data, dict):
            raise ParseError(f"slurmrestd `GET {self.url}{p}` answered JSON that is not an object")
        return raw, data


class RestSource:
    """A cluster through slurmrestd: the ``SlurmSource`` interface of source.py.

    data_parser v0.0.38 (22.05) cannot write AdminComment, where the backend keeps each
    job's quota and host mark: there the marks are kept here instead, in ``marks_file``
    (JSON, job id -> comment; None: in memory only) and laid over the jobs read. Nor can it
    write OverSubscribe=no (used when held jobs are handed to Slurm at exit): a warning,
    and the job is released as it is."""

    name = "slurmrestd"

    def __init__(self, client: RestClient, marks_file: str | Path | None = None):
        self.client = client
        self._rel: tuple[Release, str] | None = None
        self.marks_file = Path(marks_file) if marks_file else None
        self._marks: dict[int, str] = self._load_marks()

    def _load_marks(self) -> dict[int, str]:
        if self.marks_file is None or not self.marks_file.exists():
            return {}
        try:
            data = boundedjson.load_file(self.marks_file, max_bytes=_MAX_MARKS_FILE, max_depth=4)
            return {int(k): str(v) for k, v in data.items()}
        except (OSError, ValueError, AttributeError) as exc:
            raise InvalidInput(f"slurmrestd marks file {self.marks_file}: {exc}") from None

    def _save_marks(self) -> None:
        if self.marks_file is None:
            return
        tmp = self.marks_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(self._marks.items())}))
        os.replace(tmp, self.marks_file)

    def _overlay(self, jobs: list[SlurmJob]) -> list[SlurmJob]:
        if not self._marks:
            return jobs
        seen = {j.job_id for j in jobs}
        gone = [k for k in self._marks if k not in seen]
        for k in gone:            # purged by slurmctld (MinJobAge): nothing to mark any more
            del self._marks[k]
        if gone:
            self._save_marks()
        return [dataclasses.replace(j, admin_comment=self._marks[j.job_id])
                if j.job_id in self._marks else j for j in jobs]

    def contract(self) -> tuple[Release, str]:
        """(release, data_parser): learnt once from a ping, then pinned per release."""
        if self._rel is None:
            tried = []
            for parser in PROBE_ORDER:
                try:
                    _, data = self.client.get_json(path(parser, "ping"))
                except RestError as exc:
                    if exc.status == 404:
                        tried.append(parser)
                        continue
                    raise
                rel = release_of_ping(data, f"slurmrestd `GET {self.client.url}{path(parser, 'ping')}`")
                self._rel = (rel, pinned(rel, parser))
                log.info("slurmrestd %s: Slurm %s, data_parser %s", self.client.url, rel.text,
                         self._rel[1])
                break
            else:
                raise RestError(f"slurmrestd {self.client.url} serves none of the data_parser "
                                f"versions {', '.join(tried)} (GET /slurm/VERSION/ping: 404)")
        return self._rel

    def _post(self, job_id: int, body: dict) -> None:
        rel, parser = self.contract()
        p = path(parser, "job", int(job_id))
        raw = self.client.request("POST", p, body)
        text = _errors_text(raw) if raw.strip() else ""
        if text:
            raise RestError(f"slurmrestd `POST {self.client.url}{p}` (Slurm {rel.text}): {text}")

    def jobs(self) -> list[SlurmJob]:
        """Read as slurmrestd sends them, a job at a time (``answerstream``); an answer that is
        not the shape read so is asked for again and read whole, whose reader says why."""
        rel, parser = self.contract()
        p = path(parser, "jobs")
        try:
            jobs = self.client.stream(p, lambda: JobsStream(answer_of(rel, "GET", p))).finish()
        except Surprise as exc:
            log.info("%s; reading the answer again, whole", exc)
            raw, _ = self.client.get_json(p)
            jobs = parse_rest_jobs(rel, parser, raw.decode())
        return self._overlay(jobs)

    def job(self, job_id: int) -> SlurmJob | None:
        rel, parser = self.contract()
        try:
            raw, _ = self.client.get_json(path(parser, "job", int(job_id)))
        except RestError as exc:
            if exc.status == 404 or "Invalid job id specified" in str(exc):
                return None
            raise
        jobs = parse_rest_jobs(rel, parser, raw.decode(), f"job/{int(job_id)}")
        if jobs and jobs[0].job_id in self._marks:
            return dataclasses.replace(jobs[0], admin_comment=self._marks[jobs[0].job_id])
        return jobs[0] if jobs else None

    def nodes(self) -> list[SlurmNode]:
        """Read as ``jobs`` reads jobs, a node at a time."""
        rel, parser = self.contract()
        p = path(parser, "nodes")
        try:
            return self.client.stream(p, lambda: NodesStream(answer_of(rel, "GET", p))).finish()
        except Surprise as exc:
            log.info("%s; reading the answer again, whole", exc)
        raw, _ = self.client.get_json(p)
        return parse_rest_nodes(rel, parser, raw.decode())

    def layout(self, job_id: int) -> tuple[tuple[str, int], ...] | None:
        j = self.job(job_id)
        if j is None:
            return None
        if j.cpus_by_node:
            return j.cpus_by_node
        # 22.05's job_resources names the nodes without their CPU counts
        if len(j.nodes) == 1 and j.cpus:
            return ((j.nodes[0], j.cpus),)
        return None

    def partition_max_time(self, partition: str) -> float | None:
        rel, parser = self.contract()
        _, data = self.client.get_json(path(parser, "partition", partition))
        return parse_partition_max_time(rel, parser, data, partition)

    def update(self, job_id: int, **fields: str) -> None:
        rel, parser = self.contract()
        job_id = int(job_id)
        fields = dict(fields)
        mark = None
        if parser == "v0.0.38":
            if "OverSubscribe" in fields:
                log.warning("job %s: OverSubscribe=%s not set: slurmrestd's v0.0.38 (Slurm %s) "
                            "cannot write it", job_id, fields.pop("OverSubscribe"), rel.text)
            mark = fields.pop("AdminComment", None)
        job = self.job(job_id) if str(fields.get("TimeLimit", "")).startswith("+") else None
        try:
            body = update_body(parser, fields, job)
        except ValueError as exc:
            raise RestError(f"job {job_id}: {exc}") from None
        if mark is not None and self.job(job_id) is None:
            raise RestError(f"job {job_id}: unknown to Slurm {rel.text} (slurmrestd {self.client.url})")
        if body:
            self._post(job_id, body)
        if mark is not None:
            self._marks[job_id] = mark
            self._save_marks()

    def release(self, job_id: int) -> None:
        self._post(job_id, hold_body(False))

    def hold(self, job_id: int) -> None:
        self._post(job_id, hold_body(True))

    def cancel(self, job_id: int) -> None:
        rel, parser = self.contract()
        p = path(parser, "job", int(job_id))
        raw = self.client.request("DELETE", p)
        text = _errors_text(raw) if raw.strip() else ""
        if text:
            raise RestError(f"slurmrestd `DELETE {self.client.url}{p}` (Slurm {rel.text}): {text}")


def backend_from_options(options: Mapping[str, Any]):
    """For ``cosched run --backend slurmrestd --url URL --token-file F``: the node agents,
    usage and progress folders from ``slurm_dir`` (a cluster of ``cosched slurm up``) or
    ``agents`` (a site's agents file, slurm_plugin/connect.py)."""
    from .backend import SlurmBackend
    from .cluster import load_state
    from .connect import agent_clients, read_agents_file, with_default_cluster

    if not options.get("agents"):
        options = with_default_cluster(options)
    if not options.get("url"):
        raise InvalidInput("--backend slurmrestd needs --url (slurmrestd's address)")
    if not options.get("token_file"):
        raise InvalidInput("--backend slurmrestd needs --token-file (a JWT: docs/slurm.md)")
    base = options.get("state_file") or options.get("db")
    marks = str(Path(base).with_suffix(".slurmrestd-marks.json")) if base else None
    if options.get("slurm_dir") and not options.get("agents"):
        marks = str(Path(options["slurm_dir"]) / "slurmrestd-marks.json")
    source = RestSource(RestClient(options["url"], options["token_file"]), marks_file=marks)
    lease = float(options.get("lease_s") or 20.0)
    partition = options.get("partition") or "cosched"
    if options.get("agents"):
        nodes = [n.name for n in source.nodes() if partition in n.partitions]
        agents = agent_clients(read_agents_file(options["agents"], nodes))
        state_file = options.get("state_file") or (
            str(Path(options["db"]).with_suffix(".slurm.json")) if options.get("db") else None)
        return SlurmBackend(source, partition=partition, agents=agents, lease_s=lease,
                            state_file=state_file, jobcomp_file=options.get("jobcomp_file"),
                            usage_dir=options.get("usage_dir"))
    if not options.get("slurm_dir"):
        raise InvalidInput("--backend slurmrestd needs --agents FILE or --slurm-dir D (the node agents)")
    state = load_state(options["slurm_dir"])
    if state is None:
        raise InvalidInput(f"no cluster in {options['slurm_dir']}: start one with `cosched slurm up`")
    agents = agent_clients({n: {"url": u, "token_file": state.agent_tokens.get(n)}
                            for n, u in state.agents.items()})
    d = Path(state.dir)
    return SlurmBackend(source, partition=options.get("partition") or state.partition,
                        agents=agents, lease_s=lease, state_file=d / "backend-state-rest.json",
                        jobcomp_file=d / "log" / "jobcomp.txt", usage_dir=state.usage_dir,
                        cpu_per_core=state.cpu_per_core)


__all__ = ["RestClient", "RestError", "RestSource", "backend_from_options", "check_url",
           "read_token", "token_user"]
