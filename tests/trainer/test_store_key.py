"""The compile store's key (trainer.store_key): from the environment, a mounted file, or a key
of the user's own made once with mode 0600; every setting that cannot be used is named."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import launch
from trainer.store_key import KEY_ENV, KEY_FILE_ENV, StoreKeyError, load_key

GOOD = "ab" * 16


def test_the_key_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert load_key({KEY_ENV: f"  {GOOD} "}) == GOOD.encode()
    secret = tmp_path / "secret"
    secret.write_text(f"{GOOD}\nignored\n")
    assert load_key({KEY_FILE_ENV: str(secret)}) == GOOD.encode()


@pytest.mark.parametrize(("environ", "names"), [
    ({KEY_ENV: GOOD, KEY_FILE_ENV: "x"}, f"{KEY_ENV} and {KEY_FILE_ENV} are both set"),
    ({KEY_ENV: "short"}, f"{KEY_ENV} must be at least 32 characters"),
    ({KEY_FILE_ENV: "/nonexistent/key"}, f"{KEY_FILE_ENV} cannot be read"),
    ({KEY_FILE_ENV: "EMPTY"}, f"{KEY_FILE_ENV} cannot be read: empty file"),
])
def test_a_key_setting_that_cannot_be_used_is_named(
        tmp_path: Path, environ: dict[str, str], names: str) -> None:
    (tmp_path / "EMPTY").write_text("\n")
    environ = {k: str(tmp_path / v) if v == "EMPTY" else v for k, v in environ.items()}
    with pytest.raises(StoreKeyError, match=names):
        load_key(environ)


def test_without_a_setting_a_key_of_the_users_own_is_made_once(tmp_path: Path) -> None:
    file = tmp_path / "config" / "ett" / "compile-store.key"
    first = load_key({}, default_file=file)
    assert len(first) == 64 and load_key({}, default_file=file) == first
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    assert [p.name for p in file.parent.iterdir()] == ["compile-store.key"]  # no temp left


def test_a_job_with_an_unusable_key_setting_stops_before_it_starts(tmp_path: Path) -> None:
    """The supervisor names the setting (exit 2) rather than train without its store."""
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "--job", "j", "--spool-dir", str(tmp_path / "s"),
         "--checkpoint-dir", str(tmp_path / "c"), "--opt", "compile_cache"],
        cwd=Path(launch.__file__).resolve().parents[1], capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", KEY_ENV: "too-short"}, timeout=120, check=False)
    assert result.returncode == 2
    assert f"compile store: {KEY_ENV} must be at least 32 characters" in result.stderr
