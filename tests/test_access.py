"""What the web lab may touch beyond its store (LAB_ALLOWED_DIRS), its login (LAB_AUTH): nothing but
the login page before it, on every route the app has, and failed logins slowed per client address;
the warning when it is reachable without one; and concurrent first loads in a fresh process."""
import asyncio
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lab.storage import checkpoints
from lab.inputs import tokenizers
from lab.storage import store as lab_store
from lab.modeling.model import build
from lab.ui import checkpoints as tab
from lab.ui import build_app, launch_kwargs
from lab.ui.access import LoginGate, Throttle, client_address
from lab.ui.first_script import FirstScript
from lab.ui.pulse import PulseStamp
from tests.conftest import free_port, start_app, tiny_config

ROOT = Path(__file__).resolve().parent.parent


def _hf_dir(path: Path) -> Path:
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=32, n_embd=32, n_layer=2, n_head=4)
                    ).save_pretrained(str(path))
    return path


def test_the_ui_reads_and_writes_server_folders_only_where_allowed(tmp_path, monkeypatch):
    outside = _hf_dir(tmp_path / "outside" / "gpt2")
    monkeypatch.delenv("LAB_ALLOWED_DIRS", raising=False)
    with pytest.raises(lab_store.StoreError, match="unless it is started with LAB_ALLOWED_DIRS") as off:
        tab.import_hf(str(outside), "", "imp")
    with pytest.raises(lab_store.StoreError) as missing:
        tab.import_hf(str(tmp_path / "no-such-folder"), "", "imp")
    assert str(off.value) == str(missing.value)        # nothing said about what exists
    allowed = tmp_path / "allowed"
    monkeypatch.setenv("LAB_ALLOWED_DIRS", str(allowed))
    with pytest.raises(lab_store.StoreError, match="is outside the folders this lab may use"):
        tab.import_hf(str(outside), "", "imp")
    with pytest.raises(lab_store.StoreError, match="is outside"):
        tab.import_hf(str(allowed / ".." / "outside" / "gpt2"), "", "imp")     # no escaping by ..
    _hf_dir(allowed / "gpt2")
    message, _ = tab.import_hf(str(allowed / "gpt2"), "1", "imp")
    assert "Imported **imp**" in message and checkpoints.info("imp")["model"]["n_layer"] == 1
    with pytest.raises(lab_store.StoreError, match="is outside"):
        tab.export_hf("imp", str(tmp_path / "elsewhere"))
    message, download = tab.export_hf("imp", str(allowed / "exported"))
    assert download is None and (allowed / "exported" / "config.json").is_file()


def test_a_symbolic_link_inside_an_allowed_folder_leads_nowhere_else(tmp_path, monkeypatch, store):
    """An HF folder under LAB_ALLOWED_DIRS whose weights link outside it, a corpus folder whose
    data file does, and a loop of links: each refused in one line, nothing imported."""
    from plugins.tasks.text import view as data_tab
    outside = _hf_dir(tmp_path / "outside" / "gpt2")
    allowed = tmp_path / "allowed"
    monkeypatch.setenv("LAB_ALLOWED_DIRS", str(allowed))
    linked = allowed / "gpt2"
    linked.mkdir(parents=True)
    (linked / "config.json").write_bytes((outside / "config.json").read_bytes())
    (linked / "model.safetensors").symlink_to(outside / "model.safetensors")
    with pytest.raises(lab_store.StoreError) as e:
        tab.import_hf(str(linked), "", "imp")
    assert str(e.value) == (f"import: 'model.safetensors' inside {str(linked)!r} leads outside the "
                            f"folders this lab may use (a symbolic link)")
    corpus = allowed / "corpus"
    corpus.mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("a line from outside\n")
    (corpus / "data.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    with pytest.raises(lab_store.StoreError, match="'data.txt' inside .* leads outside"):
        data_tab.import_folder(str(corpus), "mine", "", 0.05, store=store)
    loop = allowed / "loop"
    loop.symlink_to(loop)
    with pytest.raises(lab_store.StoreError, match=r"^import: '.*loop' is a loop of symbolic links$"):
        tab.import_hf(str(loop), "", "imp")
    assert checkpoints.names(store) == []


def test_export_without_a_folder_is_a_download_from_the_store(monkeypatch):
    monkeypatch.delenv("LAB_ALLOWED_DIRS", raising=False)
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "m")
    message, archive = tab.export_hf("m", "")
    assert Path(archive).parent == lab_store.state_dir(None, "exports")
    names = zipfile.ZipFile(archive).namelist()
    assert "config.json" in names and "model.safetensors" in names
    assert str(lab_store.state_dir(None, "exports")) in launch_kwargs()["allowed_paths"]


