from tests.ldap_integration.directory import directory  # noqa: F401
