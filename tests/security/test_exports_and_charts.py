"""Names from Slurm (accounts, users) are data: not formulas in CSV, not links in charts."""

from __future__ import annotations

import csv
import io

import pytest

from tests.reports.conftest import RANGE, history, manager_client  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

LINK = '<a href="https://evil.example/">click</a>'
FORMULAS = ['=HYPERLINK("https://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]


def test_csv_cells_that_start_like_a_formula_are_neutralised(history, manager_client):  # noqa: F811
    history.node("gpu-01", [(0, "idle")])
    for slurm_id, account in enumerate(FORMULAS, start=1):
        history.job(slurm_id, 1, [(0, "RUNNING"), (6, "COMPLETED")], account=account)

    response = manager_client.get(
        "/api/v1/reports/utilization.csv", {**RANGE, "group_by": "account"}
    )

    assert response.status_code == 200
    groups = [row["group"] for row in csv.DictReader(io.StringIO(response.content.decode()))]
    assert set(FORMULAS) & set(groups) == set()
    assert {"'" + formula for formula in FORMULAS} <= set(groups)


def test_a_slurm_account_holding_a_link_is_plain_text_in_the_chart(history, manager_client):  # noqa: F811
    history.node("gpu-01", [(0, "idle")])
    history.job(1, 8, [(0, "RUNNING"), (6, "COMPLETED")], account=LINK)

    page = manager_client.get("/reports/utilization/", {**RANGE, "group_by": "account"})

    body = page.content.decode()
    assert page.status_code == 200
    assert "evil.example" in body
    assert LINK not in body
    assert "\\u003ca href" not in body and "\\u003ca href" not in body.lower()
