// The jobq dashboard: refreshes the overview's counts by itself, and asks
// before an action that has data-confirm. No inline script (the CSP forbids it).
"use strict";

(function () {
  const body = document.body;
  const base = body.dataset.base || "";
  const every = Number(body.dataset.refreshMs) || 3000;

  function minute(seconds) {
    return new Date(seconds * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = String(text);
    return td;
  }

  async function refresh() {
    try {
      const response = await fetch(base + "/stats.json", {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (!response.ok) return;
      const data = await response.json();
      for (const [name, value] of Object.entries(data.counts)) {
        const node = document.querySelector('[data-count="' + name + '"]');
        if (node) node.textContent = String(value);
      }
      // The limits' rows, found by name (a name is data: compared, never
      // put in a selector).
      const limits = new Map((data.limits || []).map(function (l) { return [l.name, l]; }));
      for (const row of document.querySelectorAll("tr[data-limit]")) {
        const limit = limits.get(row.dataset.limit);
        if (!limit) continue;
        for (const count of row.querySelectorAll("[data-limit-count]")) {
          count.textContent = String(limit[count.dataset.limitCount]);
        }
      }
      const rows = document.getElementById("throughput");
      if (rows) {
        rows.replaceChildren(...data.throughput.slice().reverse().map(function (m) {
          const tr = document.createElement("tr");
          tr.append(cell(minute(m[0])), ...m.slice(1).map(cell));
          return tr;
        }));
      }
    } catch (error) {
      // The server is away for a moment: try again at the next tick.
    }
  }

  if (document.getElementById("counts")) {
    setInterval(refresh, every);
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    const question = form.dataset.confirm;
    if (!question) return;
    if (!window.confirm(question)) {
      event.preventDefault();
      return;
    }
    const confirmed = form.querySelector('input[name="confirmed"]');
    if (confirmed) confirmed.value = "yes";
  });
})();
