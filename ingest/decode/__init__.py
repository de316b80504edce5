"""Record decoders: Kafka record bytes -> rows in the table's Arrow schema + dead letters.

Each decoder's ``decode(batch)`` takes the Kafka source's Arrow batch and returns a
``DecodedBatch``; every record ends up as exactly one row or one dead letter.
"""

from ingest.decode.avro_confluent import AvroOptions, ConfluentAvroDecoder
from ingest.decode.batch import DEAD_LETTER_SCHEMA, META_COLUMNS, DecodedBatch, Decoder
from ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from ingest.decode.infer import InferredSchema, infer_schema
from ingest.decode.json_values import JsonOptions, JsonValueDecoder
from ingest.decode.schema_registry import (
    LocalSchemaDirectory,
    SchemaRegistryClient,
    open_schema_source,
)
from ingest.decode.upsert import KeyUpsertDecoder

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "META_COLUMNS",
    "AvroOptions",
    "ConfluentAvroDecoder",
    "DebeziumDecoder",
    "DebeziumOptions",
    "DecodedBatch",
    "Decoder",
    "InferredSchema",
    "JsonOptions",
    "JsonValueDecoder",
    "KeyUpsertDecoder",
    "LocalSchemaDirectory",
    "SchemaRegistryClient",
    "infer_schema",
    "open_schema_source",
]
