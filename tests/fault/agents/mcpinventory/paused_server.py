"""The demo inventory server (its file in ``<JUNE_FAULT_DIR>/inventory.sqlite3``) with a pause:
``reserve`` reserves, logs this process's pid to ``inventory-pids`` and then waits while
``arm-inventory:after`` exists (writing ``at-inventory:after``), so the test can kill the worker
after the server did the work and before June recorded the answer."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the checkout: agents_app

from agents_app.agents.ops import inventory_server as inventory  # noqa: E402

ROOT = Path(os.environ["JUNE_FAULT_DIR"])
_reserve = inventory.reserve_once


def reserve_then_pause(db, item: str, quantity: int, key: str) -> dict:
    answer = _reserve(db, item, quantity, key)
    with (ROOT / "inventory-pids").open("a") as f:
        f.write(f"{os.getpid()}\n")
    arm = ROOT / "arm-inventory:after"
    if arm.exists():
        (ROOT / "at-inventory:after").write_text(str(os.getpid()))
        while arm.exists():
            time.sleep(0.02)
    return answer


inventory.reserve_once = reserve_then_pause

if __name__ == "__main__":
    inventory.main([str(ROOT / "inventory.sqlite3")])
