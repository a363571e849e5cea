"""The Ray executor for real: a local Ray instance on the CPU runs each run of a sweep as a Ray
task; the ledger stays the record, the table reads the same as with the local worker."""
import json
import subprocess
import sys

from lab.worker import jobs
from lab import sweeps
from lab.storage import store as lab_store
from tests.conftest import ROOT


def test_a_sweep_runs_as_ray_tasks_on_a_local_instance(store):
    out = subprocess.run([sys.executable, "-m", "lab", "--store", str(store), "sweep", "start", "r",
                          "--preset", "tiny", "--grid", "n_layer=1,2", "--set", "max_train=100",
                          "--set", "max_dev=30", "--set", "epochs=1", "--n", "12",
                          "--set", "tokenizer=words",         # a small output layer: cheap runs
                          "--executor", "ray", "--wait", "--json"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**__import__("os").environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-3000:]
    table = json.loads(out.stdout)
    assert [r["status"] for r in table["rows"]] == ["done", "done"]
    assert all(r["harmonic_bleu_ci"] for r in table["rows"])
    _, runs = sweeps.get("r", store)
    for r in runs:
        log = lab_store.log_path(r["job"]["id"], store).read_text()
        assert "ray: job" in log and "runs on node" in log, log[-2000:]
        assert r["job"]["status"] == "done" and r["job"]["error"] is None
    assert not any(j["status"] == "running" for j in jobs.list_jobs(store))
