"""The layout the code keeps: the command line, the framework integrations,
``jobq.admin``, ``jobq.testing``, the third-party store of the tests and the
benchmarks use jobq through its public names only (nothing that starts with
``_`` from another jobq module); the integrations share the command's work
through ``jobq.admin``, never importing the command (``jobq.cli``); the
command, ``jobq.admin`` and the queue ask a store what it can do, never its
class or its members; and the benchmark modules do not import each other in
a circle.

Read from the source (``ast``), so nothing here is imported or run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Where only public jobq names may be used (folders, or files).
CHECKED = [
    "jobq/admin",
    "jobq/cli",
    "jobq/contrib",
    "jobq/testing",
    "tests/support/dict_store.py",
    "tests/support/older_store.py",
    "benchmarks",
]

#: Private attributes of other libraries that the code may use.
FOREIGN = {"_get_current_object", "_exit"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def files() -> Iterator[Path]:
    for name in CHECKED:
        path = ROOT / name
        yield from [path] if path.is_file() else sorted(path.rglob("*.py"))


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source: str, here: str) -> list[str]:
    """In the module ``here`` whose text is ``source``: ``from jobq.x import
    _y``, imports of another package's private jobq module, and
    ``obj._attribute`` on anything but ``self``, ``cls`` and ``super()``."""

    def within(owner: str) -> bool:
        """Whether ``here`` belongs to ``owner``, a package below ``jobq``
        (whose private parts are its own business)."""
        return "." in owner and (here == owner or here.startswith(f"{owner}."))

    found = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module.split(".")[0] == "jobq" and not within(node.module):
                names = [alias.name for alias in node.names]
                found += [f"{node.module}.{n}" for n in names if private(n)]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] != "jobq":
                continue
            for i, part in enumerate(parts):
                if private(part) and not within(".".join(parts[:i])):
                    found.append(module)
                    break
        if isinstance(node, ast.Attribute) and private(node.attr):
            value = node.value
            mine = isinstance(value, ast.Name) and value.id in ("self", "cls")
            parent = isinstance(value, ast.Call) and (
                isinstance(value.func, ast.Name) and value.func.id == "super"
            )
            if not (mine or parent or node.attr in FOREIGN):
                found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


@pytest.mark.parametrize(
    "path", list(files()), ids=lambda path: str(path.relative_to(ROOT))
)
def test_only_public_jobq_names_are_used(path: Path) -> None:
    assert private_uses(path.read_text(encoding="utf-8"), module_name(path)) == []


def test_the_checker_finds_private_names() -> None:
    found = private_uses(
        "from jobq.tasks import _task_name\n"
        "from jobq._worker.runner import Runner\n"
        "import jobq.stores._entry\n"
        "from jobq.contrib.django import _tasks_backend\n"  # its own package's
        "def f(queue):\n"
        "    return queue._tasks\n",
        "jobq.contrib.django.tasks",
    )

    assert found == [
        "jobq.tasks._task_name",
        "jobq._worker.runner",
        "jobq.stores._entry",
        "queue._tasks (line 6)",
    ]


def command_imports(source: str, package: str) -> list[str]:
    """The parts of ``jobq.cli`` that a module of ``package`` whose text is
    ``source`` imports; ``from a import b`` counts ``a.b`` too (``b`` may be
    a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return sorted(m for m in found if m == "jobq.cli" or m.startswith("jobq.cli."))


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "jobq" / "contrib").rglob("*.py")),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_integrations_never_import_the_command(path: Path) -> None:
    package = module_name(path.parent)
    assert command_imports(path.read_text(encoding="utf-8"), package) == []


def test_the_import_checker_sees_every_spelling() -> None:
    found = command_imports(
        "import jobq.cli.command\n"
        "from jobq import cli\n"
        "from jobq.cli.render import escape\n"
        "from jobq.admin import render\n"
        "from ...cli import queues\n",
        "jobq.contrib.django",
    )

    assert found == [
        "jobq.cli",
        "jobq.cli.command",
        "jobq.cli.queues",
        "jobq.cli.render",
        "jobq.cli.render.escape",
    ]


#: The built-in stores, which only their module and ``store_from`` name.
BUILT_IN_STORES = {"MemoryStore", "JsonFileStore", "SqliteStore", "PostgresStore"}


