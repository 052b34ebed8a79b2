"""The stylesheet June's admin pages add to Django admin's (``Media = A11yMedia`` on a ModelAdmin):
accessibility repairs on the admin's own markup that axe-core found (static/june/admin.css)."""


class A11yMedia:
    css = {"all": ("june/admin.css",)}
