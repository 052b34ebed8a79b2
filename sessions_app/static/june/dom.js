// The chat's small DOM helpers, once (markdown.js, attachments.js, chat.js and children.js use
// them): every piece of text goes into the page through textContent, never as HTML.
"use strict";

window.JuneDom = Object.freeze({
  // an element with a class and its text (as text, never HTML)
  el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  },
  // a value as JSON for showing (a value JSON cannot hold shows as its string)
  json(value) {
    try { return JSON.stringify(value); } catch (e) { return String(value); }
  },
  // Django's CSRF token, for the page's own POSTs
  csrf() {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  },
});
