"""A static picture of one stage: the graph as SVG text, drawn in Python.

The pass stepper needs a browser that runs its JavaScript. Where there is none (a notebook on
GitHub, nbconvert without widget state, a terminal), the compilation's rich output falls back to
this picture of the final graph. It draws what the stepper draws, from the same data (a stage of
`teachflow.viz.stepper_data`, put together by `teachflow.viz.expand`): each node a box at its place
in the layout with its label, each edge a polyline along its route, and each node's change status
told by an Okabe–Ito colour, an outline style and a word badge, as in the widget
(``widgets/stepper.css``); its device by its fill (`teachflow.viz.devices`). A control-flow node is
drawn as the widget draws its box closed: the names of the graphs it owns under its label, and how
many changes the pass made inside them; so is a module's box (`teachflow.viz.groups`), with how many
nodes it holds under its name.
"""

from __future__ import annotations

from html import escape

from teachflow.viz.devices import device_fill
from teachflow.viz.groups import collapsed

#: Box size and spacing in pixels (the layout's unit is one grid step), as in the stepper's
#: widgets/stepper/common.js.
NODE_W, NODE_H = 124, 30
X_SCALE, Y_SCALE = 150, 70
PAD = 36
#: The most characters of a label in its box (a longer one is cut, its tooltip says it all).
LABEL_CHARS = 17

#: status -> (outline colour, outline width, dash pattern, badge)
STYLE = {
    "added": ("#009e73", 2.5, "", "+ new"),
    "removed": ("#d55e00", 2.0, "6 4", "− gone"),
    "replaced": ("#e69f00", 2.5, "10 3 2 3", "↻ replaced"),
    "merged": ("#56b4e9", 3.0, "2 3", "⇉ merged"),
    "fused": ("#cc79a7", 3.5, "", "⊕ fused"),
    "placed": ("#000000", 2.0, "", "⊙ placed"),
    "recomputed": ("#f0e442", 2.5, "8 2", "⟲ again"),
    "moved": ("#0072b2", 3.0, "4 2", "⇅ moved"),
    "new_slot": ("#0072b2", 1.5, "", "▭ slot"),
    "reused": ("#0072b2", 2.5, "1 2", "♻ reused"),
    "in_place": ("#0072b2", 3.0, "", "✎ in place"),
    "bucketed": ("#56b4e9", 4.0, "12 3", "▤ bucket"),
    "kept": ("#8c8c8c", 1.2, "", ""),
}


def graph_svg(stage: dict) -> str:
    """An SVG document of one stage, full (`expand_stage(compilation_data(...), i)`).

    The layout's rows that this stage leaves empty (the rows of nodes a pass removed) are
    closed up: the widget keeps them so nodes stay put from stage to stage, a picture need not.
    """
    if stage.get("groups"):  # a model's modules: drawn as boxes, closed
        stage = collapsed(stage)
    nodes = stage["nodes"]
    row = _rows(stage)
    where = {n["id"]: (n["x"] * X_SCALE, row[n["y"]] * Y_SCALE) for n in nodes}
    xs = [x for x, _ in where.values()] or [0.0]
    ys = [y for _, y in where.values()] or [0.0]
    left, top = min(xs) - NODE_W / 2 - PAD, min(ys) - NODE_H / 2 - PAD
    width, height = max(xs) - min(xs) + NODE_W + 2 * PAD, max(ys) - min(ys) + NODE_H + 2 * PAD
    kernels = stage["stats"]["kernels"]
    count = stage["stats"]["nodes"]
    title = (f"{stage['pass']}: {count} node{'s' * (count != 1)}, "
             f"{kernels} kernel{'s' * (kernels != 1)}")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="{left:.1f} {top:.1f} {width:.1f} {height:.1f}" font-family="monospace" '
        f'font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" height="{height:.1f}" '
        'fill="white"/>',
        '<g fill="none" stroke="#8c8c8c" stroke-width="1.3">',
    ]
    devices = sorted({n.get("device", "cpu") for n in nodes})
    if len(devices) > 1:  # the key to the fills, in the margin above the graph
        parts.insert(3, _legend(devices, left + 6, top + 6))
    for edge in stage["edges"]:
        points = _edge_points(edge, where, row)
        parts.append(f'<polyline points="{points}"/>')
    parts.append("</g>")
    for node in nodes:
        parts.append(_node(node, *where[node["id"]]))
    parts.append("</svg>")
    return "\n".join(parts)


