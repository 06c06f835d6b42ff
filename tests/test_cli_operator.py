"""`cosched experts` and `cosched decisions` on a state database filled by a real learner run:
human output fits 80 columns, --json has the documented shapes, errors are clean."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.learner import AsaxLearner
from coscheduler.store import SqliteStore

from store_workload import CONFIG, drive


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """(db path, the learner that wrote it, the run's MemoryRecorder twin is not needed)."""
    path = tmp_path_factory.mktemp("cli") / "state.db"
    learner = AsaxLearner(CONFIG)
    with SqliteStore(path, create=True, synchronous="NORMAL") as store:
        drive(learner, store, max_commits=400)
    return path, learner


def run(*args: str, env: dict | None = None):
    result = CliRunner().invoke(main, list(args), env=env)
    return result


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def fits_80(text: str) -> None:
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert not too_long, too_long


def clean_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)      # a message, not a traceback
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, result.output


# -- experts show ---------------------------------------------------------------------------------
def test_experts_show_json_shape(filled):
    path, learner = filled
    data = json.loads(ok("experts", "show", "--db", str(path), "--json"))
    assert data["db"] == str(path)
    assert [c["class"] for c in data["classes"]] == learner.known_classes()
    for c in data["classes"]:
        assert {"class", "rounds", "weights"} <= set(c)
        st = learner.class_state(c["class"])
        assert c["rounds"] == st.rounds and isinstance(c["rounds"], int)
        assert c["weights"] == learner.weights(c["class"])
        assert list(c["weights"]) == ["cpu", "mem", "stage", "elapsed", "fitted"]
        assert sum(c["weights"].values()) == pytest.approx(1.0)
        assert c["decisions"] == st.decisions and c["last_update"] == st.last_update
    assert any(c["rounds"] > 0 for c in data["classes"])   # the run did learn something


def test_experts_show_human(filled):
    path, learner = filled
    out = ok("experts", "show", "--db", str(path))
    fits_80(out.replace(str(path), "state.db"))   # (the path's length is the user's)
    assert str(path) in out
    for job_class in learner.known_classes():
        assert job_class in out
        st = learner.class_state(job_class)
        assert f"rounds {st.rounds}" in out
        assert f"{100 * st.weights[0]:.1f} %" in out


def test_experts_show_one_class(filled):
    path, _ = filled
    data = json.loads(ok("experts", "show", "--db", str(path), "--class", "blast/blastall", "--json"))
    assert [c["class"] for c in data["classes"]] == ["blast/blastall"]
    out = ok("experts", "show", "--db", str(path), "--class", "blast/blastall")
    assert "blast/blastall" in out and "montage/mProject" not in out


def test_experts_show_unknown_class(filled):
    path, _ = filled
    clean_error(run("experts", "show", "--db", str(path), "--class", "nope/x"),
                "unknown job class 'nope/x'", str(path), "blast/blastall")


# -- experts history --------------------------------------------------------------------------------
def test_experts_history(filled):
    path, learner = filled
    job_class = max(learner.known_classes(), key=lambda c: learner.class_state(c).rounds)
    st = learner.class_state(job_class)
    data = json.loads(ok("experts", "history", job_class, "--db", str(path), "--json"))
    assert data["class"] == job_class and data["experts"] == list(st.expert_names)
    assert [r["round"] for r in data["rounds"]] == list(range(1, st.rounds + 1))
    assert list(data["rounds"][-1]["weights"].values()) == st.weights
    gammas = [r["gamma"] for r in data["rounds"]]
    assert gammas == sorted(gammas, reverse=True)              # non-increasing gamma_t
    out = ok("experts", "history", job_class, "--db", str(path))
    fits_80(out)
    lines = out.splitlines()
    assert f"({st.rounds} closed rounds)" in lines[0]
    assert "(start)" in out and len(lines) == 2 + 1 + st.rounds


def test_experts_history_unknown_class(filled):
    path, _ = filled
    clean_error(run("experts", "history", "nope/x", "--db", str(path)), "unknown job class 'nope/x'")


# -- decisions ------------------------------------------------------------------------------------
def test_decisions_list_json_shape(filled):
    path, learner = filled
    data = json.loads(ok("decisions", "list", "--db", str(path), "--last", "12", "--json"))
    rows = data["decisions"]
    assert len(rows) == 12
    for r in rows:
        assert set(r) == {"id", "time", "host_job", "guest_job", "job_class", "action_fraction", "loss"}
    ids = [r["id"] for r in rows]
    assert ids == list(range(learner.next_decision_id - 12, learner.next_decision_id))
    pending = set(learner.pending)
    assert pending & set(ids)                    # the newest ones are still open...
    for r in rows:                               # ...and their loss is null until known
        assert (r["loss"] is None) == (r["id"] in pending)
        assert r["host_job"] == f"host{r['id'] - 1}"


