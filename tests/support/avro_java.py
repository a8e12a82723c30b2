"""Read Avro bodies with Apache Avro for Java (tests/support/java/AvroRead.java): the interop
check that a Java consumer holding ``reader`` decodes records written with other writer schemas
the way the Avro specification's schema resolution says (field aliases included)."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jvm.fetch import classpath

SOURCE = Path(__file__).resolve().parent / "java" / "AvroRead.java"


def read_with_java(reader: dict[str, Any], records: Iterable[tuple[dict[str, Any], bytes]],
                   timeout: float = 120.0) -> list[Any]:
    """Each ``(writer schema, Avro body)`` decoded by Java's ``GenericDatumReader(writer, reader)``,
    as the JSON that ``GenericData.toString`` renders, parsed."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    lines = [b64(json.dumps(reader).encode())]
    lines += [f"{b64(json.dumps(writer).encode())} {b64(body)}" for writer, body in records]
    done = subprocess.run(["java", "-cp", classpath("avro"), str(SOURCE)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"Java Avro failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
