"""The task kinds: what one task of a group does with the CPU, memory, files and network.

A runner is created in the stage's main process, ``prepare``d there (input files, listening
sockets: things every worker must see), then each worker process calls ``setup`` once
(its buffers), ``run`` per task, and ``close``; the main process calls ``finish`` at the end.
All timings come from the group's definition (see definitions.TaskGroup).
"""

from __future__ import annotations

import shutil
import socket
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .burn import Burner, WaitFloor, new_buffer, read_file, write_file
from .definitions import TaskGroup
from .profile import buffer_bytes, file_bytes, message_bytes


@dataclass(frozen=True)
class StageContext:
    """Where a stage runs: the shared workdir (hand-offs between stages), its own scratch dir."""

    workflow: str
    stage: str
    scale: float
    workdir: Path
    scratch: Path
    # What one of the job's cores is worth in reference cores (emulated nodes): CPU work
    # shrinks by it so a stage keeps its CPU-to-wait ratio, and so its profile, there, and
    # each worker uses at most that share of a real CPU (Burner's speed), as a slow core.
    core_speed: float = 1.0


class Runner:
    def __init__(self, group: TaskGroup, ctx: StageContext, tasks: int, workers: int) -> None:
        self.group = group
        self.ctx = ctx
        self.tasks = tasks
        self.workers = workers
        self.cpu_s = group.cpu_s(ctx.scale) * ctx.core_speed
        self.wait_s = group.wait_s(ctx.scale)
        self.worker = 0

    def prepare(self) -> None:
        """In the main process, before the workers start."""

    def setup(self, worker: int) -> None:
        """In each worker, once."""
        self.worker = worker

    def run(self, task: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """In each worker, after its last task."""

    def finish(self) -> None:
        """In the main process, after every task finished."""


class FilesRunner(Runner):
    """Read inputs, compute, write outputs, in interleaved rounds (Montage, BLAST map, ...)."""

    def prepare(self) -> None:
        g, scale = self.group, self.ctx.scale
        self.in_dir = self.ctx.scratch / f"{g.name}-in"
        self.out_dir = (self.ctx.workdir / g.handoff_out if g.handoff_out
                        else self.ctx.scratch / f"{g.name}-out")
        self.in_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # Stage-in: the files a previous step would have left (shared by all tasks).
        self.inputs = [self.in_dir / f"in-{k}.dat" for k in range(g.files_in)]
        size = file_bytes(g.mb_in, g.files_in, scale)
        for k, path in enumerate(self.inputs):
            write_file(path, size, seed=1.0 + k)
        self.out_size = file_bytes(g.mb_out, g.files_out, scale)

    def setup(self, worker: int) -> None:
        super().setup(worker)
        self.burner = Burner(new_buffer(buffer_bytes(self.group, self.ctx.scale, self.workers)),
                             self.ctx.core_speed)

    def run(self, task: int) -> None:
        g = self.group
        rounds = g.rounds
        for r in range(rounds):
            with WaitFloor(self.wait_s / rounds / 2):
                for path in self.inputs[r::rounds]:
                    float(read_file(path)[::64].sum())  # touch what was read
            self.burner.seconds(self.cpu_s / rounds)
            with WaitFloor(self.wait_s / rounds / 2):
                for k in range(r, g.files_out, rounds):
                    write_file(self.out_dir / f"{g.name}-{task}-{k}.dat", self.out_size,
                               seed=float(task), fsync=k < g.fsync_outputs)


class MergeRunner(Runner):
    """Merge what a previous stage handed off (BLAST's hit tables) into one sorted file.

    With a shared ``--workdir`` the inputs are the map stage's outputs (consumed and
    removed); a stage run on its own writes stand-ins first, so it always merges real files.
    """

    def prepare(self) -> None:
        g = self.group
        self.out_dir = self.ctx.scratch / f"{g.name}-out"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        handoff = self.ctx.workdir / g.handoff_in if g.handoff_in else None
        found = sorted(handoff.glob("*.dat")) if handoff and handoff.is_dir() else []
        self.consume = bool(found)
        if not found:
            stand_in = self.ctx.scratch / f"{g.name}-stand-ins"
            stand_in.mkdir(parents=True, exist_ok=True)
            size = file_bytes(g.mb_in, 1, self.ctx.scale)
            found = [stand_in / f"hits-{k}.dat" for k in range(max(1, g.stand_ins))]
            for k, path in enumerate(found):
                write_file(path, size, seed=float(k))
        self.inputs = found

    def run(self, task: int) -> None:
        mine = self.inputs[task::self.tasks]
        with WaitFloor(self.wait_s / 2):
            parts = [read_file(p) for p in mine]
        merged = np.sort(np.concatenate(parts)) if parts else np.zeros(1)
        burner = Burner(new_buffer(max(merged.nbytes, 2**20)), self.ctx.core_speed)
        burner.seconds(self.cpu_s)
        with WaitFloor(self.wait_s / 2):
            out = self.out_dir / f"merged-{task}.dat"
            with open(out, "wb") as f:
                f.write(memoryview(merged).cast("B"))
            write_file(self.out_dir / f"merged-{task}.idx", 4096, fsync=True)
        if self.consume:
            for p in mine:
                p.unlink(missing_ok=True)


_REQ = struct.Struct("!I")
_REPLY = struct.Struct("!dd")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(buf)


def _serve_peer(conn: socket.socket) -> None:
    """Answer one peer: for each block of values received, reply with its mean and spread."""
    with conn:
        while True:
            head = _recv_exact(conn, _REQ.size)
            if head is None:
                return
            (n,) = _REQ.unpack(head)
            body = _recv_exact(conn, n)
            if body is None:
                return
            values = np.frombuffer(body, dtype=np.float64)
            conn.sendall(_REPLY.pack(float(values.mean()), float(values.std())))


def _accept_loop(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve_peer, args=(conn,), daemon=True).start()


class MessageRunner(Runner):
    """Compute a little, then exchange a block of values with a peer worker (Statistics).

    Every worker serves requests on its own loopback TCP port from a background thread, so
    a peer answers while it works on its own tasks; with one worker it talks to itself.
    """

    def prepare(self) -> None:
        self.listeners = []
        for _ in range(self.workers):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            self.listeners.append(s)
        self.ports = [s.getsockname()[1] for s in self.listeners]
        self.msg_bytes = message_bytes(self.group, self.ctx.scale)

    def setup(self, worker: int) -> None:
        super().setup(worker)
        threading.Thread(target=_accept_loop, args=(self.listeners[worker],), daemon=True).start()
        self.burner = Burner(new_buffer(buffer_bytes(self.group, self.ctx.scale, self.workers)),
                             self.ctx.core_speed)
        self.payload = np.linspace(0.0, 1.0, self.msg_bytes // 8)
        self.peers: dict[int, socket.socket] = {}

    def _peer(self, task: int, r: int) -> socket.socket:
        w = self.workers
        peer = self.worker if w == 1 else (self.worker + 1 + (task + r) % (w - 1)) % w
        sock = self.peers.get(peer)
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", self.ports[peer]))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.peers[peer] = sock
        return sock

    def run(self, task: int) -> None:
        rounds = self.group.rounds
        body = memoryview(self.payload).cast("B")
        for r in range(rounds):
            self.burner.seconds(self.cpu_s / rounds)
            with WaitFloor(self.wait_s / rounds):
                sock = self._peer(task, r)
                sock.sendall(_REQ.pack(len(body)))
                sock.sendall(body)
                reply = _recv_exact(sock, _REPLY.size)
                if reply is None:
                    raise ConnectionError(f"peer of worker {self.worker} closed the connection")

    def close(self) -> None:
        for s in self.peers.values():
            s.close()

    def finish(self) -> None:
        for s in self.listeners:
            s.close()


class MemLoadRunner(Runner):
    """Fill memory chunk by chunk and keep it: resident memory grows sequentially (Synthetic)."""

    def setup(self, worker: int) -> None:
        super().setup(worker)
        self.chunks: list[np.ndarray] = []
        self.chunk_bytes = buffer_bytes(self.group, self.ctx.scale, self.workers)

    def run(self, task: int) -> None:
        chunk = new_buffer(self.chunk_bytes, fill=1.0 + task)
        Burner(chunk, self.ctx.core_speed).seconds(self.cpu_s)
        self.chunks.append(chunk)

    def close(self) -> None:
        self.chunks.clear()


class MemComputeRunner(Runner):
    """Each worker holds its share of the array and streams adds and multiplies over it."""

    def setup(self, worker: int) -> None:
        super().setup(worker)
        share = new_buffer(buffer_bytes(self.group, self.ctx.scale, self.workers), fill=1.0)
        self.burner = Burner(share, self.ctx.core_speed)

    def run(self, task: int) -> None:
        self.burner.seconds(self.cpu_s)

    def close(self) -> None:
        del self.burner


RUNNERS: dict[str, type[Runner]] = {
    "files": FilesRunner,
    "merge": MergeRunner,
    "message": MessageRunner,
    "memload": MemLoadRunner,
    "memcompute": MemComputeRunner,
}


def make_runner(group: TaskGroup, ctx: StageContext, tasks: int, workers: int) -> Runner:
    return RUNNERS[group.kind](group, ctx, tasks, workers)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
