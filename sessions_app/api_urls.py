"""HTTP API routes (owned by the HTTP API work)."""

urlpatterns: list = []
