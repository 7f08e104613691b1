from remediation import services
from remediation.models import Mode, Remediation, RemediationStep, StepOutcome, Trigger
from remediation.transitions import RunStatus

RUNS = "/api/v1/remediations/"
DRAIN = {"node": "gpu-04", "action": "drain", "reason": "fan noise"}


def approval_run(node, requested_by=None):
    return services.create_run(
        node,
        "reboot",
        trigger=Trigger.POLICY,
        reason="XID 79 GPU 3 fallen off the bus",
        requested_by=requested_by,
        mode=Mode.APPROVAL,
    )


def test_anonymous_calls_get_a_401(db, api):
    from rest_framework.test import APIClient

    assert APIClient().get(RUNS).status_code == 401
    assert APIClient().post(RUNS, DRAIN, format="json").status_code == 401


def test_researchers_and_managers_may_read_runs_but_not_request_them(
    researcher, manager, api, synced
):
    for user in (researcher, manager):
        assert api(user).get(RUNS).status_code == 200
        response = api(user).post(RUNS, DRAIN, format="json")
        assert response.status_code == 403
        assert set(response.json()) == {"detail", "errors"}
    assert not Remediation.objects.exists()


def test_an_admin_requests_a_drain_and_gets_the_running_run_with_its_plan(admin_user, api, synced):
    response = api(admin_user).post(RUNS, {**DRAIN, "grace_s": 30}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["node"] == "gpu-04" and body["action"] == "drain"
    assert body["status"] == "running" and body["trigger"] == "admin"
    assert body["requested_by"] == "admin" and body["planned_steps"] == ["drain", "wait_drained"]
    assert body["steps"] == []
    run = Remediation.objects.get(pk=body["id"])
    assert run.context["grace_s"] == 30 and run.node.active_remediation == "drain"


def test_a_second_request_on_a_busy_node_is_a_409_naming_the_active_run(admin_user, api, synced):
    first = api(admin_user).post(RUNS, DRAIN, format="json").json()
    again = {"node": "gpu-04", "action": "reboot", "reason": "try again"}
    response = api(admin_user).post(RUNS, again, format="json")
    assert response.status_code == 409
    assert f"run {first['id']}" in response.json()["detail"]
    assert Remediation.objects.count() == 1


def test_bad_input_gets_field_errors_and_creates_nothing(admin_user, api, synced):
    client = api(admin_user)
    cases = [
        ({"node": "gpu-99", "action": "drain", "reason": "x"}, "node"),
        ({"node": "gpu-04", "action": "explode", "reason": "x"}, "action"),
        ({"node": "gpu-04", "action": "reset_gpu", "reason": "x"}, "action"),
        ({"node": "gpu-04", "action": "drain"}, "reason"),
        ({"node": "gpu-04", "action": "drain", "reason": "   "}, "reason"),
        ({"node": "gpu-04", "action": "drain", "reason": "x", "grace_s": -1}, "grace_s"),
        ({"node": "gpu-04", "action": "drain", "reason": "x", "grace_s": "soon"}, "grace_s"),
        ({"node": "gpu-04", "action": "drain", "reason": "x" * 201}, "reason"),
    ]
    for body, field in cases:
        response = client.post(RUNS, body, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["errors"], body
    assert client.post(RUNS, "not json", content_type="application/json").status_code == 400
    assert not Remediation.objects.exists()


def test_an_action_that_does_not_fit_the_node_is_refused_with_the_reason(admin_user, api, synced):
    response = api(admin_user).post(
        RUNS, {"node": "gpu-05", "action": "to_inference", "reason": "more serving"}, format="json"
    )
    assert response.status_code == 400
    assert "Only training nodes" in response.json()["errors"]["action"][0]
    spare = api(admin_user).post(
        RUNS, {"node": "gpu-06", "action": "replace", "reason": "x"}, format="json"
    )
    assert spare.status_code == 400


def test_the_requester_cannot_approve_their_own_run(admin_user, api, node):
    run = approval_run(node("gpu-02"), requested_by=admin_user)
    response = api(admin_user).post(f"{RUNS}{run.pk}/approve/", {}, format="json")
    assert response.status_code == 403
    assert "another admin must approve" in response.json()["detail"]
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL and run.decided_at is None


def test_another_admin_approves_and_the_decision_is_recorded(admin_user, second_admin, api, node):
    run = approval_run(node("gpu-02"), requested_by=admin_user)
    response = api(second_admin).post(
        f"{RUNS}{run.pk}/approve/", {"comment": "spare is ready"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "running"
    run.refresh_from_db()
    assert run.approved_by == second_admin and run.decision_comment == "spare is ready"
    assert run.decided_at is not None
    change = run.status_changes.get(to_status=RunStatus.RUNNING)
    assert change.from_status == RunStatus.AWAITING_APPROVAL
    assert change.actor == "admin2" and "spare is ready" in change.message


def test_a_rejection_needs_a_comment_and_ends_the_run(admin_user, second_admin, api, node):
    run = approval_run(node("gpu-02"))
    client = api(second_admin)
    empty = client.post(f"{RUNS}{run.pk}/reject/", {"comment": ""}, format="json")
    assert empty.status_code == 400 and "comment" in empty.json()["errors"]
    response = client.post(f"{RUNS}{run.pk}/reject/", {"comment": "not now"}, format="json")
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == RunStatus.REJECTED and run.finished_at is not None
    assert run.approved_by == second_admin and run.decision_comment == "not now"
    assert run.node.active_remediation == ""


def test_deciding_a_run_twice_is_a_409(admin_user, second_admin, api, node):
    run = approval_run(node("gpu-02"))
    assert api(admin_user).post(f"{RUNS}{run.pk}/approve/", {}, format="json").status_code == 200
    late = api(second_admin).post(f"{RUNS}{run.pk}/reject/", {"comment": "no"}, format="json")
    assert late.status_code == 409
    assert "not awaiting approval" in late.json()["detail"]
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.approved_by == admin_user


def test_researchers_cannot_approve_and_unknown_runs_are_404(researcher, admin_user, api, node):
    run = approval_run(node("gpu-02"))
    assert api(researcher).post(f"{RUNS}{run.pk}/approve/", {}).status_code == 403
    assert api(admin_user).post(f"{RUNS}999999/approve/", {}).status_code == 404
    assert api(admin_user).get(f"{RUNS}999999/").status_code == 404


def test_a_run_shows_its_recorded_steps_in_order(researcher, admin_user, api, synced):
    run_id = api(admin_user).post(RUNS, DRAIN, format="json").json()["id"]
    for outcome in (StepOutcome.STARTED, StepOutcome.SUCCEEDED):
        RemediationStep.objects.create(
            remediation_id=run_id, index=0, name="drain", outcome=outcome, message=outcome
        )
    body = api(researcher).get(f"{RUNS}{run_id}/").json()
    assert [(s["name"], s["outcome"]) for s in body["steps"]] == [
        ("drain", "started"),
        ("drain", "succeeded"),
    ]


def test_the_list_filters_by_status_action_and_node(admin_user, api, node):
    approval_run(node("gpu-02"))
    client = api(admin_user)
    client.post(RUNS, DRAIN, format="json")

    def names(query: str) -> list[str]:
        return [run["node"] for run in client.get(f"{RUNS}?{query}").json()["results"]]

    assert names("status=awaiting_approval") == ["gpu-02"]
    assert names("action=drain") == ["gpu-04"]
    assert names("node=gpu-02") == ["gpu-02"]
    assert sorted(names("status=active")) == ["gpu-02", "gpu-04"]
    assert names("status=succeeded") == []
    bogus = client.get(f"{RUNS}?status=bogus")
    assert bogus.status_code == 400 and "status" in bogus.json()["errors"]


def test_an_admin_cancels_a_run_through_the_api_with_a_reason(admin_user, api, synced):
    client = api(admin_user)
    run_id = client.post(RUNS, DRAIN, format="json").json()["id"]
    assert client.post(f"{RUNS}{run_id}/cancel/", {}, format="json").status_code == 400
    response = client.post(f"{RUNS}{run_id}/cancel/", {"comment": "wrong node"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = client.post(f"{RUNS}{run_id}/cancel/", {"comment": "again"}, format="json")
    assert again.status_code == 409
