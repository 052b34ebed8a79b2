"""June for Django: LLM agent turns as durable processes, as Django apps a project installs.

The public surface a project uses (docs/install.md): ``june.settings`` (``q_cluster``,
``channel_layers``, every ``JUNE_*`` setting's default), ``june.urls`` (mount under any prefix)
and ``june.asgi`` (the websockets in the project's router). The apps are ``agents_app`` (what a
turn is) and ``sessions_app`` (where it lives: models, workers, API, chat, admin)."""

__version__ = "0.3.0"
