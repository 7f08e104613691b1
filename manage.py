#!/usr/bin/env python
import os
import sys

# `demo` is a development server on a simulated cluster, so it runs with DEBUG on
# (as `make demo` does) unless DEBUG is set. Only `demo`: every other command,
# the production server's among them, still refuses to start without SECRET_KEY.
DEVELOPMENT_COMMANDS = ("demo",)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    if sys.argv[1:2] and sys.argv[1] in DEVELOPMENT_COMMANDS:
        os.environ.setdefault("DEBUG", "true")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
