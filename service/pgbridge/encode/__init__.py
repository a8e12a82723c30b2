"""Pure encoding: assembled changes → Avro keys and values framed for Kafka, per the contract.

``types`` maps Postgres types to Avro (one module per type family), ``naming`` makes Avro names
of Postgres names, ``schemas`` builds writer schemas from ``schemas/*.avsc`` and each Relation,
``envelope`` writes the records (``ChangeEncoder``) with one ``plan`` per Relation version (the
bytes of its rows, keys and envelopes) and ``toast`` (unchanged TOASTed columns), ``wire`` holds
the Avro binary primitives, fingerprints and the framing (single-object now, a Schema Registry later through
``SchemaRegistrar``). Nothing here does I/O except through the registrar it is given.
"""

from __future__ import annotations

from pgbridge.encode.envelope import ChangeEncoder, EventContext, KeyResolver, OutRecord, default_key_columns
from pgbridge.encode.types import EncodeError, NumericPolicy
from pgbridge.encode.wire import (
    SchemaRegistrar,
    SingleObjectRegistrar,
    fingerprint64,
    fingerprint_hex,
    parsing_canonical_form,
    single_object_header,
)

__all__ = [
    "ChangeEncoder",
    "EncodeError",
    "EventContext",
    "KeyResolver",
    "NumericPolicy",
    "OutRecord",
    "SchemaRegistrar",
    "SingleObjectRegistrar",
    "default_key_columns",
    "fingerprint64",
    "fingerprint_hex",
    "parsing_canonical_form",
    "single_object_header",
]
