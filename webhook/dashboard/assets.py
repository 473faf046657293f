"""The dashboard's stylesheet and script, served from the same origin as the page.

Kept here as text (no build step, no files to ship beside the package). The script only
fetches the JSON endpoint every 2 s and puts the server-rendered fragment in place; it
builds no markup of its own from cluster data.
"""

from __future__ import annotations

__all__ = ["SCRIPT", "STYLE"]

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1.5rem 2rem; color: #1d232a; }
header { display: flex; align-items: baseline; gap: 1rem; }
h1 { font-size: 1.3rem; margin: 1rem 0 0.3rem; }
h2 { font-size: 1.05rem; margin: 0 0 0.4rem; }
#updated { color: #5b6570; margin: 0; }
#updated.stale { color: #b3261e; font-weight: 600; }
#scope { color: #5b6570; margin: 0 0 1rem; }
section { border: 1px solid #d5dae0; border-radius: 6px; padding: 0.8rem 1rem; margin: 0 0 1rem; }
.tag { display: inline-block; background: #eef1f4; border-radius: 4px; padding: 0 0.4rem;
       margin: 0 0.4rem 0.4rem 0; font-size: 0.85rem; }
.problem { color: #b3261e; }
.none, .loading { color: #5b6570; }
table { border-collapse: collapse; }
th { text-align: left; font-weight: 600; color: #5b6570; font-size: 0.85rem; }
td, th { padding: 0.2rem 0.6rem 0.2rem 0; vertical-align: middle; }
td.words { white-space: nowrap; padding-left: 0.6rem; }
tr.waiting td:nth-child(-n+3) { white-space: nowrap; }
tr.preempted td:nth-child(-n+2) { white-space: nowrap; }
svg.bar { width: 18rem; height: 0.9rem; display: block; background: #fff;
          outline: 1px solid #d5dae0; }
.bar .used { fill: #2f7d32; }
.bar .lent { fill: #8e6bbf; }
.bar .free { fill: #dbe9dc; }
.bar .borrowed { fill: #e08a00; }
.bar .headroom { fill: #fbe7c6; }
.bar .nominal { stroke: #1d232a; stroke-width: 0.6; }
.legend { color: #5b6570; font-size: 0.85rem; margin: 0 0 1rem; }
.key::before { content: ""; display: inline-block; width: 0.8rem; height: 0.8rem;
               margin: 0 0.3rem -0.1rem 0.6rem; }
.key.used::before { background: #2f7d32; }
.key.lent::before { background: #8e6bbf; }
.key.free::before { background: #dbe9dc; }
.key.borrowed::before { background: #e08a00; }
.key.headroom::before { background: #fbe7c6; }
.key.nominal::before { width: 2px; background: #1d232a; }
"""

SCRIPT = """
"use strict";
(() => {
  const main = document.getElementById("dashboard");
  const updated = document.getElementById("updated");
  let shown = null;
  let good = updated.textContent;
  async function refresh() {
    try {
      const answer = await fetch("/api/dashboard", {cache: "no-store"});
      if (!answer.ok) throw new Error(`the dashboard answered ${answer.status}`);
      const page = await answer.json();
      if (page.html !== shown) {
        const fragment = document.createElement("template");
        fragment.innerHTML = page.html;  // rendered and escaped by the server
        main.replaceChildren(fragment.content);
        shown = page.html;
      }
      good = updated.textContent = `updated ${page.model.generated || ""}`;
      updated.className = "";
    } catch (error) {
      updated.textContent = `${good}; not since: ${error.message}`;
      updated.className = "stale";
    }
  }
  setInterval(refresh, 2000);
})();
"""
