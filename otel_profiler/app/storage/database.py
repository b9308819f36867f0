"""Opening the app's database: SQLite inside the store by default (for a store behind an fsspec URL,
inside its local mirror), or any SQLAlchemy URL (PostgreSQL for a team server), brought to the newest
schema by the Alembic migrations on every open."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .locations import app_folder, is_remote, local_path, mirror_folder

log = logging.getLogger(__name__)


class DatabaseError(Exception):
    """The database cannot be opened or migrated (the message says which and why)."""


def default_url(store: str) -> str:
    return f"sqlite:///{app_folder(store) / 'app.db'}"


def _sqlite_settings(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")  # user removal cascades to tokens and sessions
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the store scan's writes
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def migrate(engine: Engine) -> None:
    """Bring ``engine``'s database to the newest schema (a no-op when it already is)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def open_database(store: str | None, url: str | None = None) -> sessionmaker[Session]:
    """A session factory on the migrated database at ``url`` (default: SQLite in ``store``)."""
    if not url:
        if store and is_remote(store):  # a bucket holds no SQLite database: the local mirror does
            store = mirror_folder(store)
            os.makedirs(store, mode=0o700, exist_ok=True)
        elif store:
            store = local_path(store)
        if not store or not os.path.isdir(store):
            raise DatabaseError(f"{store}: not a folder (the profile store)")
        url = default_url(store)
    try:
        engine = create_engine(url, pool_pre_ping=True)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_settings)
        migrate(engine)
    except (SQLAlchemyError, ImportError, OSError) as exc:
        raise DatabaseError(f"{_without_password(url)}: cannot open the database ({_first_line(exc)})") from None
    return sessionmaker(engine, expire_on_commit=False)


def _without_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is named without its text
        log.debug("a database URL could not be parsed to hide its password", exc_info=True)
        return "the database URL"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
