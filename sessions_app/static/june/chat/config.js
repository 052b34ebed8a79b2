// The chat page's settings, once for every module (the template's
// <script type="application/json" id="june-config">). One object: a reset's frame moves
// `generation` on for every module that reads it.
const node = document.getElementById("june-config");
export const config = node ? JSON.parse(node.textContent) : {};
