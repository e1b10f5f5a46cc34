"""Write the terraform-docs style reference (requirements, providers, modules, resources, inputs, outputs) of a
Terraform root into its README.md between <!-- BEGIN_TF_DOCS --> and <!-- END_TF_DOCS -->, from the HCL itself
(python-hcl2), so the tables cannot drift from the code. terraform-docs itself is not installable here.

    python infra/scripts/tf_docs.py infra/terraform/gcp [...]          # rewrite the READMEs
    python infra/scripts/tf_docs.py --check infra/terraform/gcp [...]  # exit 1 if one is out of date
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import hcl2

BEGIN, END = "<!-- BEGIN_TF_DOCS -->", "<!-- END_TF_DOCS -->"


def _unquote(text: Any) -> str:
    text = str(text)
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _expr(value: Any) -> str:
    """An HCL value as it reads in the source: ${...} expressions unwrapped, literals as HCL/JSON."""
    if isinstance(value, str):
        match = re.fullmatch(r"\$\{(.*)\}", value, re.S)
        return match.group(1) if match else value
    return json.dumps(_clean(value), separators=(", ", " = "))


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        return {_unquote(k): _clean(v) for k, v in node.items() if not str(k).startswith("__")}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return _unquote(node) if isinstance(node, str) else node


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _items(block: dict[str, Any]) -> list[tuple[str, Any]]:
    """A block's labelled entries, without python-hcl2's __comments__ / __is_block__ bookkeeping."""
    return [(k, v) for k, v in block.items() if not str(k).startswith("__")]


def _load(root: Path) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {}
    for path in sorted(root.glob("*.tf")):
        with path.open() as handle:
            for kind, items in hcl2.load(handle).items():
                if not kind.startswith("__"):
                    merged.setdefault(kind, []).extend(items)
    return merged


def render(root: Path) -> str:
    tree = _load(root)
    lines: list[str] = []
    settings = tree.get("terraform", [{}])[0]
    lines += ["## Requirements", "", "| Name | Version |", "|------|---------|"]
    lines.append(f"| terraform | {_cell(_unquote(settings.get('required_version', '')))} |")
    providers = {}
    for block in settings.get("required_providers", []):
        for name, spec in _items(block):
            providers[_unquote(name)] = spec
    for name, spec in providers.items():
        lines.append(f"| {name} | {_cell(_unquote(spec['version']))} |")
    lines += ["", "## Modules", ""]
    modules = [(name, body) for block in tree.get("module", []) for name, body in _items(block)]
    if modules:
        lines += ["| Name | Source | Version |", "|------|--------|---------|"]
        for name, body in modules:
            version = _unquote(body.get("version", "n/a"))
            lines.append(f"| {_unquote(name)} | {_unquote(body['source'])} | {version} |")
    else:
        lines.append("No modules.")
    lines += ["", "## Resources", ""]
    resources = [
        (f"{_unquote(rtype)}.{_unquote(name)}", kind)
        for kind in ("resource", "data")
        for block in tree.get(kind, [])
        for rtype, named in _items(block)
        for name, _ in _items(named)
    ]
    if resources:
        lines += ["| Name | Type |", "|------|------|"]
        lines += [f"| {address} | {kind} |" for address, kind in resources]
    else:
        lines.append("No resources.")
    lines += ["", "## Inputs", "", "| Name | Description | Type | Default | Required |"]
    lines.append("|------|-------------|------|---------|:--------:|")
    for block in tree.get("variable", []):
        for name, body in _items(block):
            default = f"`{_cell(_expr(body['default']))}`" if "default" in body else "n/a"
            required = "no" if "default" in body else "yes"
            description = _cell(_unquote(body.get("description", "")))
            lines.append(
                f"| {_unquote(name)} | {description} | `{_cell(_expr(body['type']))}` | {default} | {required} |"
            )
    lines += ["", "## Outputs", "", "| Name | Description |", "|------|-------------|"]
    for block in tree.get("output", []):
        for name, body in _items(block):
            lines.append(f"| {_unquote(name)} | {_cell(_unquote(body.get('description', '')))} |")
    return "\n".join(lines) + "\n"


def update(readme: Path, generated: str) -> str:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: no {BEGIN} ... {END} section")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{generated}{END}{tail}"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for arg in (a for a in argv if a != "--check"):
        root = Path(arg)
        readme = root / "README.md"
        new = update(readme, render(root))
        if new != readme.read_text():
            stale.append(str(readme))
            if not check:
                readme.write_text(new)
    if check and stale:
        print("out of date (run python infra/scripts/tf_docs.py ...): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
