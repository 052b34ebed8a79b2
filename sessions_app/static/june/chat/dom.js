// The chat's small DOM helpers: every piece of text goes into the page through textContent,
// never as HTML (the one exception is markdown.js's sanitized Markdown).

// an element with a class and its text (as text, never HTML)
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// a value as JSON for showing (a value JSON cannot hold shows as its string)
export function json(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

// Django's CSRF token, for the page's own POSTs
export function csrf() {
  const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

export const $ = (id) => document.getElementById(id);

// a log scrolled to (near) its end
export const nearEnd = (log, slack = 80) => log.scrollHeight - log.scrollTop - log.clientHeight < slack;
