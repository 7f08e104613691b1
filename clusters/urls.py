from django.urls import path

from clusters import views

urlpatterns = [
    path("", views.board, name="board"),
    path("board/fleet.json", views.fleet_data, name="fleet-data"),
    path("nodes/<str:cluster>/<str:name>/", views.node_detail, name="cluster-node"),
    # Before clusters had addresses: leads to the one above, or asks which cluster.
    path("nodes/<str:name>/", views.node_by_name, name="node-detail"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/new/", views.cluster_new, name="cluster-new"),
    path("clusters/<str:cluster>/edit/", views.cluster_edit, name="cluster-edit"),
    path("healthz", views.healthz, name="healthz"),
]
