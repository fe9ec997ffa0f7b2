"""docs/screenshots.py, the parts that need no demo: who is pictured, where the pictures go and
how the guides use them, the demo it seeds, and how it waits and fails.

A whole run seeds and serves a demo (a minute or more): `make screenshots`, not the suite. The
browser parts (sign-in, the watch for errors) are in tests/browser/test_screenshots.py.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from docs import screenshots
from docs.screenshots import (
    CATALOG_FORM,
    PERSONAS,
    SEED_COMMANDS,
    ScreenshotError,
    demo_env,
    fleet_read,
    heavy_images,
    image_names,
    wait_until,
)
from fleet.models import SyncState
from portal.management.commands import seed_demo
from tenants.models import PlatformRole, Tenant

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ("tenant-guide.md", "operator-guide.md")


def test_each_persona_has_in_the_seeded_demo_the_role_their_picture_shows() -> None:
    platform_roles = {username: role for username, _, role in seed_demo.USERS}
    tenant_roles = {slug: members for slug, _, _, _, members in seed_demo.TENANTS}
    for persona in PERSONAS:
        if persona.tenant:
            assert tenant_roles[persona.tenant].get(persona.username) == persona.role, persona
        else:
            assert platform_roles[persona.username] == persona.role, persona
    assert screenshots.DEMO_PASSWORD == seed_demo.DEMO_PASSWORD


def test_the_personas_cover_every_kind_of_landing() -> None:
    roles = {persona.role for persona in PERSONAS}
    assert set(PlatformRole.Name.values) <= roles
    assert {"admin", "member", "viewer"} <= roles
    trust = {slug: level for slug, _, level, _, _ in seed_demo.TENANTS}
    assert Tenant.TrustLevel.DEDICATED in {trust[p.tenant] for p in PERSONAS if p.tenant}
    assert len({p.username for p in PERSONAS}) == len(PERSONAS)


def test_the_catalog_form_is_asked_for_by_someone_who_may() -> None:
    members = {slug: members for slug, _, _, _, members in seed_demo.TENANTS}
    assert members[CATALOG_FORM.tenant][CATALOG_FORM.username] in ("admin", "member")


def test_image_names_are_stable_distinct_png_files() -> None:
    names = image_names()
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*\.png", name), name
    assert names == image_names()


def test_every_picture_is_in_a_guide_and_every_picture_a_guide_shows_exists() -> None:
    shown = set()
    for guide in GUIDES:
        text = (ROOT / "docs" / guide).read_text()
        shown |= set(re.findall(r"\]\(img/([^)]+\.png)\)", text))
        assert "make screenshots" in text, guide
    assert shown == set(image_names())
    for name in shown:
        assert (ROOT / "docs" / "img" / name).is_file(), name


def test_the_seed_commands_are_those_of_make_demo() -> None:
    makefile = (ROOT / "Makefile").read_text()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    commands = [
        tuple(line.split()[1:])
        for line in demo.splitlines()
        if line.startswith("\t$(MANAGE) ") and " serve " not in line
    ]
    assert commands == list(SEED_COMMANDS)
    assert "\t$(MANAGE) serve --demo-jobs $(ADDR)" in demo


def test_the_demo_keeps_everything_in_its_own_folder(tmp_path: Path) -> None:
    outside = {
        "PATH": "/usr/bin",
        "DATABASE_URL": "postgres://portal@db/portal",
        "CELERY_BROKER_URL": "redis://cache:6379/0",
        "CACHE_URL": "redis://cache:6379/1",
        "GITOPS_REPO_PATH": "/srv/fleet.git",
        "FLEET_SIMULATOR_ADDR": "127.0.0.1:8001",
        "PORTAL_VAR_DIR": "/srv/var",
    }
    env = demo_env(tmp_path, 40001, outside)
    assert env["PATH"] == "/usr/bin"
    assert env["DEBUG"] == "true"
    assert env["PORTAL_VAR_DIR"] == str(tmp_path)
    assert env["DATABASE_URL"] == f"sqlite:///{tmp_path}/portal.sqlite3"
    assert env["FLEET_SIMULATOR_ADDR"] == "127.0.0.1:40001"
    for name in ("CELERY_BROKER_URL", "CACHE_URL", "GITOPS_REPO_PATH"):
        assert name not in env


def test_the_fleet_counts_as_read_once_every_part_was(tmp_path: Path) -> None:
    # The script reads the demo's SQLite file without Django: the table and the names it
    # expects are the model's.
    assert SyncState._meta.db_table == "fleet_syncstate"
    assert set(screenshots.FLEET_SOURCES) <= set(SyncState.Source.values)
    database = tmp_path / "portal.sqlite3"
    assert not fleet_read(database)
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE fleet_syncstate (source TEXT, last_success TEXT)")
        db.executemany(
            "INSERT INTO fleet_syncstate VALUES (?, ?)",
            [("nodes", "2026-12-01 10:00"), ("pods", "2026-12-01 10:00"), ("kueue", None)],
        )
    assert not fleet_read(database)
    with sqlite3.connect(database) as db:
        db.execute("UPDATE fleet_syncstate SET last_success = '2026-12-01 10:00'")
        db.execute("INSERT INTO fleet_syncstate VALUES ('flux', '2026-12-01 10:00')")
    assert fleet_read(database)


def test_waiting_stops_as_soon_as_the_server_exits(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text("Error: That port is already in use.\n")
    server = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(ScreenshotError, match=r"exited \(3\) before it answered") as failure:
        wait_until(lambda: False, "it answered", server, log)
    assert "already in use" in str(failure.value)


def test_waiting_returns_once_the_condition_holds(tmp_path: Path) -> None:
    looks = []

    def third_look() -> bool:
        looks.append(1)
        return len(looks) == 3

    server = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        wait_until(third_look, "a third look", server, tmp_path / "serve.log")
        assert len(looks) == 3
    finally:
        server.kill()
        server.wait()


def test_heavy_images_are_named_with_their_size(tmp_path: Path) -> None:
    (tmp_path / "light.png").write_bytes(b"x" * 1000)
    (tmp_path / "heavy.png").write_bytes(b"x" * (screenshots.MAX_IMAGE_BYTES + 1))
    assert heavy_images(tmp_path, ["light.png", "heavy.png"]) == ["heavy.png (400 KB)"]


def test_the_committed_pictures_are_light_enough() -> None:
    assert heavy_images(ROOT / "docs" / "img", image_names()) == []
