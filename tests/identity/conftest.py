from tests.identity.directory import directory  # noqa: F401
