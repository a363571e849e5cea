"""`plugins` and `settings`: what there is to choose, every registry and every setting."""
from __future__ import annotations

from lab.cli.output import print_json
from lab.config import describe_settings
from lab.presets import description, names as preset_names
from lab.registry import describe_all
from lab.settings import reference_markdown


def cmd_plugins(args):
    info = describe_all()
    if args.json:
        print_json({**info, "presets": {k: description(k) for k in preset_names()}})
        return
    for kind, entries in info.items():
        print(f"{kind}:")
        for e in entries:
            print(f"  {e['name']:<12} {e['description']}")
            for p in e["params"]:       # a plugin's own settings: --set KIND.SETTING=VALUE
                bounds = f", {p.get('min', '')}..{p.get('max', '')}" if "min" in p or "max" in p else ""
                print(f"  {'':<12}   {kind}.{p['name']} = {p['default']} ({p['type']}{bounds}): {p['help']}")
    print("presets:")
    for k in preset_names():
        print(f"  {k:<12} {description(k)}")


def cmd_settings(args):
    described = describe_settings(built_in_only=args.built_in)
    if args.json:
        print_json(described)
    elif args.markdown:
        print(reference_markdown(described), end="")
    else:
        rows = described["train"] + described["model"] + [
            r for plugins in described["plugins"].values() for rs in plugins.values() for r in rs]
        for r in rows:
            if r["name"] != "settings":
                blank = f"; blank: {r['blank']}" if "blank" in r else ""
                print(f"  {r['name']:<24} {r['default']!s:<12} {r['help']}{blank}")


def _parser_plugins(sub) -> None:
    p = sub.add_parser("plugins", help="list every registry with descriptions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_plugins)


def _parser_settings(sub) -> None:
    p = sub.add_parser("settings", help="every setting with its default, bounds and help")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="the configuration reference page")
    p.add_argument("--built-in", action="store_true",
                   help="the plugins that ship with the lab only (not third-party ones installed)")
    p.set_defaults(fn=cmd_settings)


PARSERS = {"plugins": _parser_plugins, "settings": _parser_settings}