def _rows(stage: dict) -> dict[float, int]:
    """Each layout row in use (by a node or an edge's bend) -> its row in the picture."""
    used = {n["y"] for n in stage["nodes"]}
    used.update(y for edge in stage["edges"] for _, y in edge["route"][1:-1])
    return {y: i for i, y in enumerate(sorted(used))}


def _edge_points(edge: dict, where: dict, row: dict[float, int]) -> str:
    """From the bottom of the source box, through the route's bends, to the top of the target."""
    (x0, y0), (x1, y1) = where[edge["from"]], where[edge["to"]]
    bends = [(x * X_SCALE, row[y] * Y_SCALE) for x, y in edge["route"][1:-1]]
    points = [(x0, y0 + NODE_H / 2), *bends, (x1, y1 - NODE_H / 2)]
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def _node(node: dict, x: float, y: float) -> str:
    colour, stroke, dash, badge = STYLE.get(node["status"], STYLE["kept"])
    owned = [part["key"] for part in node.get("subgraphs", [])]
    label = f"▸ {node['label']}" if owned else node["label"]
    label = label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"
    left, top = x - NODE_W / 2, y - NODE_H / 2
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    rounded = NODE_H / 2 if node["status"] == "fused" else 4
    weight = ' font-weight="bold"' if node["is_output"] else ""
    fill = device_fill(node.get("device", "cpu"))
    box = (f'x="{left:.1f}" y="{top:.1f}" width="{NODE_W}" height="{NODE_H}" rx="{rounded}" '
           f'fill="{fill}" stroke="{colour}" stroke-width="{stroke}"{dashes}')
    out = [
        f'<g data-node-id="{node["id"]}" data-status="{node["status"]}">',
        f"<title>{escape(node['text'])}</title>",
    ]
    if owned:  # a control-flow box: a second outline, and its graphs' names under its label
        out.append(f'<rect x="{left - 3:.1f}" y="{top - 3:.1f}" width="{NODE_W + 6}" '
                   f'height="{NODE_H + 6}" rx="6" fill="white" stroke="{colour}"/>')
    out.append(f'<rect data-node-id="{node["id"]}" {box}/>')
    if owned:
        out.append(f'<text x="{x:.1f}" y="{top + 12.5:.1f}" text-anchor="middle"{weight}>'
                   f'{escape(label)}</text><text x="{x:.1f}" y="{top + 25:.1f}" '
                   f'text-anchor="middle" font-size="9.5" fill="#5f5f5f">'
                   f'{escape(" · ".join(owned))}</text>')
    else:
        out.append(f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle"{weight}>'
                   f"{escape(label)}</text>")
    above = top - (12 if owned else 9)  # (clear of a box's two lines of text)
    if badge:
        out.append(_badge(badge, left + NODE_W - (len(badge) * 6 + 8) + 6, above, colour))
    if node.get("transfer"):  # a copy between devices: from where to where, under its box
        out.append(_badge("⇢ {} → {}".format(*node["transfer"]), left + 6, top + NODE_H - 5,
                          "#e0e0e0"))
    results = len(node.get("results") or ())
    if results > 1 and not owned:  # a kernel with several results: as many edges leave it
        out.append(_badge(f"{results} results", left - 6, top + NODE_H - 5, "#e0e0e0"))
    if node.get("changes_inside"):
        k = node["changes_inside"]
        out.append(_badge(f"{k} change{'s' * (k != 1)} inside", left - 6,
                          top + NODE_H - 2 if badge else above, "#f0e442"))
    out.append("</g>")
    return "".join(out)


def _badge(text: str, left: float, top: float, colour: str) -> str:
    """A pill with a word in it, its top left corner at (left, top)."""
    w = len(text) * 6 + 8
    return (f'<rect x="{left:.1f}" y="{top:.1f}" width="{w}" height="14" rx="7" '
            f'fill="{colour}"/><text x="{left + w / 2:.1f}" y="{top + 10.5:.1f}" '
            f'text-anchor="middle" font-size="9.5" font-family="sans-serif">'
            f"{escape(text)}</text>")


def _legend(devices: list[str], left: float, top: float) -> str:
    """The key to the fills: a swatch and a name per device, in a row."""
    out, x = ['<g font-size="10" font-family="sans-serif">'], left
    for device in devices:
        out.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="14" height="10" rx="2" '
                   f'fill="{device_fill(device)}" stroke="#8c8c8c"/><text x="{x + 18:.1f}" '
                   f'y="{top + 9:.1f}">{escape(device)}</text>')
        x += 26 + 7 * len(device)
    out.append("</g>")
    return "".join(out)
