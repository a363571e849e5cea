"""The durable job ledger and the worker, with real child processes on the real corpus."""
import json
import os
import re
import select
import signal
import sys
import time

import pytest

from lab.storage import checkpoints
from lab.worker import jobs
from lab.storage import store as lab_store
from lab.config import ConfigError
from lab.presets import get
from tests.conftest import wait_job

TINY_TRAIN = dict(get("tiny")[1].to_dict(), max_train=200, max_dev=50, epochs=2,
                  patience=5, tokenizer="words")     # a small output layer: cheap tiny runs


def _tiny_model():
    return get("tiny")[0].to_dict()


def _wait(job_id, statuses, timeout=240, worker=None):
    return wait_job(job_id, statuses, worker, timeout)


def test_bad_values_are_refused_before_queueing():
    with pytest.raises(ConfigError, match="not divisible by n_head"):
        jobs.submit("x", {**_tiny_model(), "n_head": 5}, TINY_TRAIN)
    with pytest.raises(ConfigError, match="lr must be between 1e-12"):
        jobs.submit("x", _tiny_model(), {**TINY_TRAIN, "lr": -1})
    assert jobs.list_jobs() == []


def test_job_runs_to_done_and_writes_a_checkpoint():
    job_id = jobs.submit("tinyjob", _tiny_model(), TINY_TRAIN, preset="tiny")
    worker = jobs.Worker(poll_s=0.2)
    job = _wait(job_id, jobs.FINAL, worker=worker)
    assert job["status"] == "done", job["error"]
    assert job["progress"]["event"] == "done"
    assert checkpoints.info("tinyjob")["metrics"]["epoch"] == 2


