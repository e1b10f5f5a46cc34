"""Every key of the experiment config with its type, default and doc: what `surreal config` prints, and the walk over
the typed config that the chart's values.schema.json is generated from (infra/helm/values_schema.py).

A key's doc is written once, beside the field in its dataclass (surreal/config/schema.py,
surreal/algos/<name>/config.py), as comments: the comment lines directly above the field, then the comment on its
own line. A comment line under a field belongs to the field below it, never to the one above. A subclass that
redefines a field without a comment keeps its base class's doc (PPOConfig's `batch_size` reads AlgoConfig's). The
source is read with `ast` and `tokenize` (standard library only: the config layer stays torch- and gymnasium-free),
once per class.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from surreal.config.schema import ALGORITHMS, ExperimentConfig

ALGO_EXCLUDED = frozenset({"seed"})  # algo.seed always follows the top-level seed: not a key anyone sets


@dataclass(frozen=True)
class ConfigField:
    """One field of one config dataclass: its name, type hint, default (None for a required one) and doc."""

    name: str
    hint: Any
    default: Any
    doc: str


@dataclass(frozen=True)
class ConfigKey:
    """One dotted key of an experiment (`learner.eval_interval`), as `surreal config` lists it."""

    key: str
    type: str
    default: Any
    doc: str


def walk_fields(cls: type, skip: frozenset[str] = frozenset()) -> list[ConfigField]:
    """The fields of one config dataclass, in declaration order (nested dataclasses are fields too: recurse on
    their hint). The one walk both `surreal config` and the chart's values schema take."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append(ConfigField(f.name, hints[f.name], default, docs.get(f.name, "")))
    return out


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> doc, for every field of `cls`: the nearest class in its MRO that documents it."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update({name: doc for name, doc in _own_docs(klass).items() if doc})
    return docs


@cache
def _own_docs(cls: type) -> dict[str, str]:
    """The docs of the fields `cls` itself declares (annotated assignments in its body), from its source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined where no source is kept (an interactive session)
        return {}
    lines = source.splitlines()
    comments: dict[int, str] = {}  # line number (1-based) -> the comment's text
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    comment_only = {n for n in comments if lines[n - 1].lstrip().startswith("#")}
    (node,) = ast.parse(source).body
    assert isinstance(node, ast.ClassDef)
    docs = {}
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        above: list[str] = []
        n = item.lineno - 1
        while n in comment_only:
            above.insert(0, comments[n])
            n -= 1
        end = item.end_lineno or item.lineno
        trailing = [comments[k] for k in range(item.lineno, end + 1) if k in comments and k not in comment_only]
        docs[item.target.id] = " ".join(part for part in (*above, *trailing) if part)
    return docs


def type_name(hint: Any) -> str:
    """A type hint as a user reads it: `int`, `float | None`, `list[int]`, `dict`."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else type_name(a) for a in typing.get_args(hint))
    if origin is list:
        return f"list[{type_name(typing.get_args(hint)[0])}]"
    if origin is dict or hint is dict:
        return "dict"
    return getattr(hint, "__name__", str(hint))


def experiment_keys(algo: str) -> list[ConfigKey]:
    """Every key of an experiment with algorithm `algo`, in the schema's order, `algo.*` typed by its class.
    Defaults are the packaged ones (experiment.yaml repeats the schema's, the algorithm's are its class's:
    tests/test_config.py)."""
    return list(_keys(ExperimentConfig, "", algo))


def algorithm_keys(algo: str) -> list[ConfigKey]:
    """The `algo.*` keys of one algorithm."""
    return [k for k in experiment_keys(algo) if k.key.startswith("algo.")]


def _keys(cls: type, prefix: str, algo: str) -> Iterator[ConfigKey]:
    skip = ALGO_EXCLUDED if prefix == "algo." else frozenset()
    for f in walk_fields(cls, skip):
        key = f"{prefix}{f.name}"
        hint = ALGORITHMS[algo] if key == "algo" else f.hint
        if dataclasses.is_dataclass(hint):
            yield from _keys(hint, f"{key}.", algo)
        else:
            yield ConfigKey(key, type_name(hint), f.default, f.doc)