@pytest.mark.parametrize(
    "path",
    [*(ROOT / "jobq" / "cli").rglob("*.py"), *(ROOT / "jobq" / "admin").rglob("*.py")],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_command_and_admin_ask_a_store_never_its_class(path: Path) -> None:
    named = {
        getattr(node, "id", None) or getattr(node, "attr", None) or node.name
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Name | ast.Attribute | ast.alias)
    }
    assert named & BUILT_IN_STORES == set()


def test_the_queue_never_probes_its_store() -> None:
    """What a store can do is its ``capabilities``, not what ``getattr`` finds."""
    probes = [
        ast.unparse(node)
        for node in ast.walk(ast.parse((ROOT / "jobq" / "queue.py").read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and "store" in ast.unparse(node.args[0])
    ]
    assert probes == []


def test_the_benchmark_modules_import_no_circle() -> None:
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        here = module_name(path)
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                imported |= {f"benchmarks.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        graph[here] = {m for m in imported if m.startswith("benchmarks.")} - {here}

    def circle(start: str, node: str, seen: tuple[str, ...]) -> tuple[str, ...]:
        for following in sorted(graph.get(node, ())):
            if following == start:
                return (*seen, start)
            if following not in seen:
                found = circle(start, following, (*seen, following))
                if found:
                    return found
        return ()

    circles = {m: found for m in graph if (found := circle(m, m, (m,)))}
    assert circles == {}


# -- the package's own imports ------------------------------------------------------

#: The engine, top to bottom: a module imports only those below it.
ENGINE = [
    "jobq.queue",
    "jobq._worker.pool",
    "jobq._worker.dispatch",
    "jobq._periodic.scheduler",
    "jobq._worker.runner",
    "jobq._worker.isolation",
    "jobq._worker.child",
    "jobq.tasks",
    "jobq._worker.limits",
    "jobq._periodic.slots",
    "jobq._worker.interrupt",
]

#: Circles left, with why: the Django package's module that serves Django's
#: Tasks framework is loaded by Django from a dotted path and finds the
#: package's queue there, while the package loads it (lazily) to build it.
KNOWN_CIRCLES = [{"jobq.contrib.django", "jobq.contrib.django._tasks_backend"}]


def jobq_imports() -> dict[str, set[str]]:
    """Each jobq module and the jobq modules it imports, anywhere in it
    (type-only imports and imports inside functions included)."""
    modules = {
        module_name(path): path for path in sorted((ROOT / "jobq").rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for here, path in modules.items():
        package = path.name == "__init__.py"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - node.level]
                    parts = here.split(".") if package and node.level == 1 else parts
                    base = ".".join([*parts, *([base] if base else [])])
                for alias in node.names:
                    name = f"{base}.{alias.name}"
                    found.add(name if name in modules else base)
        graph[here] = {m for m in found if m in modules} - {here}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or not."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for following in graph[todo.pop()]:
                if following not in seen:
                    seen.add(following)
                    todo.append(following)
        reach[start] = seen
    groups: list[set[str]] = []
    for module in sorted(graph):
        group = {module} | {m for m in reach[module] if module in reach[m]}
        if len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


def test_the_package_imports_no_circle() -> None:
    assert circles(jobq_imports()) == KNOWN_CIRCLES


def test_the_engine_imports_only_downward() -> None:
    """queue -> worker pool -> dispatcher -> scheduler -> runner -> isolated
    tasks' processes -> tasks -> time limit -> interruption; the modules
    below the engine (the stores, the types, the events...) import none of
    it but the interruption's marker of handler calls (``hands_over``, for
    ``jobq.middleware``)."""
    graph = jobq_imports()
    rank = {module: i for i, module in enumerate(ENGINE)}
    above = ("jobq.admin", "jobq.contrib", "jobq.cli", "jobq.web", "jobq.testing")
    upward = [
        f"{module} -> {imported}"
        for module, imports in graph.items()
        for imported in imports
        if imported in rank
        and (
            rank[imported] <= rank[module]
            if module in rank
            else module != "jobq"
            and not module.startswith(above)
            and imported != "jobq._worker.interrupt"
        )
    ]
    assert upward == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]