def test_worker_runs_a_job_under_torchrun(monkeypatch):
    """--nproc 2: the job trains in two gloo processes; rank 0 alone reports to the ledger."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    job_id = jobs.submit("ddpjob", _tiny_model(), {**TINY_TRAIN, "epochs": 1}, preset="tiny")
    worker = jobs.Worker(poll_s=0.2, nproc=2)
    job = _wait(job_id, jobs.FINAL, worker=worker)
    assert job["status"] == "done", job["error"]
    assert job["progress"]["event"] == "done"
    log = lab_store.log_path(job_id).read_text()
    assert "2 processes" in log and log.count("done: best epoch") == 1
    with pytest.raises(ConfigError, match="nproc must be at least 1"):
        jobs.Worker(nproc=0)


def test_stop_now_and_resume_after_a_crash():
    train = {**TINY_TRAIN, "epochs": 20, "max_train": 400}
    job_id = jobs.submit("crashy", _tiny_model(), train)
    worker = jobs.Worker(poll_s=0.2)
    # let it write one checkpoint, then kill its process as a crash would
    t0 = time.time()
    while "crashy" not in checkpoints.names() and time.time() - t0 < 240:
        worker.tick()
        time.sleep(0.5)
    os.kill(jobs.get(job_id)["pid"], signal.SIGKILL)
    job = _wait(job_id, jobs.FINAL, worker=worker)
    assert job["status"] == "interrupted"
    new_id = jobs.resume(job_id)
    resumed = jobs.get(new_id)
    assert resumed["spec"]["resume"] and resumed["resumed_from"] == job_id
    assert resumed["spec"]["train"]["epochs"] == 20           # the same run, going on
    assert jobs.resumes_from(new_id).startswith(" from step ")
    assert jobs.resumes_from(new_id).endswith("(its best checkpoint)")
    _wait(new_id, ("running",), worker=worker)
    jobs.request_stop(new_id, "now")
    job = _wait(new_id, jobs.FINAL, worker=worker)
    assert job["status"] == "stopped"


def test_stop_a_queued_job():
    job_id = jobs.submit("later", _tiny_model(), TINY_TRAIN)
    assert jobs.request_stop(job_id)["status"] == "stopped"
    with pytest.raises(ConfigError, match="only queued or running jobs stop"):
        jobs.request_stop(job_id)


def test_train_tab_reads_only_new_metric_lines(tmp_path):
    """The Train tab's 2-second poll parses what was appended since the last one; a half-written
    line waits for its end; a file started afresh is read from the top."""
    from lab.ui.jobs_view import _Curve
    path, curve = tmp_path / "metrics.jsonl", _Curve()
    path.write_text(json.dumps({"event": "step", "step": 20, "train_loss": 2.5}) + '\n{"event": "ev')
    assert curve.update(path).steps == [20] and curve.dev_steps == []
    with open(path, "a") as f:
        f.write('al", "step": 20, "dev_loss": 3.0}\n')
    assert curve.update(path).dev == [3.0] and curve.steps == [20]
    path.unlink()
    path.write_text(json.dumps({"event": "step", "step": 1, "train_loss": 9.0}) + "\n")
    assert curve.update(path).steps == [1] and curve.dev == []


def _open_files(proc: str) -> dict[int, str]:
    """A live process's descriptors and what each names (one it closes while they are read,
    its own file of the moment, is left out)."""
    held = {}
    for fd in os.listdir(f"{proc}/fd"):
        try:
            held[int(fd)] = os.readlink(f"{proc}/fd/{fd}")
        except FileNotFoundError:
            pass
    return held


def test_the_worker_forks_each_job_which_holds_its_lock_and_nothing_of_the_worker(store):
    """`lab worker` forks a job's process from itself (torch and the lab imported once, not in
    every job): the job is the worker's child, reads `lab run-job N` in ps, writes to the job's
    log, holds the job's lock and not the worker's, and stops and saves as any job does."""
    import subprocess
    import sys
    from tests.conftest import ROOT
    job_id = jobs.submit("forked", _tiny_model(), {**TINY_TRAIN, "epochs": 50, "max_train": 15000})
    with open(store.parent / "worker.log", "wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "lab", "worker"], stdout=log,
                                  stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait(job_id, ("running",))
        t0 = time.time()
        while not jobs.get(job_id)["pid"]:             # the job's process has said it is there
            assert time.time() - t0 < 120 and jobs.get(job_id)["status"] == "running", jobs.get(job_id)
            time.sleep(0.2)
        pid = jobs.get(job_id)["pid"]
        proc = f"/proc/{pid}"
        assert int(open(f"{proc}/stat").read().rsplit(")", 1)[1].split()[1]) == worker.pid
        assert open(f"{proc}/cmdline").read().rstrip("\0").split("\0")[-4:] == ["-m", "lab", "run-job",
                                                                             str(job_id)]
        held = set(_open_files(proc).values())
        assert str(lab_store.log_path(job_id)) in held
        assert str(lab_store.job_lock(job_id)) in held
        assert str(lab_store.lock_path("worker")) not in held
        jobs.request_stop(job_id, "now")
        assert _wait(job_id, jobs.FINAL)["status"] == "stopped"
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    said = lab_store.log_path(job_id).read_text()
    assert f"job {job_id} runs in a process forked from the worker (pid {worker.pid})" in said
    assert f"job {job_id}: stopped" in said


def test_a_worker_loads_what_jobs_need_once_before_its_first_fork(store, capsys):
    """`lab worker` loads torch's compiler stack and GPT-2's tokenizer once, before it forks its
    first job (each forked job then starts with them); it starts no thread doing so (a worker with
    another thread never forks), and a failure to load is one line, the jobs loading it themselves."""
    import threading
    from lab.cli.train import warm_for_jobs
    from lab.worker.jobs import Worker
    calls = []
    w = Worker(store, entry=lambda job_id: 0, warm=lambda: calls.append(1))
    w._warm()
    w._warm()
    assert calls == [1]
    Worker(store, entry=lambda job_id: 0, warm=lambda: 1 / 0)._warm()
    assert "worker: not preloaded for the jobs (ZeroDivisionError" in capsys.readouterr().out
    before = threading.active_count()
    warm_for_jobs()
    assert threading.active_count() == before and "torch._dynamo" in sys.modules


def _starter_pid(job_id) -> int | None:
    """The starter's pid as the job's log says it, None while the log does not (yet): the ledger
    marks a job running before its worker opens the log."""
    log = lab_store.log_path(job_id)
    said = log.exists() and re.search(r"forked from the worker's job starter \(pid (\d+)\)", log.read_text())
    return int(said.group(1)) if said else None


def _ended(pid, timeout=30) -> bool:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.2)
    return False


def _no_new_interpreter(monkeypatch):
    """The worker's fallback (a new `run-job` interpreter) refused: a job runs only if forked."""
    import subprocess
    import types

    def refuse(*args, **kwargs):
        raise AssertionError(f"a new interpreter was started: {args}")
    monkeypatch.setattr(jobs, "subprocess", types.SimpleNamespace(
        Popen=refuse, STDOUT=subprocess.STDOUT, TimeoutExpired=subprocess.TimeoutExpired))


