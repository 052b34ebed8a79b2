// /api/docs/: Swagger UI (vendored by drf-spectacular-sidecar, served by whitenoise: no CDN)
// on /api/openapi.json. "Try it out" works with the site's login: unsafe requests carry the
// CSRF token from the csrftoken cookie, as the chat page's do; or paste a bearer token under
// "Authorize".
(() => {
  "use strict";
  function csrfToken() {
    var m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.spec,
    dom_id: "#swagger-ui",
    // no deep links: Swagger UI puts them as <a> inside each operation's <button> (a link in a
    // button is one control inside another: axe's nested-interactive, and confusing to a keyboard)
    deepLinking: false,
    requestInterceptor: (req) => {
      if (req.method && !/^(GET|HEAD|OPTIONS)$/i.test(req.method) && csrfToken()) {
        req.headers["X-CSRFToken"] = csrfToken();
      }
      return req;
    },
  });
  // what Swagger UI leaves unnamed or out of the tab order (axe: select-name,
  // scrollable-region-focusable): the servers and enum <select>s get a name (the parameter's),
  // a scrolling example <pre> a tab stop, on every render
  function mend() {
    root.querySelectorAll("select:not([aria-label])").forEach((select) => {
      var row = select.closest("tr[data-param-name]");
      select.setAttribute("aria-label", select.id === "servers" ? "Server" : row ? row.dataset.paramName : "Choice");
    });
    root.querySelectorAll("pre.microlight:not([tabindex])").forEach((pre) => {
      pre.setAttribute("tabindex", "0");
    });
  }
  new MutationObserver(mend).observe(root, { childList: true, subtree: true });
})();
