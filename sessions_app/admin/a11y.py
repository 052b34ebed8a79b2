"""The stylesheet June's admin pages add to Django admin's (``Media = A11yMedia`` on a ModelAdmin):
accessibility repairs on the admin's own markup that axe-core found (static/june/admin.css); and
the script that shows every time in the reader's zone (static/june/time.js, an ES module)."""

from django.forms import Script

from sessions_app.times import TIME_JS


class A11yMedia:
    css = {"all": ("june/admin.css",)}
    js = (Script(TIME_JS, type="module"),)