def test_login_and_the_warning_for_an_open_lab(monkeypatch, capsys):
    monkeypatch.delenv("LAB_AUTH", raising=False)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "127.0.0.1")
    assert "auth" not in launch_kwargs() and capsys.readouterr().err == ""
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    launch_kwargs()
    assert "warning: the lab listens on 0.0.0.0" in capsys.readouterr().err
    monkeypatch.setenv("LAB_AUTH", "ada:secret")
    kwargs = launch_kwargs()
    assert kwargs["auth"] == ("ada", "secret") and capsys.readouterr().err == ""
    assert [m.cls for m in kwargs["app_kwargs"]["middleware"]] == [FirstScript, LoginGate, PulseStamp]
    for bad in ("nocolon", ":pw", "user:"):
        monkeypatch.setenv("LAB_AUTH", bad)
        with pytest.raises(Exception, match="LAB_AUTH must be user:password"):
            launch_kwargs()


def test_the_app_with_a_login_refuses_api_calls_without_it(tmp_path):
    """A real app with LAB_AUTH: the API answers nothing without the password."""
    import urllib.error
    import urllib.request
    proc, url = start_app(tmp_path / "store", tmp_path / "app.log", LAB_AUTH="ada:secret", LAB_WORKER="0")
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "config", timeout=5)
        assert refused.value.code in (401, 403)
        from gradio_client import Client
        with pytest.raises(Exception):
            Client(url, verbose=False)
        assert Client(url, auth=("ada", "secret"), verbose=False).predict(api_name="/checkpoints")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """The app with a login, built and launched here as app.py does it (so that the test can list
    the routes of the very app that serves): yields (the FastAPI app, its URL)."""
    store = tmp_path_factory.mktemp("gated-store")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LAB_AUTH", "ada:secret")
        env.setenv("GRADIO_SERVER_PORT", str(free_port()))
        env.delenv("FORWARDED_ALLOW_IPS", raising=False)   # launch_kwargs sets it; gone after
        kwargs = launch_kwargs(store=str(store))
        demo = build_app(store=str(store))
        demo.queue(default_concurrency_limit=4).launch(prevent_thread_lock=True, quiet=True, **kwargs)
    try:
        yield demo.app, f"http://127.0.0.1:{kwargs['server_port']}"
    finally:
        demo.close()


def _routes(routes, prefix: str = ""):
    """(path, methods) of every route an app answers: its own, its routers', its mounts'."""
    from starlette.routing import Mount, WebSocketRoute
    for r in routes:
        if hasattr(r, "original_router"):                    # a router FastAPI includes lazily
            yield from _routes(r.original_router.routes, prefix + r.include_context.prefix)
        elif isinstance(r, Mount):
            yield from _routes(r.routes, prefix + r.path) if r.routes else \
                [(prefix + r.path + "/{rest:path}", {"GET"})]
        elif isinstance(r, WebSocketRoute) or type(r).__name__ == "APIWebSocketRoute":
            yield prefix + r.path, {"WEBSOCKET"}
        else:
            assert hasattr(r, "path"), f"a route of a kind this test does not know: {r!r}"
            yield prefix + r.path, set(getattr(r, "methods", None) or {"GET"})


