"""slurmrestd next to a local cluster, and the JWT that lets a client in.

Slurm accepts JSON Web Tokens when slurm.conf says ``AuthAltTypes=auth/jwt`` and
``AuthAltParameters=jwt_key=FILE`` (an HS256 key, readable only by SlurmUser). A token is
then either ``scontrol token username=U lifespan=S`` or one signed here with the same key
(``sign_jwt``: the claims Slurm reads are ``sun`` (user name), ``iat`` and ``exp``).

``start_slurmrestd`` runs Debian's slurmrestd on 127.0.0.1 as an unprivileged user
(slurmrestd refuses to run as root or SlurmUser) with ``rest_auth/jwt``; ``cosched slurm
up`` makes the key when asked (``up(..., jwt=True)``). A site runs its own slurmrestd.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pwd
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from coscheduler.model import InvalidInput

JWT_KEY = "jwt_hs256.key"


def write_jwt_key(directory: str | Path) -> tuple[str, ...]:
    """A fresh 32-byte key in ``directory`` (mode 0600); the slurm.conf lines that use it."""
    lib = Path("/usr/lib")
    if not list(lib.glob("*/slurm*/auth_jwt.so")) and not list(lib.glob("slurm*/auth_jwt.so")):
        raise InvalidInput("Slurm's auth/jwt plugin is missing (Debian: apt-get install "
                           "slurm-wlm-jwt-plugin slurmrestd)")
    key = Path(directory) / JWT_KEY
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    os.chmod(key, 0o600)
    return ("AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={key}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_jwt(key_file: str | Path, user: str, lifespan_s: int = 3600, now: float | None = None) -> str:
    """An HS256 token for ``user`` signed with slurmctld's own key (as ``scontrol token``
    makes, without asking slurmctld)."""
    key = Path(key_file).read_bytes()
    t = int(time.time() if now is None else now)
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps({"exp": t + int(lifespan_s), "iat": t, "sun": user},
                           separators=(",", ":")).encode())
    sig = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


def restd_user() -> tuple[int, int]:
    """The uid and gid slurmrestd runs as: ``nobody`` (it refuses root and SlurmUser)."""
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def start_slurmrestd(slurm_conf: str | Path, port: int, log_file: str | Path,
                     parsers: tuple[str, ...] = ()) -> subprocess.Popen:
    """slurmrestd on 127.0.0.1:``port`` with JWT auth; ``parsers``: the openapi plugins to
    load (empty: slurmrestd's default set). The caller stops it (``stop_slurmrestd``)."""
    exe = shutil.which("slurmrestd") or "/usr/sbin/slurmrestd"
    if not os.access(exe, os.X_OK):
        raise FileNotFoundError("slurmrestd is not installed (Debian: apt-get install slurmrestd "
                                "slurm-wlm-jwt-plugin)")
    uid, gid = restd_user()
    argv = [exe, "-f", str(slurm_conf), "-a", "rest_auth/jwt", "-u", str(uid), "-g", str(gid)]
    if parsers:
        argv += ["-s", ",".join(parsers)]
    argv.append(f"127.0.0.1:{int(port)}")
    env = dict(os.environ, SLURM_CONF=str(slurm_conf))
    # "daemon": slurmrestd speaks to slurmctld with auth/jwt, as each request's token
    # (the munge plugin refuses a caller's token: "Rejecting thread config token")
    env["SLURM_JWT"] = "daemon"
    out = open(log_file, "ab")
    try:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        out.close()


def stop_slurmrestd(p: subprocess.Popen, timeout_s: float = 10.0) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout_s)


__all__ = ["JWT_KEY", "restd_user", "sign_jwt", "start_slurmrestd", "stop_slurmrestd",
           "write_jwt_key"]