def test_a_worker_inside_a_program_forks_its_jobs_from_one_starter(store, monkeypatch):
    """A worker made inside another program (here the test's, which has computed on threads and
    so must not fork) has its jobs forked by one starter process, its child in a session of its
    own, rather than starting an interpreter per job; their exit codes come back through it."""
    _no_new_interpreter(monkeypatch)
    worker = jobs.Worker(poll_s=0.2)
    first = [jobs.submit(f"s{i}", _tiny_model(), {**TINY_TRAIN, "epochs": 1}) for i in range(2)]
    procs = []
    for job_id in first:
        _wait(job_id, ("running",), worker=worker)
        procs.append(worker.children.get(job_id))
        assert _wait(job_id, jobs.FINAL, worker=worker)["status"] == "done"
    pid = _starter_pid(first[0])
    assert pid and pid == _starter_pid(first[1]) and pid != os.getpid()
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    assert int(stat[1]) == os.getpid() and int(stat[3]) == pid       # our child, its own session
    assert all(procs) and [p.wait(timeout=60) for p in procs] == [0, 0]    # the codes, from the starter


def test_a_job_from_the_starter_holds_its_log_and_lock_and_nothing_else(store, monkeypatch):
    """The starter's job is what `run-job` would be: `lab run-job N` in ps, the lab's folder its
    working folder, its standard streams the job's log (stdin /dev/null), the job's lock held and
    nothing of the starter's (its socket), and it stops as any job does."""
    from tests.conftest import ROOT
    _no_new_interpreter(monkeypatch)
    worker = jobs.Worker(poll_s=0.2)
    job_id = jobs.submit("held", _tiny_model(), {**TINY_TRAIN, "epochs": 50, "max_train": 15000})
    _wait(job_id, ("running",), worker=worker)
    t0 = time.time()
    while not jobs.get(job_id)["pid"] or _starter_pid(job_id) is None:
        assert time.time() - t0 < 120 and jobs.get(job_id)["status"] == "running", jobs.get(job_id)
        time.sleep(0.2)
    proc = f"/proc/{jobs.get(job_id)['pid']}"
    assert int(open(f"{proc}/stat").read().rsplit(")", 1)[1].split()[1]) == _starter_pid(job_id)
    assert open(f"{proc}/cmdline").read().rstrip("\0").split("\0")[-4:] == ["-m", "lab", "run-job", str(job_id)]
    assert os.readlink(f"{proc}/cwd") == str(ROOT)
    held = _open_files(proc)
    log, lock = str(lab_store.log_path(job_id)), str(lab_store.job_lock(job_id))
    assert held[0] == "/dev/null" and held[1] == held[2] == log and lock in held.values(), held
    # the rest are the job's own (the ledger, its data): no socket or pipe of the starter's
    assert not [f for f in held.values() if f.startswith(("socket:", "pipe:"))], held
    jobs.request_stop(job_id, "now")
    assert _wait(job_id, jobs.FINAL, worker=worker)["status"] == "stopped"


def test_another_environment_gets_another_starter_and_a_refusal_a_new_interpreter(store, monkeypatch,
                                                                                   capsys):
    """A job whose environment a process reads at start differs gets a new starter, and the old
    one ends; a starter refuses a job of an environment not its own, forking nothing and letting
    go of its descriptors; a starter that cannot take a job leaves it to a new interpreter, said
    in one line."""
    from tests.conftest import ROOT
    from lab.worker import starter
    worker = jobs.Worker(poll_s=0.2)
    before = jobs.submit("e0", _tiny_model(), {**TINY_TRAIN, "epochs": 1})
    assert _wait(before, jobs.FINAL, worker=worker)["status"] == "done"
    monkeypatch.setenv("PYTHONSTARTERTEST", "another")              # Python's: read as it starts
    after = jobs.submit("e1", _tiny_model(), {**TINY_TRAIN, "epochs": 1})
    assert _wait(after, jobs.FINAL, worker=worker)["status"] == "done"
    assert _starter_pid(after) not in (None, _starter_pid(before)) and _ended(_starter_pid(before))

    own = starter.Starter(dict(os.environ), str(ROOT))
    try:
        own.wait_ready()
        read, write = os.pipe()
        own.send(7, {**os.environ, "PYTHONSTARTERTEST": "yet another"}, write, read, str(ROOT))
        os.close(write)
        assert own.answer(7) == {"job": 7, "refused": "the job's environment is not the starter's"}
        assert select.select([read], [], [], 30)[0] and os.read(read, 1) == b""   # no copy left: nothing forked
        os.close(read)
    finally:
        own.close()

    def refuse(*args):
        raise OSError("refused here")
    monkeypatch.setattr(starter.Starter, "send", refuse)
    alone = jobs.submit("e2", _tiny_model(), {**TINY_TRAIN, "epochs": 1})
    assert _wait(alone, jobs.FINAL, worker=worker)["status"] == "done"
    assert _starter_pid(alone) is None and "forked" not in lab_store.log_path(alone).read_text()
    assert f"worker: no job starter (refused here); job {alone} starts as a new process" \
        in capsys.readouterr().out


