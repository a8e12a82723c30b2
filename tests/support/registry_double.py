"""A TEST DOUBLE of the Confluent Schema Registry REST API, for tests only.

No Schema Registry server can be installed where the suite runs, so this ``http.server`` on a free
loopback port answers the part of the REST API that confluent-kafka's ``SchemaRegistryClient``
(2.16) calls for pgbridge and its tests, with the registry's status codes and error JSON
(``{"error_code": 40401, "message": "..."}``):

| method and path                                        | client call                      |
| ------------------------------------------------------ | -------------------------------- |
| ``GET /schemas/types``                                 | ``get_schema_types`` (the probe) |
| ``POST /subjects/{subject}/versions?normalize=...``    | ``register_schema``              |
| ``POST /subjects/{subject}?normalize=...&deleted=...`` | ``lookup_schema``                |
| ``GET /subjects``                                      | ``get_subjects``                 |
| ``GET /subjects/{subject}/versions``                   | ``get_versions``                 |
| ``GET /subjects/{subject}/versions/{version|latest}``  | ``get_version``, ``get_latest_version`` |
| ``GET /schemas/ids/{id}?subject=...``                  | ``get_schema``                   |
| ``POST /compatibility/subjects/{subject}/versions/{version|latest}`` | ``test_compatibility`` |
| ``GET/PUT/DELETE /config`` and ``/config/{subject}``   | ``get/set_compatibility``, ``delete_config`` |

Like the real registry: ids are global (the same schema under two subjects has one id), registering
a schema a subject already has returns its id without a new version, and the default
compatibility level is ``BACKWARD``. Compatibility is checked for real, by Avro schema resolution
as the spec defines it and fastavro's reader applies it (``reader_errors``): ``BACKWARD`` means the
new schema as reader resolves the latest as writer, ``FORWARD`` the reverse, ``FULL`` both, and the
``_TRANSITIVE`` levels check every earlier version. A rejection is HTTP 409 with the registry's
wording. Optional basic auth answers 401 without the right ``Authorization`` header, and
``inject(status)`` makes the next requests fail with a given status (403, 500, ...).

Any other path answers 404 like a registry without that feature: confluent-kafka's
``AvroDeserializer`` asks ``GET /associations/resources/...`` and carries on after a 404, as it does
against Confluent Platform 7.

Not implemented: schema references, contexts, modes, metadata and rule sets, deletes of subjects and
versions, ``normalize`` (accepted and ignored), and schema types other than AVRO.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from fastavro.schema import SchemaParseException, expand_schema, parse_schema

from pgbridge.http import SHUTDOWN_POLL_S
from tests.support.ports import free_port

LEVELS: Final = frozenset({"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                           "FULL", "FULL_TRANSITIVE"})
_CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
_PROMOTIONS: Final = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
                      ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")}
_NAMED: Final = frozenset({"record", "error", "enum", "fixed"})


# --- Avro schema resolution -----------------------------------------------------------------------


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema["type"]
        return kind if isinstance(kind, str) else _kind(kind)
    return str(schema)


def _names(schema: dict[str, Any]) -> set[str]:
    namespace = schema["name"].rpartition(".")[0]  # expanded: the name is the full name
    names = {schema["name"]}
    for alias in schema.get("aliases", ()):
        names.add(alias if "." in alias or not namespace else f"{namespace}.{alias}")
    return names


def _resolve(writer: Any, reader: Any, path: str, errors: list[str]) -> None:
    """Append to ``errors`` every reason data written with ``writer`` cannot be read as ``reader``.

    Both schemas are fully expanded (``fastavro.schema.expand_schema``: full names, named types
    inlined), so names compare directly. Logical types do not take part, as in Avro's own checker.
    """
    writer_kind, reader_kind = _kind(writer), _kind(reader)
    if writer_kind == "union":
        for i, branch in enumerate(writer):
            _resolve(branch, reader, f"{path}/{i}", errors)
        return
    if reader_kind == "union":
        for branch in reader:
            attempt: list[str] = []
            _resolve(writer, branch, path, attempt)
            if not attempt:
                return
        closest = [b for b in reader if _kind(b) == writer_kind
                   and (writer_kind not in _NAMED or writer["name"] in _names(b))]
        if closest:  # say why the branch of the same type does not fit, not just that none does
            _resolve(writer, closest[0], path, errors)
        else:
            errors.append(f"{path}: reader union {_show(reader)} has no branch for writer type {_show(writer)}")
        return
    if writer_kind != reader_kind:
        if (writer_kind, reader_kind) not in _PROMOTIONS:
            errors.append(f"{path}: reader type {reader_kind} does not resolve writer type {writer_kind}")
        return
    if writer_kind in _NAMED and reader["name"] != writer["name"] and writer["name"] not in _names(reader):
        errors.append(f"{path}: reader name {reader['name']} does not match writer name {writer['name']}")
        return
    if writer_kind in ("record", "error"):
        written = {f["name"]: f for f in writer["fields"]}
        for reader_field in reader["fields"]:
            name = reader_field["name"]
            source = next((written[n] for n in (name, *reader_field.get("aliases", ())) if n in written), None)
            if source is not None:
                _resolve(source["type"], reader_field["type"], f"{path}/{name}", errors)
            elif "default" not in reader_field:
                errors.append(f"{path}/{name}: reader field {name} has no default and the writer has no such field")
    elif writer_kind == "enum":
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            errors.append(f"{path}: reader enum {reader['name']} lacks writer symbols {missing}")
    elif writer_kind == "fixed":
        if writer["size"] != reader["size"]:
            errors.append(f"{path}: fixed {writer['name']} size {writer['size']} is not {reader['size']}")
    elif writer_kind == "array":
        _resolve(writer["items"], reader["items"], f"{path}/items", errors)
    elif writer_kind == "map":
        _resolve(writer["values"], reader["values"], f"{path}/values", errors)


def _show(schema: Any) -> str:
    return json.dumps([_kind(b) for b in schema] if isinstance(schema, list) else _kind(schema))


def reader_errors(writer: Any, reader: Any) -> list[str]:
    """Why records written with ``writer`` cannot be read with ``reader`` (empty: they can)."""
    errors: list[str] = []
    _resolve(expand_schema(writer), expand_schema(reader), "", errors)
    return errors


def compatibility_errors(level: str, new: Any, earlier: list[Any]) -> list[str]:
    """What ``level`` finds wrong with ``new`` given the subject's ``earlier`` schemas, oldest first."""
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    errors: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            errors += [f"new schema cannot read old: {e}" for e in reader_errors(writer=old, reader=new)]
        if level.startswith(("FORWARD", "FULL")):
            errors += [f"old schema cannot read new: {e}" for e in reader_errors(writer=new, reader=old)]
    return errors


