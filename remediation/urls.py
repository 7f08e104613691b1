from django.urls import path

from remediation import group_views, views

urlpatterns = [
    path("remediation/", views.run_list, name="remediation-list"),
    path("remediation/approvals/", views.approvals, name="remediation-approvals"),
    path(
        "remediation/incidents/<int:pk>/decide-again/",
        views.decide_incident_again,
        name="remediation-decide-again",
    ),
    path("faults/group/", group_views.group_by_hand, name="fault-group-by-hand"),
    path("faults/<int:pk>/", group_views.fault_group, name="fault-group"),
    path("faults/<int:pk>/split/", group_views.split_group, name="fault-group-split"),
    path(
        "faults/<int:pk>/decide/<str:decision>/",
        group_views.decide_part,
        name="fault-group-decide",
    ),
    path("remediation/policies/", views.policy_list, name="remediation-policies"),
    path("remediation/policies/new/", views.policy_edit, name="remediation-policy-new"),
    path("remediation/policies/<int:pk>/", views.policy_edit, name="remediation-policy-edit"),
    path("remediation/replay/", views.replay, name="remediation-replay"),
    path("remediation/<int:pk>/", views.run_detail, name="remediation-detail"),
    path("remediation/<int:pk>/<str:verdict>/", views.decide, name="remediation-decide"),
    path(
        "nodes/<str:cluster>/<str:name>/actions/<str:action>/",
        views.node_action,
        name="cluster-node-action",
    ),
    path("nodes/<str:cluster>/<str:name>/repair/", views.node_repair, name="cluster-node-repair"),
    # Before clusters had addresses: by name alone, where that is one node's.
    path("nodes/<str:name>/actions/<str:action>/", views.node_action, name="node-action"),
    path("nodes/<str:name>/repair/", views.node_repair, name="node-repair"),
    path("partitions/edits/", views.partition_edits, name="partition-edits"),
]
