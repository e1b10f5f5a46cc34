"""The package's layering, as docs/architecture.md states it: imports run downwards through the layers below, with no
import cycle anywhere in src/ or bench/ (type-only imports counted), and no role asks which algorithm it runs (the
algorithm's config names its flow-control rule instead)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from surreal.config.schema import ALGORITHMS

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "surreal"
# Lowest first. A module may import from its own layer and the layers below it, never from one above; a module is in
# the layer of the longest name here that is it or a package holding it (`surreal` itself only as the package's face).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        ("errors", "fileio", "boundedjson", "metrics", "metricsfile", "envstate", "runstore", "frames", "conf"),
    ),
    ("env families", ("envs_masked", "envs_robosuite", "envs_atari", "envs_pixels", "renderer")),
    ("proto", ("proto",)),
    ("config", ("config", "settings", "spaces", "runjson", "provenance")),
    ("envs", ("envs",)),
    ("replay", ("replay",)),
    ("runtime", ("runtime",)),
    ("algos", ("algos",)),
    ("policy", ("policy",)),
    ("roles", ("roles",)),
    ("launch", ("launch",)),
    ("run", ("run",)),
    ("sim", ("sim",)),
    ("commands", ("commands",)),
    ("front doors", ("api", "cli", "__main__", "")),
)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of `module` (`surreal.x.y`), None when no layer holds it."""
    holders = [
        (len(full), index)
        for index, (_, names) in enumerate(LAYERS)
        for full in (f"surreal.{name}" if name else "surreal" for name in names)
        if module == full or (full != "surreal" and module.startswith(full + "."))
    ]
    return max(holders)[1] if holders else None


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_every_module_is_in_one_layer_and_imports_nothing_from_a_layer_above():
    """Every import counts, type-only ones (`if TYPE_CHECKING:`) and those inside functions included: a lower layer
    that names a higher one's type still depends on it."""
    graph = import_graph(type_only=True)
    assert "surreal.run.prepare" in graph["surreal.commands.run"], "the graph sees the run service"
    unplaced = sorted(module for module in graph if module.startswith("surreal") and layer_of(module) is None)
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"
    upward = []
    for module, imported in sorted(graph.items()):
        if not module.startswith("surreal"):
            continue
        for target in sorted(imported):
            here, there = layer_of(module), layer_of(target)
            assert here is not None and there is not None
            if there > here:
                upward.append(f"{module} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]})")
    assert not upward, "\n".join(upward)


