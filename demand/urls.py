from django.urls import path

from demand import views

urlpatterns = [
    path("capacity/", views.capacity, name="capacity"),
    path("capacity/what-if/<int:pk>/", views.what_if, name="capacity-what-if"),
    path("capacity/policies/", views.policy_list, name="demand-policies"),
    path("capacity/policies/new/", views.policy_edit, name="demand-policy-new"),
    path("capacity/policies/<int:pk>/", views.policy_edit, name="demand-policy-edit"),
]
