"""The scripted model for tests (re-exported from the engine's fakes)."""

from agents_app.runtime.fakes import ScriptedModel, reply

__all__ = ["ScriptedModel", "reply"]