def test_the_lab_reads_no_setting_of_its_own_as_a_module_loads():
    """A job starter serves jobs whatever the lab's own settings (LAB_*): they are read when a job
    runs, never at import, which a starter did once for all its jobs. No module of the lab or its
    plugins reads the environment outside a function."""
    import ast
    from tests.conftest import ROOT
    found = []
    for path in [*(ROOT / "lab").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        inside = {id(m) for f in functions for m in ast.walk(f) if m is not f}
        found += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv") and id(n) not in inside]
    assert found == []


def test_a_starter_ends_with_the_program_whose_worker_started_it(store):
    """Killed, the program's starter sees its socket close and ends; the job it forked runs on
    to its end, as a new interpreter's would."""
    import subprocess
    from tests.conftest import ROOT
    job_id = jobs.submit("orphan", _tiny_model(), {**TINY_TRAIN, "epochs": 3})
    program = subprocess.Popen([sys.executable, "-c", "import time\nfrom lab.worker import jobs\n"
                                "w = jobs.Worker(poll_s=0.2)\nwhile True:\n    w.tick(); time.sleep(0.2)"],
                               cwd=ROOT)
    try:
        _wait(job_id, ("running",))
        t0 = time.time()
        while _starter_pid(job_id) is None:
            assert time.time() - t0 < 120, lab_store.log_path(job_id).read_text()
            time.sleep(0.2)
    finally:
        program.kill()
        program.wait()
    assert _ended(_starter_pid(job_id))
    assert _wait(job_id, jobs.FINAL)["status"] == "done"


def test_a_job_the_starter_took_without_answering_is_never_started_twice(store, monkeypatch, capsys):
    """A starter that took a job and never answered (killed or hung at that moment) may have
    forked it: the worker then starts no second process for it, and follows it by its lock.
    Forked, the job runs to its end once; not forked, its free lock has it marked interrupted
    (resumable), not left running."""
    from lab.worker import starter
    _no_new_interpreter(monkeypatch)
    answer = starter.Starter.answer

    def lost(self, job_id):
        answer(self, job_id)                    # forked, and its answer lost on the way
        return {"lost": "lost here"}
    monkeypatch.setattr(starter.Starter, "answer", lost)
    worker = jobs.Worker(poll_s=0.2)
    forked_once = jobs.submit("lost-answer", _tiny_model(), {**TINY_TRAIN, "epochs": 1})
    assert _wait(forked_once, jobs.FINAL, worker=worker)["status"] == "done"
    t0 = time.time()
    while forked_once in worker.children:       # followed by its lock until the process is gone
        assert time.time() - t0 < 60
        worker.tick()
        time.sleep(0.2)
    assert not lab_store.is_held(lab_store.job_lock(forked_once))
    log = lab_store.log_path(forked_once).read_text()
    assert log.count("runs in a process forked from") == 1 and log.count(f"job {forked_once}: done") == 1
    assert f"worker: the job starter did not answer for job {forked_once} (lost here)" in capsys.readouterr().out
    monkeypatch.setattr(starter.Starter, "send", lambda self, *a: None)      # taken, never forked
    monkeypatch.setattr(starter.Starter, "answer", lambda self, job_id: {"lost": "lost here"})
    never = jobs.submit("never-forked", _tiny_model(), {**TINY_TRAIN, "epochs": 1})
    assert _wait(never, jobs.FINAL, worker=worker)["status"] == "interrupted"
    assert "runs in a process" not in lab_store.log_path(never).read_text()
