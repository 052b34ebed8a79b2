"""Fault-test agent whose webhook turns batch (``batch = True``): its model is Anthropic's API,
reached at the local Batches peer (``ANTHROPIC_BASE_URL``, tests/provider/fake_batches_api.py)."""

model = "anthropic:claude-sonnet-4-6"
batch = True
listed = False
