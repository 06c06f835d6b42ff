"""Small synthetic traces for the learned-scheduler tests."""

from __future__ import annotations

from pathlib import Path


def write_stuck_shorts_trace(path: Path, cycles: int = 220) -> Path:
    """4 nodes; each job takes the whole machine. Every cycle: a 100 s blocker, then a
    2,000 s job and five 20 s jobs arrive together while it runs (so the next head is
    chosen among all six). FCFS runs the long job first (the short ones wait ~2,000 s,
    bounded slowdown ~100); short-first is far better."""
    lines = ["; MaxNodes: 4", "; MaxProcs: 4"]
    number = 1
    for c in range(cycles):
        t0 = c * 5000
        rows = [(t0, 100, 100), (t0 + 1, 2000, 2000)] + [(t0 + 1, 20, 25) for k in range(5)]
        for submit, run, est in rows:
            lines.append(f"{number} {submit} -1 {run} 4 -1 -1 4 {est} -1 1 {1 + number % 3} "
                         "-1 -1 -1 -1 -1 -1")
            number += 1
    path.write_text("\n".join(lines) + "\n")
    return path


# JAX is multi-threaded: once imported, a later os.fork() in the same process (other
# tests fork workers) may deadlock. Training therefore runs in a child process.
def train_in_subprocess(config: dict, resume: bool = False, timeout: float = 600) -> dict:
    """Run ``coscheduler.learned.train.train(TrainConfig(**config))`` in a fresh Python
    process; returns its summary (model path, curve, header, figures, plot)."""
    import json
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from coscheduler.learned.train import TrainConfig, train\n"
            "args = json.load(sys.stdin)\n"
            "r = train(TrainConfig(**args['config']), resume=args['resume'])\n"
            "print(json.dumps({'path': str(r.path), 'curve': r.curve,"
            " 'resumed_from': r.resumed_from, 'figures': r.figures,"
            " 'plot': str(r.plot) if r.plot else None, 'header': r.model.header}))\n")
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(
        {"config": config, "resume": resume}), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"training failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jax_forward_in_subprocess(params: dict, kind: str, x) -> "object":
    """The JAX forward pass of the training code, computed in a child process."""
    import io
    import subprocess
    import sys

    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, __x__=np.asarray(x), **{k.replace("/", "|"): v for k, v in params.items()})
    code = ("import io, sys, numpy as np, jax.numpy as jnp\n"
            "from coscheduler.learned.ppo import _mlp, rl_row_scores\n"
            "z = np.load(io.BytesIO(sys.stdin.buffer.read()))\n"
            "p = {k.replace('|', '/'): jnp.asarray(z[k]) for k in z.files if k != '__x__'}\n"
            "x = jnp.asarray(z['__x__'], dtype=jnp.float32)\n"
            f"y = rl_row_scores(p, x) if {kind!r} == 'rlscheduler' else _mlp(p, 'pi', x)\n"
            "out = io.BytesIO(); np.save(out, np.asarray(y)); sys.stdout.buffer.write(out.getvalue())\n")
    proc = subprocess.run([sys.executable, "-c", code], input=buf.getvalue(),
                          capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(proc.stderr.decode()[-4000:])
    return np.load(io.BytesIO(proc.stdout))