# --- the server -----------------------------------------------------------------------------------


class _Reply(Exception):
    """Ends a request with this status and JSON body."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def _error(status: int, error_code: int, message: str) -> _Reply:
    return _Reply(status, {"error_code": error_code, "message": message})


@dataclass
class _State:
    schemas: list[str] = field(default_factory=list)  # id - 1 → schema string as registered
    ids: dict[str, int] = field(default_factory=dict)  # normalised JSON → id
    subjects: dict[str, list[int]] = field(default_factory=dict)  # subject → ids by version
    global_level: str = "BACKWARD"
    subject_levels: dict[str, str] = field(default_factory=dict)
    injected: list[int] = field(default_factory=list)
    connections: set[socket.socket] = field(default_factory=set)  # open keep-alive connections
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class RegistryDouble:
    """The test double; ``with RegistryDouble() as registry: registry.url`` (see the module docs).

    ``port`` may be chosen up front and the server started later (``start``), to test a registry
    that is down when pgbridge starts.
    """

    def __init__(self, *, port: int | None = None, basic_auth: tuple[str, str] | None = None) -> None:
        self.port = port or free_port()
        self._auth = None if basic_auth is None else \
            "Basic " + base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode()
        self._state = _State()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RegistryDouble:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self._state, self._auth))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="registry-double", daemon=True)  # close() returns as pgbridge's does
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop listening and cut every open connection, as a registry going down would."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            with self._state.lock:
                connections, self._state.connections = list(self._state.connections), set()
            for connection in connections:
                with contextlib.suppress(OSError):  # already closed by the client
                    connection.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> RegistryDouble:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- test controls and inspection --------------------------------------------------------------
    def inject(self, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``status`` and a registry error body."""
        with self._state.lock:
            self._state.injected.extend([status] * times)

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        with self._state.lock:
            if subject is None:
                self._state.global_level = level
            else:
                self._state.subject_levels[subject] = level

    def register(self, subject: str, schema: Any) -> int:
        """Register directly (no HTTP, no compatibility check): seed a subject for a test."""
        with self._state.lock:
            return _register(self._state, subject, json.dumps(schema), check=False)

    def subjects(self) -> dict[str, list[int]]:
        """Subject → schema id of each version, oldest first."""
        with self._state.lock:
            return {s: list(ids) for s, ids in self._state.subjects.items()}

    def schema(self, schema_id: int) -> Any:
        with self._state.lock:
            return json.loads(self._state.schemas[schema_id - 1])

    def requests(self) -> Iterator[tuple[str, str]]:
        """(method, path with query) of every request served, in order."""
        with self._state.lock:
            return iter(list(self._state.requests))


