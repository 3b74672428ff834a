// The jobq dashboard: refreshes the overview's counts, its figures and the
// processes by itself, asks before an action that has data-confirm, and helps
// tick a list's rows. No inline script (the CSP forbids it).
"use strict";

(function () {
  const body = document.body;
  const base = body.dataset.base || "";
  const every = Number(body.dataset.refreshMs) || 3000;
  const asked = { credentials: "same-origin" };

  async function refreshCounts() {
    const response = await fetch(base + "/stats.json", { ...asked, headers: { Accept: "application/json" } });
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
  }

  // A part drawn by the server (the overview's figures, the processes):
  // fetched again from the address it names and put in its place.
  async function refreshPart(part) {
    const response = await fetch(base + part.dataset.refresh, { ...asked, headers: { Accept: "text/html" } });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById(part.id);
    if (!fresh) return;
    if (part.querySelector("details[open]")) fresh.querySelector("details")?.setAttribute("open", "");
    part.replaceWith(document.adoptNode(fresh));
  }

  async function refresh() {
    try {
      if (document.getElementById("counts")) await refreshCounts();
      for (const part of document.querySelectorAll("[data-refresh]")) await refreshPart(part);
    } catch (error) {
      // The server is away for a moment: try again at the next tick.
    }
  }

  if (document.getElementById("counts") || document.querySelector("[data-refresh]")) {
    setInterval(refresh, every);
  }

  // The rows ticked for an action on the selected jobs: a box that ticks
  // them all, and the action buttons enabled only while one is ticked.
  const selected = document.getElementById("selected");
  if (selected) {
    const boxes = Array.from(document.querySelectorAll('input[name="id"][form="selected"]'));
    const all = document.querySelector("[data-select-all]");
    const buttons = selected.querySelectorAll("button");
    const update = function () {
      const ticked = boxes.filter(function (box) { return box.checked; }).length;
      for (const button of buttons) button.disabled = ticked === 0;
      all.checked = ticked === boxes.length;
      all.indeterminate = ticked > 0 && ticked < boxes.length;
    };
    all.hidden = false;
    all.addEventListener("change", function () {
      for (const box of boxes) box.checked = all.checked;
      update();
    });
    for (const box of boxes) box.addEventListener("change", update);
    update();
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    // The button pressed may ask for itself (one form, several actions).
    const asking = event.submitter && event.submitter.dataset.confirm ? event.submitter : form;
    const question = asking.dataset.confirm;
    if (!question) return;
    if (!window.confirm(question)) {
      event.preventDefault();
      return;
    }
    const confirmed = form.querySelector('input[name="confirmed"]');
    if (confirmed) confirmed.value = "yes";
  });
})();
