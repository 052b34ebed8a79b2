// The admin session page while its operator has the session (docs/operations.md "Takeover"):
// the session's websocket (the chat's own machinery: the log replayed, then live) shows the
// user's and the operator's messages as they are written; the form sends a "say" frame.
(() => {
  "use strict";
  const panel = document.getElementById("june-takeover-live");
  if (!panel) return;
  const out = document.getElementById("june-takeover-log");
  const form = document.getElementById("june-takeover-say");
  const text = document.getElementById("june-takeover-text");
  const state = document.getElementById("june-takeover-state");
  const proto = location.protocol === "https:" ? "wss" : "ws";
  let socket = null;
  let lastSeq = 0;
  let nextId = 1;

  // a message's files: a link each to the staff-checked download (a new tab), name and size
  function files(row, list) {
    if (!Array.isArray(list) || !list.length) return;
    const box = document.createElement("div");
    box.className = "june-takeover-files";
    for (const a of list) {
      const link = document.createElement("a");
      link.href = `${panel.dataset.attachments}/${encodeURIComponent(a.id)}`;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
      link.className = "june-takeover-file";
      link.textContent = `${a.name} (${a.type}, ${a.size} bytes${a.pages ? `, ${a.pages} pages` : ""})`;
      box.appendChild(link);
      box.appendChild(document.createTextNode(" "));
    }
    row.appendChild(box);
  }

  function show(cls, who, body, attachments) {
    const row = document.createElement("div");
    row.className = `june-takeover-msg ${cls}`;
    const name = document.createElement("b");
    name.textContent = `${who}: `;
    row.appendChild(name);
    row.appendChild(document.createTextNode(body));
    files(row, attachments);
    out.appendChild(row);
    out.scrollTop = out.scrollHeight;
  }

  function onFrame(f) {
    // an ack's seq names the event its "say" wrote, which comes after it: only events count
    if (typeof f.seq === "number" && f.type !== "ack" && f.type !== "error") {
      if (f.seq <= lastSeq) return;
      lastSeq = f.seq;
    }
    if (f.type === "person.message") show(f.role, f.role === "person" ? `${f.by} (you)` : f.by, f.text, f.attachments);
    else if (f.type === "turn.started" && (f.text || f.attachments)) show("user", "user", f.text, f.attachments);
    else if (f.type === "message.completed" && f.text) show("assistant", "assistant", f.text);
    else if (f.type === "takeover.ended") { state.textContent = "handed back"; form.hidden = true; }
    else if (f.type === "ready") state.textContent = "live";
    else if (f.type === "error") state.textContent = `error: ${f.message}`;
    else if (f.type === "ack" && f.for === "say") { text.value = ""; text.focus(); }
  }

  function connect() {
    socket = new WebSocket(`${proto}://${location.host}${panel.dataset.ws}?after=${lastSeq}`);
    socket.onmessage = (ev) => onFrame(JSON.parse(ev.data));
    socket.onclose = (ev) => {
      state.textContent = "reconnecting…";
      if (ev.code >= 4400 && ev.code < 4500) { state.textContent = "closed"; return; }
      setTimeout(connect, 1000);
    };
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (!text.value.trim() || !socket || socket.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify({ type: "say", text: text.value, id: nextId++ }));
  });
  connect();
})();
