"""What an ensemble's model page shows: the steps of the version it shows
(each composing model, the version pinned, the state of that version, the
input and output mappings), the versions every ensemble version pins, and a
graph of the steps drawn as SVG on the server (:func:`graph`: the
ensemble's inputs on the left, each step in the column after the last step
it reads from, its outputs on the right, an arrow per tensor).

An ensemble's version is its plan (``properties["ensemble"]``, written by
``models_store/intake/ensembles.py``): it has no file of its own, so its
size is not shown as "0 bytes", and no instance group (its steps run on
their models' instances).
"""

from __future__ import annotations

from dataclasses import dataclass

from models_store.registry.models import ModelVersion, RegisteredModel

ENSEMBLE = "ensemble"
#: Graph geometry (SVG user units).
NODE_W, NODE_H, COLUMN, ROW, MARGIN = 170, 46, 230, 66, 12


@dataclass(frozen=True)
class Node:
    key: str
    label: str
    detail: str
    kind: str  # "input", "step", "output"
    column: int
    row: int
    href: str = ""

    @property
    def x(self) -> int:
        return MARGIN + self.column * COLUMN

    @property
    def y(self) -> int:
        return MARGIN + self.row * ROW


def _steps(version: ModelVersion) -> list[dict]:
    return ((version.properties or {}).get("ensemble") or {}).get("steps", [])


def _depths(inputs: list[str], steps: list[dict]) -> list[int]:
    """Each step's column: 1 + the column of the last step whose output it reads (ensemble inputs: 0)."""
    produced = {name: 0 for name in inputs}
    depths = []
    for step in steps:  # the plan lists steps in an order that runs (intake checks it)
        depth = 1 + max((produced.get(t, 0) for t in step.get("input_map", {}).values()), default=0)
        depths.append(depth)
        for tensor in step.get("output_map", {}).values():
            produced[tensor] = depth
    return depths


def graph(version: ModelVersion, step_href=lambda name, number: "") -> dict:
    """The steps of an ensemble ``version`` as a graph to draw: ``nodes``
    (:class:`Node`, with ``x``/``y``), ``edges`` (``{"d": SVG path,
    "label", "x", "y"}``: the label's start), ``width``, ``height``, ``node_w``, ``node_h``.
    ``step_href(model, version)``: a step's link."""
    steps = _steps(version)
    inputs = [t["name"] for t in version.inputs]
    outputs = [t["name"] for t in version.outputs]
    depths = _depths(inputs, steps)
    last = max(depths, default=0) + 1
    rows: dict[int, int] = {}

    def place(column: int) -> int:
        rows[column] = rows.get(column, -1) + 1
        return rows[column]

    nodes = [Node(f"in:{n}", n, "input", "input", 0, place(0)) for n in inputs]
    for index, (step, depth) in enumerate(zip(steps, depths, strict=True)):
        name, number = step["model_name"], step["model_version"]
        detail = f"step {index + 1} · version {number}"
        nodes.append(Node(f"step:{index}", name, detail, "step", depth, place(depth), step_href(name, number)))
    nodes += [Node(f"out:{n}", n, "output", "output", last, place(last)) for n in outputs]
    by_key = {node.key: node for node in nodes}
    producer = {n: f"in:{n}" for n in inputs}
    edges = []
    for index, step in enumerate(steps):
        for tensor in step.get("input_map", {}).values():
            if tensor in producer:
                edges.append(_edge(by_key[producer[tensor]], by_key[f"step:{index}"], tensor))
        for tensor in step.get("output_map", {}).values():
            producer[tensor] = f"step:{index}"
    for name in outputs:
        if name in producer:
            edges.append(_edge(by_key[producer[name]], by_key[f"out:{name}"], name))
    height = MARGIN * 2 + max(rows.values(), default=0) * ROW + NODE_H
    return {
        "nodes": nodes, "edges": edges, "width": MARGIN * 2 + last * COLUMN + NODE_W, "height": height,
        "node_w": NODE_W, "node_h": NODE_H,
    }  # fmt: skip


def _edge(source: Node, target: Node, label: str) -> dict:
    x1, y1 = source.x + NODE_W, source.y + NODE_H // 2
    x2, y2 = target.x, target.y + NODE_H // 2
    bend = (x2 - x1) // 2
    return {
        "d": f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2 - 6},{y2}",
        "label": label,
        "x": x1 + 8,  # next to its source: a tensor read by several steps is named once
        "y": y1 - 5,
    }


def _pinned_states(steps_by_version: list[list[dict]]) -> dict[tuple[str, int], str]:
    """(model, version) -> state of every version the ensemble's versions pin (one query)."""
    names = {s["model_name"] for steps in steps_by_version for s in steps}
    rows = ModelVersion.objects.filter(model__name__in=names).values_list("model__name", "number", "state")
    return {(name, number): state for name, number, state in rows}


def ensemble_view(model: RegisteredModel, versions: list[ModelVersion], shown: ModelVersion | None, href) -> dict:
    """What the model page of an ensemble shows (None for any other model):
    ``version`` (the version whose steps are shown: ``shown``, else the
    highest with a plan), ``steps`` (model, version, its state, mappings),
    ``pins`` (per ensemble version: its number, state and ``model vN`` pins),
    ``graph`` (:func:`graph`). ``href(model, number)``: a version's page."""
    if model.platform != ENSEMBLE:
        return None
    planned = [v for v in versions if _steps(v)]
    version = shown if shown is not None and _steps(shown) else next(iter(planned), None)
    states = _pinned_states([_steps(v) for v in planned])
    pins = [
        {"number": v.number, "state": v.state,
         "steps": [{"model": s["model_name"], "version": s["model_version"]} for s in _steps(v)]}
        for v in planned
    ]  # fmt: skip
    if version is None:
        return {"version": None, "steps": [], "pins": pins, "graph": None}
    steps = [
        {"model": s["model_name"], "version": s["model_version"], "configured": s.get("configured_version"),
         "state": states.get((s["model_name"], s["model_version"]), "deleted"),
         "input_map": s.get("input_map", {}), "output_map": s.get("output_map", {})}
        for s in _steps(version)
    ]  # fmt: skip
    return {"version": version.number, "steps": steps, "pins": pins, "graph": graph(version, href)}
