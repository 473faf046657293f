"""The dashboard's HTML, rendered on the server from the page model (pure).

Every string that comes from the cluster (names, messages, quantities) goes through
`html.escape` on its way into the page, attribute values included: object names and
messages are written by users. Bars are SVG shapes whose sizes are presentation
attributes, so the page needs no inline style and no inline script, and the server's
Content-Security-Policy can forbid both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from quota.quantity import amount

__all__ = ["Bar", "bar", "body", "document"]

Model = Mapping[str, Any]
LEGEND = (
    '<p class="legend">'
    + " ".join(
        f'<span class="key {part}">{words}</span>'
        for part, words in (
            ("used", "in use"),
            ("lent", "lent to the cohort"),
            ("free", "free"),
            ("borrowed", "borrowed"),
            ("headroom", "may still borrow"),
        )
    )
    + ' <span class="key nominal">nominal quota</span></p>'
)


@dataclass(frozen=True)
class Bar:
    """One flavor-resource drawn on a scale of 100: (part, width) segments left to right,
    and where the nominal quota ends. Parts: `used` (own quota in use), `lent` (own quota
    in use by cohort members), `free`, `borrowed` (beyond nominal), `headroom` (what the
    borrowing limit still allows)."""

    segments: tuple[tuple[str, float], ...]
    nominal_at: float


def bar(row: Mapping[str, Any], in_cohort: bool) -> Bar:
    """The bar of a resource row of a queue card (quantities already checked by the model)."""
    resource = row["name"]
    nominal, used, lent = (amount(resource, row[k]) for k in ("nominal", "inUse", "lent"))
    limit = row.get("borrowingLimit")
    headroom_total = amount(resource, limit) if in_cohort and limit is not None else 0
    own = min(used, nominal)
    lent = min(lent, nominal - own)
    borrowed = used - own
    parts = (
        ("used", own),
        ("lent", lent),
        ("free", nominal - own - lent),
        ("borrowed", borrowed),
        ("headroom", max(0, headroom_total - borrowed)),
    )
    scale = max(1, sum(width for _, width in parts))
    segments = tuple((part, 100 * width / scale) for part, width in parts if width > 0)
    return Bar(segments, 100 * nominal / scale)


def _svg(shape: Bar, title: str) -> str:
    rects, x = [], 0.0
    for part, width in shape.segments:
        rects.append(f'<rect class="{part}" x="{x:.2f}" y="0" width="{width:.2f}" height="10"/>')
        x += width
    marker = f'<line class="nominal" x1="{shape.nominal_at:.2f}" x2="{shape.nominal_at:.2f}"'
    return (
        '<svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>{"".join(rects)}'
        f'{marker} y1="0" y2="10"/></svg>'
    )


def _pairs(pairs: Sequence[Mapping[str, str]]) -> str:
    return ", ".join(f"{p['amount']} to {p['clusterQueue']}" for p in pairs)


def _words(row: Mapping[str, Any], in_cohort: bool) -> list[str]:
    words = [f"{row['inUse']} of {row['nominal']} in use"]
    if not in_cohort:
        return words
    if borrowed_from := row.get("borrowedFrom"):
        words.append("borrowed " + ", ".join(f"{p['amount']} from {p['clusterQueue']}"
                                             for p in borrowed_from))  # fmt: skip
    if lent_to := row.get("lentTo"):
        words.append(f"lent {_pairs(lent_to)}")
    words.append(f"can lend {row['lendable']}")
    limit = row.get("borrowingLimit")
    words.append("borrowing: no limit" if limit is None else f"may borrow up to {limit}")
    return words


def _card(card: Model) -> str:
    in_cohort = "cohort" in card
    tags = [f"cohort {card['cohort']}"] if in_cohort else []
    if card.get("whenFull"):
        tags.append(f"whenFull: {card['whenFull']}")
    tags += [f"LocalQueue {q['key']}" + _counts(q) for q in card.get("localQueues", ())]
    head = f'<h2>ClusterQueue <span class="name">{escape(card["name"])}</span></h2>'
    out = [f'<section class="queue" data-queue="{escape(card["name"])}">', head]
    out.append(" ".join(f'<span class="tag">{escape(t)}</span>' for t in tags))
    out += [f'<p class="problem">{escape(p)}</p>' for p in card.get("problems", ())]
    rows = [(f["name"], r) for f in card["flavors"] for r in f["resources"]]
    if rows:
        out.append("<table><tr><th>flavor</th><th>resource</th><th>usage</th><th>in use</th></tr>")
        for flavor, row in rows:
            words = _words(row, in_cohort)
            out.append(
                f"<tr><td>{escape(flavor)}</td><td>{escape(row['name'])}</td>"
                f"<td>{_svg(bar(row, in_cohort), words[0])}</td>"
                f'<td class="words">{escape(" · ".join(words))}</td></tr>'
            )
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def _counts(local: Mapping[str, Any]) -> str:
    counts = [f"{local[k]} {k}" for k in ("admitted", "pending") if local.get(k) is not None]
    return f" ({', '.join(counts)})" if counts else ""


def _waiting(rows: Sequence[Model]) -> str:
    out = [f'<section id="waiting"><h2>Waiting ({len(rows)})</h2>']
    if not rows:
        out.append('<p class="none">Nothing waits.</p></section>')
        return "".join(out)
    out.append("<table><tr><th>position</th><th>workload</th><th>queue</th><th>why</th></tr>")
    for row in rows:
        position = f"{row['position']} of {row['of']}" if row["position"] is not None else "-"
        what = f"{row['kind']} {row['key']}" + (f" (group {row['group']})" if row["group"] else "")
        queue = row["clusterQueue"] or "?"
        reason = row["reason"] or "not looked at yet"
        out.append(
            f'<tr class="waiting" data-key="{escape(row["key"])}"><td>{escape(position)}</td>'
            f"<td>{escape(what)}</td><td>{escape(queue)}</td><td>{escape(reason)}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def _preempted(rows: Sequence[Model]) -> str:
    """The workloads draquota evicts for a preemptor, and why (the preemptor and the
    ClusterQueue that reclaimed); nothing when there are none."""
    if not rows:
        return ""
    out = [f'<section id="preempted"><h2>Being preempted ({len(rows)})</h2>']
    out.append("<table><tr><th>workload</th><th>queue</th><th>why</th></tr>")
    for row in rows:
        what = f"{row['kind']} {row['key']}" + (f" (group {row['group']})" if row["group"] else "")
        out.append(
            f'<tr class="preempted" data-key="{escape(row["key"])}"><td>{escape(what)}</td>'
            f"<td>{escape(row['clusterQueue'] or '?')}</td><td>{escape(row['message'])}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def body(model: Model) -> str:
    """What the page shows inside <main>: the same fragment the page fetches every 2 s."""
    if model.get("loading"):
        return f'<p class="loading">Loading: {escape(model["loading"])}</p>'
    out = [f'<p id="scope">{escape(model["scope"])}</p>', LEGEND]
    if model.get("error"):
        out.append(f'<p class="problem">{escape(model["error"])}</p>')
    out += [f'<p class="problem">{escape(p)}</p>' for p in model.get("problems", ())]
    if not model["queues"]:
        out.append('<p class="none">No queues to show.</p>')
    out += [_card(card) for card in model["queues"]]
    out.append(_waiting(model["waiting"]))
    out.append(_preempted(model.get("preempted", ())))
    return "".join(out)


def document(model: Model) -> str:
    """The whole page: the body, the stylesheet and the refreshing script (same origin)."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>draquota dashboard</title><link rel="stylesheet" href="/dashboard.css">'
        '<script src="/dashboard.js" defer></script></head><body>'
        '<header><h1>draquota</h1><p id="updated">updated '
        f"{escape(model.get('generated', ''))}</p></header>"
        f'<main id="dashboard">{body(model)}</main></body></html>'
    )
