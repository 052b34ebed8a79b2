"""The stylesheet June's admin pages add to Django admin's (``Media = A11yMedia`` on a ModelAdmin):
accessibility repairs on the admin's own markup that axe-core found (static/june/admin.css); and
the script that shows every time in the reader's zone (static/june/time.js)."""

from sessions_app.times import TIME_JS


class A11yMedia:
    css = {"all": ("june/admin.css",)}
    js = (TIME_JS,)
