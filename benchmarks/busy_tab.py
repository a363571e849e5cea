"""What a lab page costs while a job trains: the app on a store holding one queued tiny job, its
page opened on the Train tab (the job's view follows it: progress, loss curves, log), and the CPU
of Chromium's processes and of the app over three windows of 15 s while the job runs. With
--skip PART[,PART] the job view leaves those parts as they are (progress, plot, tail, written),
to see what each costs.

    python benchmarks/busy_tab.py [--skip PARTS] [REPO]

A companion of benchmarks/idle_tab.py (the same page with nothing running)."""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import cpu_seconds as cpu  # noqa: E402  (this tree's, whatever REPO is)

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("repo", nargs="?", default=str(Path(__file__).resolve().parents[1]))
ARGS.add_argument("--skip", default="", help="job-view parts left as they are")
OPTS = ARGS.parse_args()
ROOT = Path(OPTS.repo).resolve()
sys.path.insert(0, str(ROOT))
WINDOWS, SECONDS = 3, 15
PARTS = ("progress", "plot", "tail", "written")



def skipping(skip: set[str]) -> None:
    """The app's job view with some parts left as they are (set in the app's process through
    a module it imports first: sitecustomize on its path)."""
    folder = Path(tempfile.mkdtemp())
    (folder / "sitecustomize.py").write_text(
        "import gradio as gr\n"
        "import lab.ui.jobs_view as v\n"
        "_view = v.view\n"
        f"_skip = {sorted(skip)!r}\n"
        f"_parts = {PARTS!r}\n"
        "def view(*a, **k):\n"
        "    return tuple(gr.skip() if p in _skip else x for p, x in zip(_parts, _view(*a, **k)))\n"
        "v.view = view\n")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)])


def main() -> None:
    from playwright.sync_api import sync_playwright
    from lab.presets import configs
    from lab.worker import jobs
    from tests.conftest import SERVED, serving
    from tests.test_browser import CHROMIUM
    skip = {p for p in OPTS.skip.split(",") if p}
    if skip - set(PARTS):
        raise SystemExit(f"--skip takes {', '.join(PARTS)}")
    if skip:
        skipping(skip)
    store = Path(tempfile.mkdtemp())
    model, train, _ = configs("tiny", ["epochs=30", "log_every=5"])
    jobs.submit("busy", model.to_dict(), train.to_dict(), store=store)
    with serving(store) as url, sync_playwright() as pw:
        app = psutil.Process(SERVED[url].pid)
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("tab", name="Train").click()
        t0 = time.time()
        while jobs.get(1, store)["progress"].get("event") != "step":      # training, its view open
            if time.time() - t0 > 120:
                raise SystemExit("the job did not start training within 120 s")
            time.sleep(0.5)
        time.sleep(5)
        served = {app.pid} | {p.pid for p in app.children(recursive=True)}
        chromium = [p for p in psutil.Process().children(recursive=True) if p.pid not in served]
        print(f"tree {ROOT}; job view parts left as they are: {sorted(skip) or 'none'}; CPU seconds")
        for i in range(WINDOWS):
            b0, a0 = cpu(chromium), cpu([app])
            time.sleep(SECONDS)
            print(f"  a job training, {SECONDS} s, window {i + 1}: Chromium {cpu(chromium) - b0:.2f}, "
                  f"the app {cpu([app]) - a0:.2f}", flush=True)
        jobs.request_stop(1, "now", store)
        browser.close()


if __name__ == "__main__":
    main()
