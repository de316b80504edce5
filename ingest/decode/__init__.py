"""Record decoders: Kafka record bytes -> rows in the table's Arrow schema + dead letters.

Each decoder's ``decode(batch)`` takes the Kafka source's Arrow batch and returns a
``DecodedBatch``; every record ends up as exactly one row or one dead letter.
"""

from calving.ingest.decode.avro_confluent import AvroOptions, ConfluentAvroDecoder
from calving.ingest.decode.batch import DEAD_LETTER_SCHEMA, META_COLUMNS, DecodedBatch, Decoder
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from calving.ingest.decode.infer import InferredSchema, infer_schema
from calving.ingest.decode.json_values import JsonOptions, JsonValueDecoder
from calving.ingest.decode.schema_registry import (
    LocalSchemaDirectory,
    SchemaRegistryClient,
    open_schema_source,
)
from calving.ingest.decode.upsert import KeyUpsertDecoder

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
