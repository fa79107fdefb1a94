"""Validating OCSF events against the OCSF schema the `ocsf-json-schema` package ships
(the schema server's export turned into JSON Schema draft 2020-12), with each event's profiles."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema

from executor.audit_formats import ocsf


@cache
def _schemas() -> OcsfJsonSchemaEmbedded:
    return OcsfJsonSchemaEmbedded(get_ocsf_schema(version=ocsf.OCSF_VERSION))


@cache
def validator(class_uid: int, profiles: tuple[str, ...]) -> jsonschema.Draft202012Validator:
    """The JSON Schema validator of one OCSF class with these profiles (built once)."""
    schemas = _schemas()
    name = schemas.lookup_class_name_from_uid(class_uid=class_uid)
    schema = schemas.get_class_schema(class_name=name, profiles=list(profiles))
    return jsonschema.Draft202012Validator(schema)


def schema_errors(event: dict[str, Any]) -> list[str]:
    """What makes `event` invalid OCSF of its class (empty: valid)."""
    profiles = tuple(event["metadata"].get("profiles", ()))
    errors = validator(event["class_uid"], profiles).iter_errors(event)
    return [f"{list(e.absolute_path)}: {e.message[:200]}" for e in errors]
