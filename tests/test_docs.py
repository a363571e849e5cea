"""The front door and the docs stay what they are for: README.md short, every relative link and
anchor in README.md and docs/ pointing at something that exists, names and text speaking of the
product rather than of how it was built (no numbered work sessions or tracker issues), and
docs/plugins.md's third-party package installing and working as written."""
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, tiny_config

DOCS = ROOT / "docs"
PAGES = ["README.md", "ui.md", "results.md", "benchmarks.md", "reliability.md", "gpu.md",
         "plugins.md", "api.md", "cli.md"]
# written by the settings' generator from the settings' descriptions, not by hand: a link to it is
# accepted before the generator has run; once the page exists it is checked like any other
SCANNED = ("README.md", "docs", "lab", "plugins", "tests", "benchmarks", "experiments")
TEXT_SUFFIXES = {".md", ".py", ".sh", ".json"}

# "session" followed by a number (a work session), an issue number, a round of development, and a
# diary's pointers to the work session at hand ("this", "that", "the last", ... before the word).
# "session" alone is fine: pytest's scope="session", an HTTP session, start_new_session.
ROUND_WORDS = re.compile(
    r"\bsessions? ?#?\d+"
    r"|\bissues? ?#?\d+"
    r"|\b(?:this|that|earlier|previous|last|next|same|one|a later) session\b"
    r"|\b(?:dev|development) rounds?\b"
    r"|\bthe issue (?:asks|names|says|quotes|wants)\b",
    re.I)
ROUND_IN_PATH = re.compile(r"(?:session|issue|round)[ _-]?\d+", re.I)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _tracked_files() -> list:
    """Files git tracks or would track (new files not yet added included, ignored ones not)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [ROOT / p for p in out.split("\0") if p]
    return [f for f in files if f.is_file()]


def _scanned_files() -> list:
    return [f for f in _tracked_files()
            if f.relative_to(ROOT).parts[0] in SCANNED]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page) -> set:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)      # no headings in code
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *#*$", text, re.M)}


def _linking_pages() -> list:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_readme_is_a_front_door_of_at_most_200_lines():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert 20 < len(lines) <= 200, f"README.md has {len(lines)} lines; at most 200"
    assert "make run" in text and "make test" in text       # CI runs the README's test command
    assert "docs/" in text


def test_every_docs_page_exists_and_the_index_lists_it():
    index = (DOCS / "README.md").read_text()
    for name in PAGES:
        page = DOCS / name
        assert page.is_file() and len(page.read_text().splitlines()) >= 20, name
        if name != "README.md":
            assert f"]({name})" in index, f"docs/README.md does not link to {name}"
    assert "](configuration.md)" in index
    assert "docs/configuration.md" in (ROOT / "README.md").read_text()


def test_the_round_pattern_tells_a_diary_from_a_product():
    diary = ["session" + " 12", "sessions" + " 8-9", "issue" + " 13", "issue" + " #4",
             "in this" + " session", "Session" + "14", "development" + " round"]
    product = ['scope="session"', "start_new_session=True", "requests.Session()",
               "read once a session", "round 3: GFLOP/s at 166 rows", "a round trip",
               "an issue with the corpus"]
    assert [s for s in diary if not ROUND_WORDS.search(s)] == []
    assert not any(ROUND_WORDS.search(s) for s in product)
    assert ROUND_IN_PATH.search("experiments/generation_cpu/" + "session" + "15/x.py")


def test_names_and_text_speak_of_the_product():
    files = _scanned_files()
    tops = {f.relative_to(ROOT).parts[0] for f in files}
    assert tops == set(SCANNED), f"nothing scanned under {set(SCANNED) - tops}"
    texts = [f for f in files if f.suffix in TEXT_SUFFIXES]
    assert len(texts) > 150 and sum(f.stat().st_size for f in texts) > 500_000
    found = []
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        if ROUND_IN_PATH.search(rel):
            found.append(f"{rel}: its path")
        if f.suffix not in TEXT_SUFFIXES:
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = ROUND_WORDS.search(line)
            if m:
                found.append(f"{rel}:{n}: {m.group(0)!r}")
    assert not found, "speak of the product, not of when it was made:\n" + "\n".join(found)


def test_every_relative_link_and_anchor_points_at_something():
    checked, broken = 0, []
    for page in _linking_pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):      # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            checked += 1
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where}: no such heading")
    assert checked >= 60, f"only {checked} links found"
    assert not broken, "\n".join(broken)


def test_the_third_party_plugin_package_installs_and_trains(tmp_path, monkeypatch):
    """docs/plugins.md's package, written from its blocks and installed by pip (no index, no
    build isolation: nothing is downloaded): the entry point registers the norm with its setting,
    and a model built with it learns."""
    import torch

    from lab import registry
    from lab.config import ModelConfig
    from lab.modeling.model import build

    page = (DOCS / "plugins.md").read_text()
    section = page[page.index("## Writing a third-party plugin package"):]
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    path, code = re.search(r"`(src/[\w/]+\.py)`:\s*\n+```python\n(.*?)```", section, re.S).groups()
    assert '[project.entry-points."tfmr_lab.plugins"]' in toml
    entry = re.search(r'^(\w+) = "([\w.]+)"$', toml.split("tfmr_lab.plugins")[1], re.M)
    assert entry.group(2).replace(".", "/") + ".py" == path.removeprefix("src/")

    package, site = tmp_path / "pkg", tmp_path / "site"
    (package / "pyproject.toml").parent.mkdir()
    (package / "pyproject.toml").write_text(toml)
    (package / path).parent.mkdir(parents=True)
    (package / path).parent.joinpath("__init__.py").write_text("")
    (package / path).write_text(code)
    if subprocess.run([sys.executable, "-c", "import setuptools"]).returncode:
        pytest.skip("setuptools is not installed, so pip cannot build the package offline")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--no-build-isolation", "--disable-pip-version-check",
                           "--target", str(site), str(package)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    module = entry.group(2)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_loaded", False)
    try:
        registry.load_plugins()
        assert entry.group(1) == "scalenorm" and "scalenorm" in registry.NORMS
        assert [p["name"] for p in registry.NORMS.get("scalenorm").params()] == ["g0"]
        cfg = ModelConfig.from_dict({**tiny_config().to_dict(), "norm": "scalenorm",
                                     "norm.g0": 0.5})
        assert cfg.settings["norm"] == {"g0": 0.5}
        torch.manual_seed(0)
        model = build(cfg)
        ln = model.transformer.h[0].ln_1
        assert type(ln).__module__ == module and ln.g.item() == pytest.approx(0.5 * 32 ** 0.5)
        x = torch.randint(0, 97, (4, 16))
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        first = None
        for _ in range(20):
            loss = model(x, labels=x).loss
            first = first if first is not None else loss.item()
            opt.zero_grad()
            loss.backward()
            assert ln.g.grad is not None
            opt.step()
        assert loss.item() < first
    finally:
        registry.NORMS._entries.pop("scalenorm", None)
        for name in [m for m in sys.modules if m.split(".")[0] == module.split(".")[0]]:
            del sys.modules[name]