def _normalised(schema_str: str) -> tuple[str, Any]:
    try:
        parsed = json.loads(schema_str)
        parse_schema(parsed)
    except (ValueError, SchemaParseException, KeyError, TypeError) as exc:
        raise _error(422, 42201, f"Invalid schema: {exc}") from None
    return json.dumps(parsed, sort_keys=True, separators=(",", ":")), parsed


def _level(state: _State, subject: str) -> str:
    return state.subject_levels.get(subject, state.global_level)


def _register(state: _State, subject: str, schema_str: str, *, check: bool = True) -> int:
    key, parsed = _normalised(schema_str)
    versions = state.subjects.get(subject, [])
    existing = state.ids.get(key)
    if existing is not None and existing in versions:
        return existing
    if check:
        level = _level(state, subject)
        earlier = [json.loads(state.schemas[i - 1]) for i in versions]
        errors = compatibility_errors(level, parsed, earlier)
        if errors:
            raise _error(409, 409, f'Schema being registered is incompatible with an earlier schema for subject '
                                   f'"{subject}", details: [{"; ".join(errors)}] (compatibility: {level})')
    if existing is None:
        state.schemas.append(schema_str)
        existing = len(state.schemas)
        state.ids[key] = existing
    state.subjects.setdefault(subject, []).append(existing)
    return existing


def _version(state: _State, subject: str, version: str) -> tuple[int, int]:
    """(version number, schema id) of ``version`` (a number or ``latest``) of ``subject``."""
    versions = state.subjects.get(subject)
    if not versions:
        raise _error(404, 40401, f"Subject '{subject}' not found.")
    if version in ("latest", "-1"):
        return len(versions), versions[-1]
    if not version.isdigit() or not 1 <= int(version) <= len(versions):
        raise _error(404, 40402, f"Version {version} not found.")
    return int(version), versions[int(version) - 1]


def _registered(state: _State, subject: str, number: int, schema_id: int) -> dict[str, Any]:
    return {"subject": subject, "version": number, "id": schema_id, "schema": state.schemas[schema_id - 1]}


