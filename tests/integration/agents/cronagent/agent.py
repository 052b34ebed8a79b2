"""A test agent with schedules for tests/integration/test_schedules.py (runs on the demo model)."""

model = "demo"

schedules = [
    # forced due by the test: the real django-q2 scheduler of two clusters fires it
    {
        "name": "minutely",
        "cron": "* * * * *",
        "timezone": "UTC",
        "seed": "summary of the minute",
        "session": "cron-inbox",
    },
    # next_run forced 10 minutes into the past: downtime
    {
        "name": "missed",
        "cron": "* * * * *",
        "timezone": "UTC",
        "seed": "summary after downtime",
        "session": "cron-missed",
    },
    # enqueued twice by hand with one intended time: what two schedulers on SQLite can do
    {"name": "racing", "cron": "0 0 1 1 *", "timezone": "UTC", "seed": "summary of the year", "session": "cron-race"},
]
