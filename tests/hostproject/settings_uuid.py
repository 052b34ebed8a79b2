"""The host project with a user model keyed by a UUID (``uuid_accounts.Member``) instead of a
big integer: everything else as ``settings``."""

from hostproject import settings as base
from hostproject.settings import *  # noqa: F403

INSTALLED_APPS = ["hostproject.uuid_accounts" if app == "hostproject.accounts" else app for app in base.INSTALLED_APPS]
AUTH_USER_MODEL = "uuid_accounts.Member"
