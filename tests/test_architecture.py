"""The package's imports form no cycle (the layer contracts themselves are checked by
``lint-imports`` in CI, see pyproject.toml)."""

from __future__ import annotations

import grimp


def test_no_import_cycles_in_the_package():
    graph = grimp.build_graph("rs_lightning")
    modules = sorted(graph.modules)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in modules}
    # Tarjan's strongly connected components: a component of two or more modules is a cycle.
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in imports[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    assert cycles == [], cycles