def test_roles_never_name_an_algorithms_config_class():
    names = {cls.__name__ for cls in ALGORITHMS.values()} | {"OffPolicyConfig"}
    assert {"PPOConfig", "DDPGConfig", "ESConfig", "SACConfig"} <= names, "the registry finds every algorithm"
    for path in sorted((SRC / "roles").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in names:
            assert name not in text, f"roles/{path.name} names {name}: use the flow-control rule instead"


def test_an_algorithms_config_module_imports_only_the_config_layer():
    """`algos/<name>/config.py` is what the torch-free roles import through the registry: the standard library,
    `surreal.config` and `surreal.errors` only (no torch, no gymnasium, not the algorithm's own code). The
    packages' `__init__`s are read by the same roles on the way, so they are held to the same rule (imports under
    `if TYPE_CHECKING:` never run and are not counted)."""
    allowed = ("surreal.config", "surreal.errors")
    folders = sorted(path.parent for path in (SRC / "algos").glob("*/config.py"))
    assert {folder.name for folder in folders} == set(ALGORITHMS), "every algorithm is a folder with its config"
    paths = [SRC / "algos" / "__init__.py", *(p for f in folders for p in (f / "__init__.py", f / "config.py"))]
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {a.name for node in import_statements(tree) if isinstance(node, ast.Import) for a in node.names}
        modules |= {node.module for node in import_statements(tree) if isinstance(node, ast.ImportFrom) and node.module}
        for module in modules - {"__future__"}:
            top = module.split(".")[0]
            if top == "surreal":
                assert module.startswith(allowed), f"algos/{path.name} imports {module}"
            else:
                assert top in sys.stdlib_module_names, f"algos/{path.name} imports {module}"


def test_only_the_regimes_branch_on_the_regime():
    """The regime is an object the algorithm's config names (runtime/regimes/): no module outside them asks whether
    an algorithm is on-policy, and no role casts the algorithm's learner to a regime's."""
    regimes = SRC / "runtime" / "regimes"
    for path in sorted(SRC.rglob("*.py")):
        text, where = path.read_text(encoding="utf-8"), path.relative_to(SRC)
        words = ("cast(",) if path.parent == SRC / "roles" else ()
        for word in () if path.is_relative_to(regimes) else ("on_policy", "flow_control", *words):
            assert word not in text, f"{where} uses {word!r}: a regime decision belongs in runtime/regimes/"


# -- no import cycles -----------------------------------------------------------------------------------


def module_of(path: Path, root: Path, package: str) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_statements(tree: ast.AST, type_only: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level, in functions and in branches, but not under
    `if TYPE_CHECKING:`, which only the type checker reads (with `type_only`, those too)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if (
            not type_only
            and isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        ):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the package and of bench/ it imports (with `type_only`, also under TYPE_CHECKING).
    `from a import b` depends on module `a.b` when there is one, else on `a`. A package's `__init__` is not counted
    as a dependency of its submodules: Python runs it first in any case, and counting it would call every package
    that re-exports its submodules a cycle."""
    modules = {module_of(path, SRC, "surreal"): path for path in SRC.rglob("*.py")}
    modules |= {module_of(path, REPO / "bench", "bench"): path for path in (REPO / "bench").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in import_statements(ast.parse(path.read_text(encoding="utf-8")), type_only):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            edges.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        graph[name] = {edge for edge in edges if edge in modules and edge != name}
    return graph


def test_no_import_cycle_in_the_package_or_the_benchmarks():
    """No module reaches itself through imports, type-only ones counted: each cycle names its path."""
    graph = import_graph(type_only=True)
    assert "surreal.roles.learner" in graph["surreal.run.serial"], "the graph sees module-level imports"
    assert "surreal.envs_robosuite" in graph["surreal.envs"], "and `from package import module`"
    assert "bench.learner_workload" in graph["bench.learner_group"], "and the benchmarks"
    assert "surreal.config" in graph["surreal.runjson"], "and type-only imports"
    assert "surreal.config" not in import_graph()["surreal.runjson"], "which never run"
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = path[path.index(module) :] + [module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_flow_control_needs_neither_torch_nor_sockets():
    """The regimes' feeds run (and tests/test_feeds.py drives them) without torch or a socket: nothing they
    import, however indirectly, imports torch or the socket layer."""
    graph, reached = import_graph(), set()
    todo = [module for module in graph if module.startswith("surreal.runtime.regimes")]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph[module])
    assert "surreal.proto.channels" not in reached and not any(m.startswith("surreal.roles") for m in reached)
    for module in sorted(reached):
        path = SRC.joinpath(*module.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        assert "torch" not in {m.split(".")[0] for m in imported_modules(path)}, f"{module} imports torch"


# -- the wire has one home --------------------------------------------------------------------------------

WIRE = SRC / "proto" / "wire.py"
# Words wire.py uses as message fields that are also keys of the package's own files and rows (metrics rows, run
# summaries, snapshot books and arrays, checkpoints, config, an algorithm's minibatch tensors): their use in
# messages is held by the structural rules below (no message metadata read, no message built outside wire.py),
# not by the word.
# Words a message shares with other plain data: a field's "dtype", "shape" and bounds also describe a tensor in the
# policy artifact and an export's inputs, and a replay layout in the config (wire.layout_of).
SHARED_WORDS = frozenset(
    {"actor", "actors", "env_steps", "ids", "priorities", "reason", "shard", "slots", "version", "weights"}
    | {"dtype", "shape", "low", "high"}
)


def field_literals(tree: ast.AST) -> list[tuple[str, int]]:
    """(string, line) of every string literal in a field position: a dict display's key, a subscript, the key
    of `.get`/`.pop`/`.setdefault`, the left side of `in`, the key argument of wire.py's field readers."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("get", "pop", "setdefault") and node.args:
                keys = [node.args[0]]
            elif name in ("_int", "_text") and len(node.args) > 1:
                keys = [node.args[1]]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            keys = [node.left]
        found += [(k.value, k.lineno) for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return found


def message_kinds() -> set[str]:
    """The values of wire.py's module-level string constants in capitals: the message kinds."""
    kinds = set()
    for node in ast.parse(WIRE.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
        ):
            kinds.add(node.value.value)
    return kinds


def wire_violations(path: Path, fields: set[str], kinds: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(SRC)
    found = [f"{where}:{line} names message field {name!r}" for name, line in field_literals(tree) if name in fields]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in kinds:
            found.append(f"{where}:{node.lineno} spells message kind {node.value!r}")
        # A message's metadata read by key (`m.meta[...]`, `m.meta.get(...)`, `... in m.meta`): decoding by hand.
        inner: ast.expr | None = None
        if isinstance(node, ast.Subscript):
            inner = node.value
        elif isinstance(node, ast.Compare):
            inner = node.comparators[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            inner = node.func.value
        if isinstance(inner, ast.Attribute) and inner.attr == "meta":
            found.append(f"{where}:{node.lineno} reads a message's metadata by key")
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Message":
            found.append(f"{where}:{node.lineno} builds a Message")
    return found


def test_message_fields_and_kinds_are_read_and_built_in_proto_wire_only():
    """Every field a peer sends is read, and every message built, in proto/wire.py: no other module of the package
    spells a message kind or a message-only field name, reads a message's metadata by key, or builds a Message
    (proto/codec.py, the envelope, defines it)."""
    fields = {name for name, _ in field_literals(ast.parse(WIRE.read_text(encoding="utf-8")))} - SHARED_WORDS
    kinds = message_kinds()
    assert {"experience", "fifo_reply", "transition_reply", "not_modified", "error"} <= kinds
    assert {"batch_size", "chunks", "hold_ms", "incarnation", "episode_returns", "ready_at"} <= fields
    exempt = {WIRE, SRC / "proto" / "codec.py"}
    paths = [path for path in sorted(SRC.rglob("*.py")) if path not in exempt]
    violations = [v for path in paths for v in wire_violations(path, fields, kinds)]
    assert not violations, "\n".join(violations)