# what answers before login: the login page, the files it draws with, the login itself
LOGIN_PAGE = {("/", "GET"), ("/", "HEAD"), ("/theme.css", "GET"), ("/favicon.ico", "GET"),
              ("/assets/{path:path}", "GET"), ("/static/{path:path}", "GET"),
              ("/login", "POST"), ("/login/", "POST")}


def _probe(client, path: str, method: str):
    url = re.sub(r"\{[^}]*\}", "x", re.sub(r"\{[^}:]*:path\}", "x/y", path))
    if method == "WEBSOCKET":
        return client.get(url, headers={"connection": "upgrade", "upgrade": "websocket",
                                        "sec-websocket-version": "13",
                                        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="})
    return client.request(method, url)


def test_before_login_every_route_but_the_login_page_is_refused(gated):
    """Every route of the app (Gradio's, FastAPI's, any a later Gradio adds) without the login
    cookie: refused (401, 403 or a redirect), except the login page and the files it needs."""
    import httpx
    app, url = gated
    routes = sorted(_routes(app.routes))
    assert len(routes) > 60 and ("/openapi.json", {"GET", "HEAD"}) in routes
    answered = set()
    with httpx.Client(base_url=url, timeout=30) as client:
        for path, methods in routes:
            for method in sorted(methods):
                status = _probe(client, path, method).status_code
                if status not in (401, 403) and not 300 <= status < 400:
                    answered.add((path, method))
        page = client.get("/")
        assert '{"auth_required":true' in page.text and "compare-out" not in page.text  # no lab
        assert client.get("/gradio_api/file=" + str(ROOT / "README.md")).status_code == 401
        assert client.get("/lab/pulse").status_code == 401          # the pulse's middleware too
    assert answered == LOGIN_PAGE, answered ^ LOGIN_PAGE
    with httpx.Client(base_url=url, timeout=30) as client:            # logged in: all of it
        assert client.post("/login", data={"username": "ada", "password": "secret"}).status_code == 200
        assert "compare-out" in client.get("/config").text
        assert client.get("/lab/pulse").status_code == 200
        assert client.get("/openapi.json").status_code == 200


def test_failed_logins_slow_down_per_client_address(gated):
    """30 wrong passwords at once from one address (127.0.0.2): the first few are checked, the
    rest refused unchecked with how long to wait, and so is the right password from there; another
    address (127.0.0.1) logs in at once."""
    import concurrent.futures
    import time
    import httpx
    _, url = gated
    attacker = httpx.Client(base_url=url, timeout=30,
                            transport=httpx.HTTPTransport(local_address="127.0.0.2"))

    def attempt(password):
        return attacker.post("/login", data={"username": "ada", "password": password})
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(attempt, [f"guess{i}" for i in range(30)]))
    took = time.perf_counter() - t0
    checked = [a for a in answers if a.status_code == 400]
    refused = [a for a in answers if a.status_code == 429]
    assert len(checked) == Throttle.free + 1 and len(refused) == 30 - len(checked), \
        [a.status_code for a in answers]
    said = refused[-1].json()["detail"]
    assert re.fullmatch(r"too many failed logins from 127\.0\.0\.2: try again in \d+ s", said), said
    assert int(refused[-1].headers["retry-after"]) >= 1
    assert attempt("secret").status_code == 429                       # the right one waits too
    with httpx.Client(base_url=url, timeout=30) as other:
        assert other.post("/login", data={"username": "ada", "password": "secret"}).status_code == 200
        assert other.get("/config").status_code == 200
    attacker.close()
    print(f"30 wrong logins: {len(checked)} checked, {len(refused)} refused, {took:.2f} s")


def test_a_forged_forwarded_address_does_not_reset_the_throttle(gated):
    """From the loopback address (which uvicorn would believe by default), each wrong password
    claims another client in X-Forwarded-For: the throttle counts the connection, so the right
    password then waits too. (The last test on this app: 127.0.0.1 stays throttled.)"""
    import httpx
    _, url = gated
    with httpx.Client(base_url=url, timeout=30) as forger:
        codes = [forger.post("/login", data={"username": "ada", "password": f"guess{i}"},
                             headers={"X-Forwarded-For": f"10.0.{i}.1"}).status_code for i in range(12)]
        assert codes[:Throttle.free + 1] == [400] * (Throttle.free + 1) and set(codes[Throttle.free + 1:]) == {429}
        right = forger.post("/login", data={"username": "ada", "password": "secret"},
                            headers={"X-Forwarded-For": "10.9.9.9"})
        assert right.status_code == 429 and "127.0.0.1" in right.json()["detail"], right.text


def test_the_wait_doubles_is_capped_forgotten_cleared_by_a_login_and_bounded_in_memory():
    now = [0.0]
    t = Throttle(free=3, first_wait_s=1, max_wait_s=8, forget_s=100, max_addresses=1000,
                 clock=lambda: now[0])
    assert [t.wait("a") for _ in range(3)] == [0, 0, 0]             # a person's typos
    assert t.wait("a") == 0 and t.wait("a") == 1                      # the 4th try, then a wait
    waits = []
    for _ in range(6):
        now[0] += t.wait("a")
        assert t.wait("a") == 0                                       # its turn: counted
        waits.append(t.wait("a"))
    assert waits == [2, 4, 8, 8, 8, 8]                                # doubling, at most max_wait_s
    assert t.wait("b") == 0                                           # another address: untouched
    now[0] += 200                                                     # forgotten after forget_s
    assert [t.wait("a") for _ in range(4)] == [0, 0, 0, 0] and t.wait("a") == 1
    t.succeeded("a")
    assert t.wait("a") == 0
    for i in range(50_000):                                           # cycling addresses
        t.wait(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(t) == 1000
    assert client_address({"client": ("2001:db8::1", 1)}) == client_address(
        {"client": ("2001:db8::ffff:2", 1)}) == "2001:db8::/64"
    assert client_address({"client": ("127.0.0.2", 1)}) == "127.0.0.2"
    assert client_address({"client": ("::ffff:10.0.0.7", 1)}) == "10.0.0.7"


def test_the_gate_closes_a_websocket_before_login():
    """uvicorn here has no WebSocket library, so no websocket reaches the app; with one, the gate
    closes them all before login."""
    from types import SimpleNamespace
    sent = []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError("reached the app")
    scope = {"type": "websocket", "path": "/gradio_api/x", "headers": [],
             "app": SimpleNamespace(auth={"ada": "secret"}, cookie_id="c", tokens={})}
    asyncio.run(LoginGate(app)(scope, None, send))
    assert sent == [{"type": "websocket.close", "code": 1008}]


def test_concurrent_first_loads_in_a_fresh_process(store):
    """Four threads loading checkpoints at once in a process that has loaded nothing yet."""
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "m", store)
    code = (
        "import threading, sys\n"
        "from lab.storage import checkpoints\n"
        "errors = []\n"
        "def go():\n"
        "    try:\n"
        "        checkpoints.load('m')\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "ts = [threading.Thread(target=go) for _ in range(4)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(errors); sys.exit(1 if errors else 0)\n")
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr


def test_concurrent_requests_for_one_checkpoint_load_it_once(store, monkeypatch):
    """The web UI's model cache: four requests at once for a checkpoint not yet loaded wait for a
    single load instead of each loading it."""
    import threading
    import time as clock
    from lab.ui import common
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "m", store)
    real, loads = checkpoints.load, []

    def slow_load(*args, **kwargs):
        loads.append(1)
        clock.sleep(0.5)              # long enough for every thread to arrive while it loads
        return real(*args, **kwargs)
    monkeypatch.setattr(checkpoints, "load", slow_load)
    cache, got = common.ModelCache(), []
    threads = [threading.Thread(target=lambda: got.append(cache.get("m", store))) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(loads) == 1 and len(got) == 4 and all(g is got[0] for g in got)


def test_dropdowns_built_on_an_empty_store_pick_checkpoints_once_there_are_some():
    """A page built while the store was empty must not keep empty choices once checkpoints exist:
    the refresh picks what a fresh page would (one, two to compare, or nothing for a parent)."""
    import gradio as gr
    from lab.ui.common import Context
    ctx = Context()
    with gr.Blocks():
        one, two, blank = (ctx.add_dropdown(gr.Dropdown([]), fill) for fill in ("one", "two", "blank"))
    names = ["a", "b", "c"]

    def value(dd, names, pick, current):
        update, new = ctx.refreshed(dd, names, pick, current)
        assert update.get("value", pick) == new            # the pick the page keeps is what it shows
        return update.get("value", "unchanged")
    assert value(one, names, None, None) == "a"
    assert value(two, names, [], []) == ["a", "b"]
    assert value(blank, names, None, "") == "unchanged"
    assert ctx.refreshed(blank, names, None, "")[0]["choices"] == ["", "a", "b", "c"]
    # one the lab picked and the person left follows while it is incomplete; a changed one stays
    assert value(two, ["a", "b"], ["a"], ["a"]) == ["a", "b"]
    assert value(two, ["a", "b"], ["a"], []) == "unchanged"
    assert value(one, ["0", "a"], "a", "a") == "unchanged"                 # complete: it stays
    assert value(one, ["0", "a"], "a", "0") == "unchanged"                 # the person's choice
    assert value(one, ["a", "c"], "b", "b") == "a"        # its checkpoint was deleted: a new pick
    assert value(one, ["a", "c"], "a", "b") == "a"        # a chosen checkpoint gone: a new pick


def test_two_to_compare_are_a_scratch_model_and_a_fine_tune_when_the_store_has_both(store):
    """The lab's main comparison: a page (or a reload) opens Compare and Evaluate on a model
    trained from scratch next to a fine-tuned one, not on the first two names (which here would
    pair the scratch model with the untrained import)."""
    import gradio as gr
    from lab.ui.common import Context, checkpoint_dropdown
    torch.manual_seed(0)
    for name, provenance in (("a-import", {"source": "import"}), ("b-scratch", {"source": "scratch"}),
                             ("c-tuned", {"source": "finetune", "parent": "a-import"}),
                             ("d-scratch", {"source": "scratch"})):
        checkpoints.save(build(tiny_config()), tokenizers.gpt2(), name, provenance=provenance)
    ctx = Context()
    with gr.Blocks():
        two = checkpoint_dropdown(ctx, "checkpoints", multiselect=True, task="captions")
    assert two.value == ["b-scratch", "c-tuned"]
    names = checkpoints.names()
    assert ctx.refreshed(two, names, [], [])[0]["value"] == ["b-scratch", "c-tuned"]
    # a getting-started run: the import, the scratch model, then the fine-tune; the page follows
    picked = ["a-import", "b-scratch"]
    update, pick = ctx.refreshed(two, names, picked, picked)
    assert update["value"] == pick == ["b-scratch", "c-tuned"]
    assert "value" not in ctx.refreshed(two, names, picked, ["a-import"])[0]    # the person's choice
    assert "value" not in ctx.refreshed(two, names, pick, pick)[0]   # a pair already: it stays
    # without a fine-tune: the first two
    assert ctx.picked(["a-import", "b-scratch", "d-scratch"], "two", "captions") == ["a-import", "b-scratch"]
    # a pair shares its task and data: a model of another corpus is not paired with a caption
    # fine-tune; the Getting started panel's pair comes first when the store holds it
    gpl = {"source": "scratch", "task": "text", "train": {"settings": {"task": {"dataset": "gpl"}}}}
    metas = {"a-gpl": gpl, "b-tuned": {"source": "finetune", "task": "captions"},
             "c-scratch": {"source": "scratch", "task": "captions"},
             "d-gpl-tuned": {**gpl, "source": "finetune"}}
    assert ctx.picked(list(metas), "two", "generate", metas) == ["a-gpl", "d-gpl-tuned"]
    assert ctx.picked(list(metas)[:3], "two", "generate", metas) == ["c-scratch", "b-tuned"]
    assert ctx.picked(["a-gpl", "b-tuned", "e-import"], "two", "generate",
                      {**metas, "e-import": {"source": "import"}}) == ["b-tuned", "e-import"]
    panel = {"quick-scratch": {"source": "scratch", "task": "captions"},
             "smollm2-captions": {"source": "finetune", "task": "captions"}}
    assert ctx.picked(list(metas) + list(panel), "two", "generate", {**metas, **panel}) == \
        ["quick-scratch", "smollm2-captions"]


def test_caption_tabs_pick_caption_checkpoints_before_birth_place_ones(store):
    """Compare and Evaluate generate captions: a birth-place model first in the store's order is
    not what they open on; the Attention tab reads either."""
    import gradio as gr
    from plugins.tasks.birthplace import core as bp
    from lab.ui.common import Context, checkpoint_dropdown
    torch.manual_seed(0)
    char = bp.tokenizer()
    checkpoints.save(build(tiny_config(vocab_size=char.vocab_size)), char, "a-birthplace",
                     provenance={"task": "birthplace"})
    for name in ("b", "c"):
        checkpoints.save(build(tiny_config()), tokenizers.gpt2(), name)
    ctx = Context()
    with gr.Blocks():
        captions = checkpoint_dropdown(ctx, "checkpoints", multiselect=True, task="captions")
        anything = checkpoint_dropdown(ctx, "checkpoint")
        places = checkpoint_dropdown(ctx, "birth-place checkpoints", multiselect=True,
                                     task="birthplace", fill="task")
    assert captions.value == ["b", "c"] and anything.value == "a-birthplace"
    assert ctx.refreshed(captions, ["a-birthplace", "b", "c"], [], [])[0]["value"] == ["b", "c"]
    # a caption tab left on a birth-place model moves once caption models exist
    assert ctx.refreshed(captions, ["a-birthplace", "b", "c"], ["a-birthplace"], ["a-birthplace"])[0]["value"] == ["b", "c"]
    assert places.value == ["a-birthplace"]                       # its task's checkpoints only
    assert ctx.refreshed(places, ["b", "c"], [], [])[0]["value"] == []


def test_on_an_empty_store_a_missing_choice_says_where_checkpoints_come_from(store):
    from lab.config import ConfigError
    from lab.ui import attention, compare
    with pytest.raises(ConfigError, match="no checkpoints yet: import SmolLM2 in the Checkpoints tab"):
        compare.compare([], {"decoder": "top_p"}, store=store)
    with pytest.raises(ConfigError, match="no checkpoints yet"):
        attention.show(None, "A dog", False, 0, store=store)
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "m", store)
    with pytest.raises(ConfigError, match="choose checkpoints to compare first"):
        compare.compare([], {"decoder": "top_p"}, store=store)


def test_the_decoder_per_checkpoint_table_follows_the_chosen_checkpoints():
    """The table is rebuilt when the chosen checkpoints change (by the person or by the page
    itself): a row typed in before stays with its checkpoint, a new checkpoint gets a blank row
    (the shared setting), a checkpoint no longer chosen loses its row."""
    import pandas as pd
    from lab.ui.compare import PER_MODEL_COLUMNS, decoder_rows
    typed = ["a", "top_k"] + [None] * (len(PER_MODEL_COLUMNS) - 2)
    typed[PER_MODEL_COLUMNS.index("top_k")] = 5
    blank = ["b", ""] + [float("nan")] * (len(PER_MODEL_COLUMNS) - 2)   # empty cells come back as NaN
    table = pd.DataFrame([typed, blank], columns=PER_MODEL_COLUMNS)
    shown = decoder_rows(True, ["c", "a"], table)
    assert shown["visible"] is True
    assert shown["value"] == [["c", ""] + [None] * (len(PER_MODEL_COLUMNS) - 2), typed]
    assert decoder_rows(False, ["a"], table)["visible"] is False
    assert decoder_rows(True, None, None)["value"] == []
    assert decoder_rows(True, ["a"], {"not": "a table"})["value"][0][1] == ""
