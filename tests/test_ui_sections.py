"""What a person types is never set back behind their back. Gradio mounts the fields of a tab
when it is first chosen, and those of a closed accordion when it first opens; once the page has
settled it gives them their first values again, wiping what was typed meanwhile (seen in the
browser: the SmolLM2 import's typed block selection lost, 1 try in 12 and 2 in 30 on a busy
machine; with every field mounted with the page, 0 in 30). So every tab's fields are mounted with
the page, and every section holding a field starts open (a person may fold it)."""
import gradio as gr

from lab.ui import build_app

FIELDS = (gr.Textbox, gr.Number, gr.Dropdown, gr.Checkbox, gr.Radio, gr.File, gr.Dataframe, gr.Slider)


def _blocks(block):
    yield block
    for child in getattr(block, "children", []) or []:
        yield from _blocks(child)


def test_every_field_is_mounted_with_the_page(store):
    demo = build_app(store=str(store))
    blocks = list(_blocks(demo))
    tabs = [b for b in blocks if isinstance(b, gr.Tab) and isinstance(b.parent, gr.Tabs)
            and b.parent.parent is not None and not isinstance(b.parent.parent, gr.Tab)]
    assert tabs and all(t.render_children for t in tabs), [t.label for t in tabs if not t.render_children]
    closed = [a.label for a in blocks if isinstance(a, gr.Accordion) and not a.open
              and any(isinstance(b, FIELDS) for b in _blocks(a))]
    assert not closed, f"sections holding fields that start closed: {closed}"


def test_a_refusal_stays_on_the_page_until_the_next_action():
    """A refusal's message has no timer: it stays beside the Error mark it leaves until it is closed
    or the person acts again (the page's script closes it then: tests/test_browser.py)."""
    from lab.ui.common import _refusal
    from lab.ui.fields import refuse
    assert refuse("n_head must divide n_embd").duration is None
    assert _refusal(RuntimeError("a bug")).duration is None
