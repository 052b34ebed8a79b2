"""Notifications: parks to the users who may answer them, failures in
digests. ``outbox`` writes the rows, ``sender`` delivers them (email, Slack/Teams webhook)."""
