"""Report pages' time from navigation to network idle, in Debian's Chromium, against a
running portal (`make demo`):

    python bench/report_load.py URL USER PASSWORD [--rounds 3]

Logs in once, then opens every report tab: first in a fresh browser context, whose
cache is empty ("cold": what a manager's first report of the day costs), then again
in the same context ("warm": every later report). Prints per tab the median
milliseconds of each, the bytes of script the cold load fetched, and overall
the median and maximum over tabs of each (cold and warm, to the load event and to
network idle) as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _setup import django_setup

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def report_names() -> list[str]:
    django_setup()
    from reports.catalog import REPORTS

    return list(REPORTS)


def timed_open(page, url: str) -> tuple[float, float]:
    """Milliseconds to the load event and to network idle (Playwright's: no request for
    500 ms, so never under half a second)."""
    started = time.perf_counter()
    page.goto(url)  # returns at the load event
    loaded = time.perf_counter()
    page.wait_for_load_state("networkidle")
    return (loaded - started) * 1000, (time.perf_counter() - started) * 1000


def log_in(page, url: str, user: str, password: str) -> None:
    page.goto(f"{url}/login/")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state("networkidle")


def measure(url: str, user: str, password: str, rounds: int) -> dict:
    from playwright.sync_api import sync_playwright

    names = report_names()
    cold: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    warm: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    script_bytes: dict[str, int] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for _ in range(rounds):
            for name in names:
                context = browser.new_context()
                page = context.new_page()
                log_in(page, url, user, password)
                fetched = []
                page.on("response", lambda response, fetched=fetched: fetched.append(response))
                cold[name].append(timed_open(page, f"{url}/reports/{name}/"))
                script_bytes[name] = sum(
                    int(response.headers.get("content-length") or 0)
                    for response in fetched
                    if response.request.resource_type == "script"
                )
                warm[name].append(timed_open(page, f"{url}/reports/{name}/"))
                context.close()
        browser.close()
    per_tab = {name: {"script_bytes_cold": script_bytes[name]} for name in names}
    summary: dict = {"tabs": per_tab}
    for kind, times in (("cold", cold), ("warm", warm)):
        for which, label in ((0, "load"), (1, "idle")):
            medians = {
                name: round(statistics.median(t[which] for t in times[name])) for name in names
            }
            for name in names:
                per_tab[name][f"{kind}_{label}_ms"] = medians[name]
            summary[f"{kind}_{label}_ms_p50"] = round(statistics.median(medians.values()))
            summary[f"{kind}_{label}_ms_max"] = max(medians.values())
    return summary


def median_ms(samples: list[tuple[float, float]], which: int) -> int:
    return round(statistics.median(sample[which] for sample in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("user")
    parser.add_argument("password")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    print(json.dumps(measure(options.url.rstrip("/"), options.user, options.password,
                             options.rounds), indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
