"""What an open lab page costs: the app on a store holding one checkpoint, its page opened three
times in Chromium (the whole machine's CPU while they load, the app's included), then left open on
the first tab: the CPU of Chromium's processes and of the app (its worker included) over idle
windows of 15 s.

    python benchmarks/idle_tab.py [--browser PATH] [REPO]

REPO: the tree whose app to serve (default: this one); --browser: the Chromium to drive (default:
the browser tests' own, tests/test_browser.py). Run it on two trees, or with two browsers, one
after the other to compare them (docs/benchmarks.md, "The test suite")."""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import cpu_seconds as cpu  # noqa: E402  (this tree's, whatever REPO is)

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("repo", nargs="?", default=str(Path(__file__).resolve().parents[1]))
ARGS.add_argument("--browser", default=None)
OPTS = ARGS.parse_args()
ROOT = Path(OPTS.repo).resolve()
sys.path.insert(0, str(ROOT))
LOADS, WINDOWS, SECONDS = 3, 3, 15



def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (every process, those that ended too)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.get_by_role("tab", name="Compare").wait_for()
    return page


def main() -> None:
    from playwright.sync_api import sync_playwright
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from lab.storage import checkpoints
    from tests.conftest import SERVED, serving, tiny_config
    from tests.test_browser import CHROMIUM
    store = Path(tempfile.mkdtemp())
    tok = tokenizers.gpt2()
    checkpoints.save(build(tiny_config(vocab_size=tok.vocab_size)), tok, "tiny", store)
    with serving(store) as url, sync_playwright() as pw:
        app = psutil.Process(SERVED[url].pid)
        served = {app.pid} | {p.pid for p in app.children(recursive=True)}
        browser = pw.chromium.launch(executable_path=OPTS.browser or CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        print(f"tree {ROOT}; browser {OPTS.browser or CHROMIUM}; CPU seconds")
        open_page(browser, url).close()                        # the app's first answers warm
        busy, t0 = machine_cpu(), time.time()
        for _ in range(LOADS):
            open_page(browser, url).close()
        print(f"  {LOADS} page loads: machine {machine_cpu() - busy:.2f} ({time.time() - t0:.1f} s wall)")
        page = open_page(browser, url)
        time.sleep(5)                                          # the page's load events done
        chromium = [p for p in psutil.Process().children(recursive=True) if p.pid not in served]
        ours = [app] + app.children(recursive=True)
        for i in range(WINDOWS):
            b0, a0 = cpu(chromium), cpu(ours)
            time.sleep(SECONDS)
            print(f"  idle {SECONDS} s, window {i + 1}: Chromium {cpu(chromium) - b0:.2f}, "
                  f"the app {cpu(ours) - a0:.2f}")
        browser.close()


if __name__ == "__main__":
    main()