def _route(state: _State, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Any:
    match method, parts:
        case "GET", ["schemas", "types"]:
            return ["AVRO"]
        case "GET", ["schemas", "ids", id_text]:
            if not id_text.isdigit() or not 1 <= int(id_text) <= len(state.schemas):
                raise _error(404, 40403, f"Schema {id_text} not found")
            return {"schema": state.schemas[int(id_text) - 1]}
        case "GET", ["subjects"]:
            return sorted(state.subjects)
        case "POST", ["subjects", subject, "versions"]:
            return {"id": _register(state, subject, _schema_of(body))}
        case "POST", ["subjects", subject]:
            key, _ = _normalised(_schema_of(body))
            if subject not in state.subjects:
                raise _error(404, 40401, f"Subject '{subject}' not found.")
            for number, schema_id in enumerate(state.subjects[subject], 1):
                if state.ids.get(key) == schema_id:
                    return _registered(state, subject, number, schema_id)
            raise _error(404, 40403, "Schema not found")
        case "GET", ["subjects", subject, "versions"]:
            return list(range(1, len(_versions_of(state, subject)) + 1))
        case "GET", ["subjects", subject, "versions", version]:
            return _registered(state, subject, *_version(state, subject, version))
        case "POST", ["compatibility", "subjects", subject, "versions", version]:
            _, schema_id = _version(state, subject, version)
            _, parsed = _normalised(_schema_of(body))
            errors = compatibility_errors(_level(state, subject), parsed,
                                          [json.loads(state.schemas[schema_id - 1])])
            reply: dict[str, Any] = {"is_compatible": not errors}
            if query.get("verbose", ["false"])[0].lower() == "true":
                reply["messages"] = errors
            return reply
        case "GET", ["config"]:
            return {"compatibilityLevel": state.global_level}
        case "GET", ["config", subject]:
            if subject in state.subject_levels:
                return {"compatibilityLevel": state.subject_levels[subject]}
            if query.get("defaultToGlobal", ["false"])[0].lower() == "true":
                return {"compatibilityLevel": state.global_level}
            raise _error(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        case "PUT", ["config", *rest] if len(rest) <= 1:
            level = str((body or {}).get("compatibility", "")).upper()
            if level not in LEVELS:
                raise _error(422, 42203, f"Invalid compatibility level. Valid values are {sorted(LEVELS)}")
            if rest:
                state.subject_levels[rest[0]] = level
            else:
                state.global_level = level
            return {"compatibility": level}
        case "DELETE", ["config", subject]:
            previous = state.subject_levels.pop(subject, state.global_level)
            return {"compatibilityLevel": previous}
    raise _error(404, 404, "HTTP 404 Not Found")


def _versions_of(state: _State, subject: str) -> list[int]:
    versions = state.subjects.get(subject)
    if not versions:
        raise _error(404, 40401, f"Subject '{subject}' not found.")
    return versions


def _schema_of(body: Any) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise _error(422, 42201, "Invalid schema: the request has no \"schema\" string")
    if body.get("schemaType", "AVRO") != "AVRO":
        raise _error(422, 42201, f"Invalid schema: the test double only knows AVRO, not {body['schemaType']}")
    if body.get("references"):
        raise _error(422, 42201, "Invalid schema: the test double does not resolve schema references")
    return str(body["schema"])


_STATUS_CODES: Final = {401: 40101, 403: 40301, 500: 50001, 503: 50003}


def _handler(state: _State, auth: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def handle(self) -> None:
            with state.lock:
                state.connections.add(self.connection)
            try:
                super().handle()
            finally:
                with state.lock:
                    state.connections.discard(self.connection)

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            parts = [unquote(p) for p in re.split(r"/+", url.path.strip("/")) if p]
            with state.lock:
                state.requests.append((method, self.path))
                injected = state.injected.pop(0) if state.injected else None
                try:
                    if injected is not None:
                        raise _error(injected, _STATUS_CODES.get(injected, injected), f"injected HTTP {injected}")
                    if auth is not None and self.headers.get("Authorization") != auth:
                        raise _error(401, 401, "Unauthorized")
                    try:
                        body = json.loads(raw) if raw else None
                    except ValueError:
                        raise _error(400, 400, "Unrecognized request body: not JSON") from None
                    status, reply = 200, _route(state, method, parts, parse_qs(url.query), body)
                except _Reply as answer:
                    status, reply = answer.status, answer.body
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", _CONTENT_TYPE)
            self.send_header("Content-Length", str(len(payload)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="registry-double"')
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler
