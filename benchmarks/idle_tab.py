"""What an open lab page costs while nothing happens: the app on a store holding one checkpoint,
its page open in Chromium on the first tab, then the CPU of Chromium's processes and of the app
(its worker included) over idle windows of 15 s.

    python benchmarks/idle_tab.py [REPO]      # REPO: the tree whose app to serve (default: this one)

Run it on two trees one after the other to compare them (docs/benchmarks.md, "The test suite")."""
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WINDOWS, SECONDS = 3, 15


def cpu(procs) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main() -> None:
    from playwright.sync_api import sync_playwright
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from lab.storage import checkpoints
    from tests.conftest import SERVED, serving, tiny_config
    store = Path(tempfile.mkdtemp())
    tok = tokenizers.gpt2()
    checkpoints.save(build(tiny_config(vocab_size=tok.vocab_size)), tok, "tiny", store)
    with serving(store) as url, sync_playwright() as pw:
        app = psutil.Process(SERVED[url].pid)
        served = {app.pid} | {p.pid for p in app.children(recursive=True)}
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("tab", name="Compare").wait_for()
        time.sleep(5)                                          # the page's load events done
        chromium = [p for p in psutil.Process().children(recursive=True) if p.pid not in served]
        ours = [app] + app.children(recursive=True)
        print(f"tree {ROOT}; each window {SECONDS} s, CPU seconds")
        for i in range(WINDOWS):
            b0, a0 = cpu(chromium), cpu(ours)
            time.sleep(SECONDS)
            print(f"  window {i + 1}: Chromium {cpu(chromium) - b0:.2f}, the app {cpu(ours) - a0:.2f}")
        browser.close()


if __name__ == "__main__":
    main()