def test_decisions_list_human_and_class_filter(filled):
    path, _ = filled
    out = ok("decisions", "list", "--db", str(path))
    fits_80(out)
    assert len(out.splitlines()) == 2 + 20            # title, header, default --last 20
    assert "pending" in out
    data = json.loads(ok("decisions", "list", "--db", str(path), "--class", "stats/aggregate", "--json"))
    assert data["decisions"] and {r["job_class"] for r in data["decisions"]} == {"stats/aggregate"}


def test_decisions_list_rejects_bad_last(filled):
    path, _ = filled
    result = run("decisions", "list", "--db", str(path), "--last", "0")
    assert result.exit_code == 2 and "--last" in result.output


def test_decisions_show(filled):
    path, learner = filled
    with SqliteStore(path, readonly=True) as s:
        observed = s.load().observed
    d, loss = observed[-1]
    data = json.loads(ok("decisions", "show", str(d.decision_id), "--db", str(path), "--json"))["decision"]
    assert data["id"] == d.decision_id and data["host_job"] == d.host_job
    assert data["state"] == d.state.to_dict()
    assert [e["name"] for e in data["experts"]] == list(d.expert_names)
    assert [e["distribution"] for e in data["experts"]] == [list(p) for p in d.expert_dists]
    assert data["mixture"] == list(d.mixture) and data["action_index"] == d.action_index
    assert data["host_quota"] == pytest.approx(1 - d.action_fraction)
    assert data["outcome"]["loss"] == loss and data["outcome"]["kind"] == "degradation"
    out = ok("decisions", "show", str(d.decision_id), "--db", str(path))
    fits_80(out)
    chosen = [line for line in out.splitlines() if "<- chosen" in line]
    assert len(chosen) == 1 and chosen[0].split()[0] == f"{100 * d.action_fraction:.0f}"
    assert f"loss {loss:.3f} (degradation)" in out

    pending_id = max(learner.pending)
    data = json.loads(ok("decisions", "show", str(pending_id), "--db", str(path), "--json"))
    assert data["decision"]["outcome"] is None
    assert "pending" in ok("decisions", "show", str(pending_id), "--db", str(path))


@pytest.mark.parametrize("column,value", [("host_quota", "NaN"), ("guest_quota", "lots"),
                                          ("host_quota", 7.5)])
def test_decisions_show_names_a_tampered_quota(filled, tmp_path, column, value):
    """Issue 19: a NaN (or text, or out-of-range) quota in the state database is a one-line
    error naming the file, the decision and the field; the file is not changed."""
    import shutil
    import sqlite3
    src, _ = filled
    path = tmp_path / "tampered.db"
    shutil.copy(src, path)
    con = sqlite3.connect(path)
    decision_id = con.execute("SELECT MIN(id) FROM decisions").fetchone()[0]
    con.execute(f"UPDATE decisions SET {column} = ? WHERE id = ?", (value, decision_id))
    con.commit()
    con.close()
    what = column.replace("_", " ")
    clean_error(run("decisions", "show", str(decision_id), "--db", str(path)),
                str(path), f"decision {decision_id}", what)
    # the other decisions still read
    assert ok("decisions", "list", "--db", str(path), "--last", "3")


def test_decisions_show_unknown_id(filled):
    path, _ = filled
    clean_error(run("decisions", "show", "99999", "--db", str(path)), "unknown decision id 99999", str(path))


# -- the database itself ---------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["experts", "show"], ["experts", "history", "a/b"],
                                     ["decisions", "list"], ["decisions", "show", "1"]])
def test_read_commands_never_create_a_database(tmp_path, command):
    path = tmp_path / "nowhere" / "state.db"
    clean_error(run(*command, "--db", str(path)), f"no state database at {path}")
    assert not path.exists() and not path.parent.exists()


def test_cosched_db_variable_is_the_default(filled, tmp_path):
    path, _ = filled
    data = json.loads(run("experts", "show", "--json", env={"COSCHED_DB": str(path)}).output)
    assert data["db"] == str(path)
    missing = tmp_path / "missing.db"
    clean_error(run("decisions", "list", env={"COSCHED_DB": str(missing)}), str(missing))


def test_foreign_and_garbage_files_give_clean_errors(tmp_path):
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE photos (id INTEGER)")
    con.commit()
    con.close()
    clean_error(run("experts", "show", "--db", str(foreign)), str(foreign), "another program")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00\x01not a database at all" * 100)
    clean_error(run("decisions", "list", "--db", str(garbage)), str(garbage), "not an SQLite database")


def test_empty_store(tmp_path):
    path = tmp_path / "state.db"
    SqliteStore(path, create=True).close()
    assert json.loads(ok("experts", "show", "--db", str(path), "--json"))["classes"] == []
    assert json.loads(ok("decisions", "list", "--db", str(path), "--json"))["decisions"] == []
    assert "No job class learned yet" in ok("experts", "show", "--db", str(path))
    assert "No decision recorded yet" in ok("decisions", "list", "--db", str(path))
