"""What an open lab page costs: the app on a store holding one checkpoint, its page opened three
times in Chromium (the whole machine's CPU while they load, the app's included), then left open on
the first tab: the CPU of Chromium's processes and of the app (its worker included) over idle
windows of 15 s.

    python benchmarks/idle_tab.py [--browser PATH] [--empty] [--one-context] [REPO]

REPO: the tree whose app to serve (default: this one); --browser: the Chromium to drive (default:
the browser tests' own, tests/conftest.py); --empty: a store with no checkpoint (the page opens
with the getting-started panel open); --one-context: every page in one browser context (as the
browser tests open theirs: a page finds what the one before fetched and compiled), not each in a
fresh one. Run it on two trees, or with two browsers, one after the other to compare them
(docs/benchmarks.md, "The test suite")."""
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
ARGS.add_argument("--empty", action="store_true", help="a store with no checkpoint")
ARGS.add_argument("--one-context", action="store_true", help="every page in one browser context")
OPTS = ARGS.parse_args()
ROOT = Path(OPTS.repo).resolve()
sys.path.insert(0, str(ROOT))
LOADS, WINDOWS, SECONDS = 3, 3, 15



def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (every process, those that ended too)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq


def open_page(browser, url):
    """A page on url, in a fresh context (a Browser) or in one context (a BrowserContext)."""
    page = browser.new_page(**({} if OPTS.one_context else {"viewport": {"width": 1400, "height": 1000}}))
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
    if not OPTS.empty:
        tok = tokenizers.gpt2()
        checkpoints.save(build(tiny_config(vocab_size=tok.vocab_size)), tok, "tiny", store)
    with serving(store) as url, sync_playwright() as pw:
        app = psutil.Process(SERVED[url].pid)
        served = {app.pid} | {p.pid for p in app.children(recursive=True)}
        browser = pw.chromium.launch(executable_path=OPTS.browser or CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        if OPTS.one_context:
            browser = browser.new_context(viewport={"width": 1400, "height": 1000})
        print(f"tree {ROOT}; browser {OPTS.browser or CHROMIUM}; "
              f"{'an empty store' if OPTS.empty else 'a checkpoint'}; "
              f"{'one context' if OPTS.one_context else 'a context a page'}; CPU seconds")
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
        (browser.browser if OPTS.one_context else browser).close()


if __name__ == "__main__":
    main()
