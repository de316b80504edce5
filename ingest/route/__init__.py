"""Routing change events of many topics to many Iceberg tables (whole-database CDC).

Pure: config values in, routing decisions out; nothing here reads Kafka or a catalog.
"""

from calving.ingest.route.names import NameRules, NameTemplate, TableNameError, parse_template
from calving.ingest.route.router import NeedsSource, Route, Skip, TableRouter
from calving.ingest.route.settings import TableSettings, TableSettingsList, parse_table_settings

__all__ = [
    "NameRules",
    "NameTemplate",
    "NeedsSource",
    "Route",
    "Skip",
    "TableNameError",
    "TableRouter",
    "TableSettings",
    "TableSettingsList",
    "parse_table_settings",
    "parse_template",
]
