// A DOM small enough for node:test to load the chat's browser scripts (dom.js, markdown.js) in a
// vm context: elements, text nodes and fragments with the few members those scripts use.
import fs from "node:fs";
import path from "node:path";
import vm from "node:vm";
import { fileURLToPath } from "node:url";

class Node {
  constructor(nodeType) { this.nodeType = nodeType; this.childNodes = []; this.parentNode = null; }
  get lastChild() { return this.childNodes[this.childNodes.length - 1] || null; }
  get firstChild() { return this.childNodes[0] || null; }
  get children() { return this.childNodes.filter((n) => n.nodeType === 1); }
  appendChild(child) {
    if (child.nodeType === 11) { for (const c of [...child.childNodes]) this.appendChild(c); return child; }
    if (child.parentNode) child.remove();
    child.parentNode = this;
    this.childNodes.push(child);
    return child;
  }
  append(...nodes) { for (const n of nodes) this.appendChild(n); }
  remove() {
    if (!this.parentNode) return;
    const list = this.parentNode.childNodes;
    list.splice(list.indexOf(this), 1);
    this.parentNode = null;
  }
  replaceChildren(...nodes) { for (const c of [...this.childNodes]) c.remove(); this.append(...nodes); }
  get textContent() { return this.nodeType === 3 ? this.data : this.childNodes.map((c) => c.textContent).join(""); }
  set textContent(value) {
    if (this.nodeType === 3) { this.data = String(value); return; }
    this.replaceChildren();
    if (value !== "") this.appendChild(new Text(String(value)));
  }
}
class Text extends Node { constructor(data) { super(3); this.data = data; } }
class Fragment extends Node { constructor() { super(11); } }
class Element extends Node {
  constructor(tag) {
    super(1);
    this.tagName = tag.toUpperCase();
    this.className = "";
    this.dataset = {};
    this.attributes = {};
    this.classList = {
      add: (c) => { const s = new Set(this.className.split(" ").filter(Boolean)); s.add(c); this.className = [...s].join(" "); },
      remove: (c) => { this.className = this.className.split(" ").filter((x) => x && x !== c).join(" "); },
      contains: (c) => this.className.split(" ").includes(c),
    };
  }
  setAttribute(name, value) { this.attributes[name] = String(value); }
  getAttribute(name) { return name in this.attributes ? this.attributes[name] : null; }
  addEventListener() {}
  // a compact serialization for assertions: <tag.class data-x=y>…</tag>
  get outline() {
    const data = Object.entries(this.dataset).map(([k, v]) => ` data-${k}=${v}`).join("");
    const extra = ["href", "start"].filter((k) => this[k] !== undefined).map((k) => ` ${k}=${this[k]}`).join("");
    const cls = this.className ? "." + this.className.split(" ").join(".") : "";
    return `<${this.tagName.toLowerCase()}${cls}${extra}${data}>${this.childNodes.map(outline).join("")}</${this.tagName.toLowerCase()}>`;
  }
}
export function outline(node) {
  return node.nodeType === 3 ? node.data : node.nodeType === 11 ? node.childNodes.map(outline).join("") : node.outline;
}

export const document = {
  createElement: (tag) => new Element(tag),
  createTextNode: (text) => new Text(String(text)),
  createDocumentFragment: () => new Fragment(),
};

const STATIC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../sessions_app/static/june");

// the browser scripts `names` (in order) run in one context with this DOM; returns its window
export function load(...names) {
  const window = {};
  const context = vm.createContext({ window, document, navigator: {}, setTimeout, clearTimeout, Node: { TEXT_NODE: 3 } });
  for (const name of names) vm.runInContext(fs.readFileSync(path.join(STATIC, name), "utf8"), context, { filename: name });
  return window;
}
