"""The real-Slurm portal of slurm_portal_server.py with log-in from the test directory.

    MEDBAY_LDAP_URI=... (the exports of deploy/ldap/up) MEDBAY_BACKEND=slurm ... \\
    python tests/e2e/ldap_portal_server.py PORT

The only local account is `admin` (the password of portal_server.py): everyone
else, alice included, exists only in the directory until their first log-in.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.e2e.portal_server import follow_commands, serve  # noqa: E402
from tests.e2e.slurm_portal_server import COMMANDS, seed  # noqa: E402

LOCAL_USERS = {"admin": "admin"}


def main(port: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    seed(users=LOCAL_USERS)
    threading.Thread(target=follow_commands, args=(COMMANDS,), daemon=True).start()
    serve(port)


if __name__ == "__main__":
    main(int(sys.argv[1]))
