"""The PostgreSQL test server's availability rule (no server started): a missing binary skips, naming the package,
unless HARNESSRL_REQUIRE_POSTGRES=1 makes it a failure; a present one is used."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.services import REQUIRE_POSTGRES_ENV, require_postgres_bin


def test_a_missing_server_binary_skips_naming_the_package_and_the_switch() -> None:
    with pytest.raises(pytest.skip.Exception, match=f"Debian package postgresql.*{REQUIRE_POSTGRES_ENV}=1"):
        require_postgres_bin(None, {})


def test_a_missing_server_binary_fails_when_postgres_is_required() -> None:
    with pytest.raises(pytest.fail.Exception, match=f"postgresql \\({REQUIRE_POSTGRES_ENV}=1\\)"):
        require_postgres_bin(None, {REQUIRE_POSTGRES_ENV: "1"})


def test_an_installed_server_binary_is_used_whatever_the_switch() -> None:
    found = Path("/usr/lib/postgresql/15/bin")
    assert require_postgres_bin(found, {REQUIRE_POSTGRES_ENV: "1"}) == found
    assert require_postgres_bin(found, {}) == found
