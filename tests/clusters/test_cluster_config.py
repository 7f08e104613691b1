"""Clusters as configuration the portal holds: the row, `manage.py cluster`, the page,
and each cluster's own backend and fleet (issue 32, first slice)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from clusters.backends import registry
from clusters.backends.kubernetes import KubernetesFleet
from clusters.backends.simulated import SimulatedCluster
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_rest import SlurmRestBackend
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.config import ClusterConfig, ClusterConfigError
from clusters.configure import add_cluster, edit_cluster
from clusters.models import Cluster, ClusterChange
from tests.conftest import PASSWORD

JWT_KEY = "/etc/medbay/jwt_hs256.key"
SECRET = "not-a-real-key-but-never-shown"


def cluster_command(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("cluster", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def clean_registry():
    registry.use(None)
    yield
    registry.use(None)


# -- the command ---------------------------------------------------------------------------


def test_add_stores_a_cli_cluster_with_spares_in_slurm_by_default(db):
    out, err = cluster_command(
        "add", "h100", "--transport", "cli", "--slurm-conf", "/etc/slurm-h100/slurm.conf"
    )
    cluster = Cluster.objects.get(name="h100")
    assert not cluster.from_environment and cluster.enabled
    assert cluster.config() == ClusterConfig(
        transport="cli", slurm_conf="/etc/slurm-h100/slurm.conf", fleet="slurm-spares"
    )
    assert cluster.backend == "slurm"
    assert "Added cluster h100: transport cli" in out
    assert "Warning: this host has no file /etc/slurm-h100/slurm.conf" in err


def test_add_stores_a_rest_cluster_on_kubernetes_with_its_secrets_as_paths(db, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(SECRET)
    cluster_command(
        "add", "a100", "--transport", "rest", "--slurmrestd-url", "http://head:6820",
        "--jwt-key-file", JWT_KEY, "--fleet", "kubernetes", "--kubeconfig", str(kubeconfig),
        "--kube-context", "lab", "--sync-interval", "5",
    )  # fmt: skip
    config = Cluster.objects.get(name="a100").config()
    assert (config.transport, config.slurmrestd_url, config.jwt_key_file) == (
        "rest", "http://head:6820", JWT_KEY,
    )  # fmt: skip
    assert (config.fleet, config.kubeconfig, config.kube_context) == (
        "kubernetes", str(kubeconfig), "lab",
    )  # fmt: skip
    assert config.sync_interval_s == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Bad"], "lower-case letters"),
        (["a100", "--transport", "rest", "--jwt-key-file", JWT_KEY], "slurmrestd needs its URL"),
        (
            ["a100", "--transport", "rest", "--slurmrestd-url", "http://head:6820"],
            "needs the path of the site's JWT key file",
        ),
        (
            [
                "a100",
                "--transport",
                "rest",
                "--slurmrestd-url",
                "http://h:6820",
                "--jwt-key-file",
                "c2VjcmV0LWtleQ==",
            ],
            "never as the key itself",
        ),  # fmt: skip
        (["a100", "--transport", "cli", "--slurm-conf", "slurm.conf"], "absolute path"),
        (["a100", "--transport", "cli", "--fleet", "simulated"], "simulated fleet goes with"),
        (["a100", "--fleet", "kubernetes"], "simulated fleet goes with"),
        (["a100", "--sync-interval", "0"], "between 0.5 and 3600 seconds"),
        (["a100", "--sync-interval", "nan"], "between 0.5 and 3600 seconds"),
    ],
)
def test_add_refuses_bad_input_with_a_sentence_and_stores_nothing(db, args, message):
    with pytest.raises(CommandError, match=message):
        cluster_command("add", *args)
    assert not Cluster.objects.exists() and not ClusterChange.objects.exists()


def test_add_refuses_a_name_that_is_taken(db):
    cluster_command("add", "a100")
    with pytest.raises(CommandError, match="already exists"):
        cluster_command("add", "a100")


def test_edit_and_disable_name_a_missing_cluster_and_those_that_exist(db):
    cluster_command("add", "a100")
    for args in (["edit", "nope", "--sync-interval", "3"], ["disable", "nope"]):
        with pytest.raises(CommandError, match=r"No cluster named 'nope' \(known: a100\)"):
            cluster_command(*args)


def test_edit_without_options_changes_nothing_and_says_so(db):
    cluster_command("add", "a100")
    with pytest.raises(CommandError, match="Nothing to change"):
        cluster_command("edit", "a100")
    assert ClusterChange.objects.count() == 1


def test_edit_changes_only_what_is_given_and_clears_what_the_new_transport_does_not_use(db):
    cluster_command(
        "add", "a100", "--transport", "rest", "--slurmrestd-url", "http://head:6820",
        "--jwt-key-file", JWT_KEY, "--slurm-conf", "/etc/slurm/slurm.conf",
    )  # fmt: skip
    cluster_command("edit", "a100", "--sync-interval", "10")
    assert Cluster.objects.get().config().jwt_key_file == JWT_KEY
    cluster_command("edit", "a100", "--transport", "cli")
    config = Cluster.objects.get().config()
    assert (config.transport, config.slurm_conf, config.sync_interval_s) == (
        "cli", "/etc/slurm/slurm.conf", 10,
    )  # fmt: skip
    assert (config.slurmrestd_url, config.jwt_key_file) == ("", "")


def test_each_change_writes_an_audit_row_with_before_after_and_who(db):
    cluster_command("add", "a100")
    cluster_command("edit", "a100", "--sync-interval", "7")
    cluster_command("disable", "a100")
    cluster_command("disable", "a100")  # already disabled: no change, no row
    changes = list(ClusterChange.objects.order_by("id"))
    assert len(changes) == 3
    assert changes[0].before == {} and changes[0].after["transport"] == "simulated"
    assert (changes[1].before["sync_interval_s"], changes[1].after["sync_interval_s"]) == (2, 7)
    assert (changes[2].before["enabled"], changes[2].after["enabled"]) == (True, False)
    assert all(change.changed_by.startswith("cluster command") for change in changes)


def test_disable_and_enable_say_whether_anything_changed(db):
    cluster_command("add", "a100")
    assert cluster_command("disable", "a100")[0] == "Disabled a100.\n"
    assert cluster_command("disable", "a100")[0] == "a100 was already disabled.\n"
    assert not Cluster.objects.get().enabled
    assert cluster_command("enable", "a100")[0] == "Enabled a100.\n"
    assert Cluster.objects.get().enabled


def test_list_shows_each_cluster_its_state_and_its_file_paths(db):
    cluster_command(
        "add", "a100", "--transport", "rest", "--slurmrestd-url", "http://head:6820",
        "--jwt-key-file", JWT_KEY,
    )  # fmt: skip
    cluster_command("add", "h100", "--transport", "cli")
    cluster_command("disable", "h100")
    lines = cluster_command("list")[0].splitlines()
    assert lines[0].startswith("a100  enabled  transport rest, slurmrestd http://head:6820, ")
    assert f"JWT key file {JWT_KEY}" in lines[0]
    assert lines[1].startswith("h100  disabled  transport cli, fleet slurm-spares")


# -- the environment's cluster ---------------------------------------------------------------


@override_settings(MEDBAY_BACKEND="slurm", MEDBAY_SLURM_API="cli", MEDBAY_FLEET="slurm-spares")
@override_settings(SLURM_CONF="/etc/slurm/slurm.conf", MEDBAY_SYNC_INTERVAL_S=4.0)
def test_the_environments_cluster_reads_its_configuration_from_the_environment(db):
    cluster = Cluster.objects.create(name="lab")  # as the sync's ensure_cluster makes it
    assert cluster.from_environment
    assert cluster.config() == ClusterConfig(
        transport="cli", slurm_conf="/etc/slurm/slurm.conf", fleet="slurm-spares",
        sync_interval_s=4.0,
    )  # fmt: skip
    assert "(from the environment)" in cluster_command("list")[0]


@override_settings(MEDBAY_BACKEND="slurm", MEDBAY_SLURM_API="cli", MEDBAY_FLEET="simulated")
def test_slurm_with_the_default_fleet_says_spares_in_slurm_as_the_registry_builds(db):
    cluster = Cluster.objects.create(name="lab")
    assert cluster.config().fleet == "slurm-spares"
    registry.use(None)
    try:
        assert isinstance(registry.fleet_for(cluster), SlurmSparesFleet)
    finally:
        registry.use(None)


@override_settings(MEDBAY_BACKEND="slurm", MEDBAY_SLURM_API="cli", MEDBAY_FLEET="slurm-spares")
@override_settings(SLURM_CONF="/etc/slurm/slurm.conf")
def test_editing_the_environments_cluster_moves_it_into_the_table(db):
    Cluster.objects.create(name="lab")
    out, _ = cluster_command("edit", "lab")
    assert "Cluster lab is now configured here: transport cli" in out
    cluster = Cluster.objects.get()
    assert not cluster.from_environment
    # What the environment said is kept, now in the row.
    assert (cluster.transport, cluster.slurm_conf, cluster.fleet) == (
        "cli", "/etc/slurm/slurm.conf", "slurm-spares",
    )  # fmt: skip
    with override_settings(SLURM_CONF="/elsewhere/slurm.conf"):
        assert cluster.config().slurm_conf == "/etc/slurm/slurm.conf"
    change = ClusterChange.objects.get()
    assert change.before["from_environment"] and not change.after["from_environment"]


# -- each cluster's backend and fleet --------------------------------------------------------


def test_the_environments_cluster_gets_the_process_backend_and_fleet(db, sim):
    cluster = Cluster.objects.create(name="lab")
    assert registry.backend_for(cluster) is sim is registry.get_backend()
    assert registry.fleet_for(cluster) is sim is registry.get_fleet()


def test_a_configured_cluster_gets_its_own_backend_built_from_its_row(db, clean_registry):
    h100 = add_cluster(
        "h100", ClusterConfig(transport="cli", slurm_conf="/etc/h100/slurm.conf",
                              fleet="slurm-spares"), by="test",
    )  # fmt: skip
    a100 = add_cluster(
        "a100",
        ClusterConfig(transport="rest", slurmrestd_url="http://a100-head:6820",
                      jwt_key_file=JWT_KEY, fleet="kubernetes", kube_context="a100"),
        by="test",
    )  # fmt: skip
    backend = registry.backend_for(h100)
    assert type(backend) is SlurmBackend and backend.slurm_conf == "/etc/h100/slurm.conf"
    fleet = registry.fleet_for(h100)
    assert isinstance(fleet, SlurmSparesFleet) and fleet.backend is backend
    rest = registry.backend_for(a100)
    assert type(rest) is SlurmRestBackend and rest.url == "http://a100-head:6820"
    assert rest.auth.key_path == JWT_KEY
    assert isinstance(registry.fleet_for(a100), KubernetesFleet)
    assert registry.backend_for(Cluster.objects.get(name="h100")) is backend  # cached


def test_a_configured_rest_cluster_reads_and_acts_as_the_sites_slurm_accounts(
    db, clean_registry, monkeypatch
):
    monkeypatch.setenv("MEDBAY_SLURM_JWT_USER", "medbay")
    monkeypatch.setenv("MEDBAY_SLURM_JWT_OPERATOR", "slurmops")
    a100 = add_cluster(
        "a100",
        ClusterConfig(transport="rest", slurmrestd_url="http://a100-head:6820",
                      jwt_key_file=JWT_KEY, fleet="slurm-spares"),
        by="test",
    )  # fmt: skip
    rest = registry.backend_for(a100)
    assert (rest.reader, rest.operator) == ("medbay", "slurmops")


def test_two_simulated_clusters_are_two_simulators_each_its_own_fleet(db, sim):
    one = add_cluster("one", ClusterConfig(), by="test")
    two = add_cluster("two", ClusterConfig(), by="test")
    first, second = registry.backend_for(one), registry.backend_for(two)
    assert isinstance(first, SimulatedCluster) and isinstance(second, SimulatedCluster)
    assert len({id(first), id(second), id(sim)}) == 3
    assert registry.fleet_for(one) is first and registry.fleet_for(two) is second
    assert registry.get_backend() is sim  # the environment's cluster is left alone


def test_a_cluster_whose_connection_changes_gets_a_new_backend_and_others_keep_theirs(
    db, clean_registry
):
    add_cluster("h100", ClusterConfig(transport="cli", fleet="slurm-spares"), by="test")
    before = registry.backend_for(Cluster.objects.get(name="h100"))
    edit_cluster("h100", by="test", sync_interval_s=3)
    assert registry.backend_for(Cluster.objects.get(name="h100")) is before
    edit_cluster("h100", by="test", slurm_conf="/etc/other/slurm.conf")
    after = registry.backend_for(Cluster.objects.get(name="h100"))
    assert after is not before and after.slurm_conf == "/etc/other/slurm.conf"


def test_use_forgets_the_configured_clusters_backends(db, clean_registry):
    cluster = add_cluster("one", ClusterConfig(), by="test")
    before = registry.backend_for(cluster)
    registry.use(None)
    assert registry.backend_for(cluster) is not before


def test_validation_names_every_field_that_is_wrong_at_once():
    with pytest.raises(ClusterConfigError) as refused:
        ClusterConfig(transport="rest", sync_interval_s=-1).validate()
    assert set(refused.value.errors) == {
        "slurmrestd_url",
        "jwt_key_file",
        "fleet",
        "sync_interval_s",
    }


# -- the page --------------------------------------------------------------------------------


def test_the_clusters_page_lists_each_cluster_with_paths_and_never_a_secret(
    client, admin_user, tmp_path
):
    key = tmp_path / "jwt.key"
    key.write_text(SECRET)
    add_cluster(
        "a100",
        ClusterConfig(transport="rest", slurmrestd_url="http://a100-head:6820",
                      jwt_key_file=str(key), fleet="slurm-spares"),
        by="test",
    )  # fmt: skip
    Cluster.objects.create(name="lab", enabled=False)
    client.login(username="admin", password=PASSWORD)
    page = client.get("/clusters/").content.decode()
    assert 'id="clusters"' in page
    assert "http://a100-head:6820" in page and str(key) in page
    assert SECRET not in page
    assert "from the environment" in page and "disabled" in page


def test_the_clusters_page_is_for_admins_only(client, researcher, manager):
    for name in ("alice", "manager"):
        client.login(username=name, password=PASSWORD)
        assert client.get("/clusters/").status_code == 403


def test_an_admin_adds_a_cluster_on_the_page(client, admin_user):
    client.login(username="admin", password=PASSWORD)
    response = client.post(
        "/clusters/new/",
        {
            "name": "a100", "transport": "rest", "slurmrestd_url": "http://a100-head:6820",
            "jwt_key_file": JWT_KEY, "fleet": "slurm-spares", "sync_interval_s": "5",
            "enabled": "on",
        },
    )  # fmt: skip
    assert response.status_code == 302 and response["Location"] == "/clusters/"
    cluster = Cluster.objects.get(name="a100")
    assert (cluster.transport, cluster.jwt_key_file, cluster.sync_interval_s) == (
        "rest", JWT_KEY, 5,
    )  # fmt: skip
    assert ClusterChange.objects.get().changed_by == "admin"


def test_the_page_refuses_bad_input_next_to_each_field_and_stores_nothing(client, admin_user):
    client.login(username="admin", password=PASSWORD)
    response = client.post(
        "/clusters/new/",
        {"name": "A100", "transport": "rest", "fleet": "simulated", "sync_interval_s": "1e309"},
    )
    assert response.status_code == 400 and not Cluster.objects.exists()
    response = client.post(
        "/clusters/new/",
        {"name": "a100", "transport": "rest", "jwt_key_file": "c2VjcmV0", "fleet": "slurm-spares",
         "sync_interval_s": "2"},
    )  # fmt: skip
    page = response.content.decode()
    assert response.status_code == 400 and not Cluster.objects.exists()
    assert "slurmrestd needs its URL" in page and "never as the key itself" in page


def test_editing_the_environments_cluster_on_the_page_moves_it_into_the_table(client, admin_user):
    Cluster.objects.create(name="lab")
    client.login(username="admin", password=PASSWORD)
    page = client.get("/clusters/lab/edit/").content.decode()
    assert 'id="from-environment"' in page
    response = client.post(
        "/clusters/lab/edit/",
        {"transport": "simulated", "fleet": "simulated", "sync_interval_s": "3"},
    )
    assert response.status_code == 302
    cluster = Cluster.objects.get()
    assert not cluster.from_environment and not cluster.enabled  # the box was left unticked
    assert cluster.sync_interval_s == 3
    history = client.get("/clusters/lab/edit/").content.decode()
    assert "from_environment True → False" in history


def test_editing_a_missing_cluster_is_a_404(client, admin_user):
    client.login(username="admin", password=PASSWORD)
    assert client.get("/clusters/nope/edit/").status_code == 404
