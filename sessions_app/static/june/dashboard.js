// The operator dashboard re-reads its body (?fragment=1, rendered and escaped by Django) every
// few seconds while the tab is visible; a failed read keeps the last body and says so.
(() => {
  "use strict";
  const box = document.getElementById("june-dashboard");
  if (!box) return;
  const every = Math.max(2, Number(box.dataset.refresh) || 5) * 1000;
  async function refresh() {
    if (document.hidden) return;
    try {
      const r = await fetch(box.dataset.url, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      box.innerHTML = await r.text();  // our own template's output
      box.dataset.refreshed = String(Number(box.dataset.refreshed || 0) + 1);
      box.dispatchEvent(new CustomEvent("june:updated", { bubbles: true }));  // time.js: its times
    } catch (e) {
      const at = document.getElementById("june-dashboard-at");
      if (at) at.textContent = `Could not refresh (${e.message}); showing the last reading.`;
    }
  }
  setInterval(refresh, every);
})();
