// /api/docs/: Swagger UI (vendored by drf-spectacular-sidecar, served by whitenoise: no CDN)
// on /api/openapi.json. "Try it out" works with the site's login: unsafe requests carry the
// CSRF token from the csrftoken cookie, as the chat page's do; or paste a bearer token under
// "Authorize".
(function () {
  "use strict";
  function csrfToken() {
    var m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.spec,
    dom_id: "#swagger-ui",
    deepLinking: true,
    requestInterceptor: function (req) {
      if (req.method && !/^(GET|HEAD|OPTIONS)$/i.test(req.method) && csrfToken()) {
        req.headers["X-CSRFToken"] = csrfToken();
      }
      return req;
    },
  });
})();
