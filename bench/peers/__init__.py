"""The peers' sides of bench/bench_peers.py: each runs in a venv of its own that the bench makes
under var/peers/ (never in the project's)."""
