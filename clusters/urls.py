from django.urls import path

from clusters import views

urlpatterns = [
    path("", views.board, name="board"),
    path("board/fleet.json", views.fleet_data, name="fleet-data"),
    path("nodes/<str:name>/", views.node_detail, name="node-detail"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/new/", views.cluster_new, name="cluster-new"),
    path("clusters/<str:cluster>/edit/", views.cluster_edit, name="cluster-edit"),
    path("healthz", views.healthz, name="healthz"),
]
