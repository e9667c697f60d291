"""The package's imports, read from the sources: no module imports another
that imports it back (directly or through others), and only the two modules
vLLM loads as plugins (plugin.py and tap.py) import vLLM."""

import ast
import pathlib

import pytest

PACKAGE = "vllm_otel_metrics"
SOURCES = pathlib.Path(__file__).resolve().parents[1] / "src" / PACKAGE
#: The modules that may import vLLM: vLLM loads them, inside vLLM.
VLLM_IMPORTERS = {"plugin", "tap"}


def modules():
    """The package's hand-written modules by name (not the generated ``v1``)."""
    return {path.stem: path for path in sorted(SOURCES.glob("*.py"))}


def imported(path, names):
    """The package's modules (among ``names``) and the top-level packages
    outside it that ``path`` imports, anywhere in it: at the top, in a
    function, under ``if TYPE_CHECKING``."""
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE:
                    if len(parts) > 1 and parts[1] in names:
                        inside.add(parts[1])
                else:
                    outside.add(parts[0])
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 0 and parts[0] != PACKAGE:
                outside.add(parts[0])
                continue
            # `from . import a, b`, `from .a import x`, `from vllm_otel_metrics.a import x`.
            rest = parts[1:] if node.level == 0 else [p for p in parts if p]
            if rest:
                if rest[0] in names:
                    inside.add(rest[0])
            else:
                inside.update(alias.name for alias in node.names if alias.name in names)
    return inside, outside


def graph():
    names = set(modules())
    return {name: imported(path, names) for name, path in modules().items()}


def cycle(edges):
    """One import cycle of ``edges`` (module: the modules it imports) as a
    list of modules, first one repeated at the end, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt, [*path, nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle():
    edges = {name: inside for name, (inside, _outside) in graph().items()}
    assert {"stream", "tap", "plugin", "wire", "bounded_queue"} <= set(edges)
    assert cycle(edges) is None, " -> ".join(cycle(edges))


def test_only_the_plugin_and_the_tap_import_vllm():
    importers = {name for name, (_inside, outside) in graph().items() if "vllm" in outside}
    assert importers == VLLM_IMPORTERS


@pytest.mark.parametrize(
    "edges,expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"a"}}, ["a", "a"]),
    ],
)
def test_the_cycle_check_finds_a_cycle(edges, expected):
    assert cycle(edges) == expected


def test_the_import_reader_sees_every_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import a, b\n"
        "from .c import x\n"
        "import vllm_otel_metrics.d\n"
        "from vllm_otel_metrics.e import y\n"
        "if TYPE_CHECKING:\n"
        "    from .f import z\n"
        "def g():\n"
        "    from vllm.v1.engine import core\n"
        "    import grpc\n"
    )
    inside, outside = imported(source, set("abcdef"))
    assert inside == set("abcdef")
    assert outside == {"typing", "vllm", "grpc"}
