"""Generates ``schema.py`` (the API's TypedDicts) from the daemon's ``/openapi.json``.

The daemon's document is derived from the zod schemas its routes declare, so generating the
Python types from it keeps the two from drifting: a test regenerates them from a real daemon's
document and fails when the committed ``schema.py`` differs. After changing the API, run::

    python3 -m gym_sandboxd.schema_gen [--state-dir DIR | --file openapi.json] > gym_sandboxd/schema.py
"""

from __future__ import annotations

import argparse
import json
import keyword
import sys
from typing import Any

# (type name, path of keys into the document). Request bodies are the input form (fields with a
# default are optional); answers are the output form.
ROOTS: list[tuple[str, list[str | int]]] = [
    ("ErrorBody", ["paths", "/v1/sandboxes/{id}", "get", "responses", "404", "content", "application/json", "schema"]),
    ("SandboxSpec", ["paths", "/v1/sandboxes", "post", "requestBody", "content", "application/json", "schema", "anyOf", 0]),
    ("PoolAcquireRequest", ["paths", "/v1/sandboxes", "post", "requestBody", "content", "application/json", "schema", "anyOf", 1]),
    ("Sandbox", ["paths", "/v1/sandboxes/{id}", "get", "responses", "200", "content", "application/json", "schema"]),
    ("SandboxList", ["paths", "/v1/sandboxes", "get", "responses", "200", "content", "application/json", "schema"]),
    ("KeepaliveRequest", ["paths", "/v1/sandboxes/{id}/keepalive", "post", "requestBody", "content", "application/json", "schema"]),
    ("ExecRequest", ["paths", "/v1/sandboxes/{id}/exec", "post", "requestBody", "content", "application/json", "schema"]),
    ("ExecResult", ["paths", "/v1/sandboxes/{id}/exec", "post", "responses", "200", "content", "application/json", "schema"]),
    ("ExecStreamEvent", ["paths", "/v1/sandboxes/{id}/exec", "post", "responses", "200", "content", "application/x-ndjson", "schema"]),
    ("GatewayReach", ["paths", "/v1/sandboxes/{id}/gateway", "post", "responses", "200", "content", "application/json", "schema"]),
    ("PortEndpoint", ["paths", "/v1/sandboxes/{id}/ports/{port}", "get", "responses", "200", "content", "application/json", "schema"]),
    ("ServiceOutput", ["paths", "/v1/sandboxes/{id}/service/output", "get", "responses", "200", "content", "application/json", "schema"]),
    ("OpenRolloutRequest", ["paths", "/v1/gateway/rollouts", "post", "requestBody", "content", "application/json", "schema"]),
    ("PoolDefinition", ["paths", "/v1/pools/{name}", "put", "requestBody", "content", "application/json", "schema"]),
    ("PoolStats", ["paths", "/v1/pools/{name}", "get", "responses", "200", "content", "application/json", "schema"]),
    ("StopProcessesResult", ["paths", "/v1/sandboxes/{id}/stop-processes", "post", "responses", "200", "content", "application/json", "schema"]),
    ("SnapshotRequest", ["paths", "/v1/sandboxes/{id}/snapshot", "post", "requestBody", "content", "application/json", "schema"]),
    ("SnapshotResult", ["paths", "/v1/sandboxes/{id}/snapshot", "post", "responses", "200", "content", "application/json", "schema"]),
    ("SnapshotInfo", ["paths", "/v1/snapshots/{id}", "get", "responses", "200", "content", "application/json", "schema"]),
    ("SnapshotList", ["paths", "/v1/snapshots", "get", "responses", "200", "content", "application/json", "schema"]),
    ("ForkRequest", ["paths", "/v1/sandboxes/{id}/fork", "post", "requestBody", "content", "application/json", "schema"]),
    ("ForkResult", ["paths", "/v1/sandboxes/{id}/fork", "post", "responses", "201", "content", "application/json", "schema"]),
    ("Health", ["paths", "/healthz", "get", "responses", "200", "content", "application/json", "schema"]),
    ("AccessGrantRequest", ["paths", "/v1/access", "post", "requestBody", "content", "application/json", "schema"]),
    ("AccessGrant", ["paths", "/v1/access", "get", "responses", "200", "content", "application/json", "schema", "properties", "grants", "items"]),
    ("AccessGrantList", ["paths", "/v1/access", "get", "responses", "200", "content", "application/json", "schema"]),
    ("AccessGrantCreated", ["paths", "/v1/access", "post", "responses", "201", "content", "application/json", "schema"]),
    ("PtyCreateRequest", ["paths", "/v1/sandboxes/{id}/ptys", "post", "requestBody", "content", "application/json", "schema"]),
    ("PtyInfo", ["paths", "/v1/sandboxes/{id}/ptys/{ptyId}", "get", "responses", "200", "content", "application/json", "schema"]),
    ("PtyAttachment", ["paths", "/v1/sandboxes/{id}/ptys", "post", "responses", "201", "content", "application/json", "schema"]),
    ("PtyOutput", ["paths", "/v1/sandboxes/{id}/ptys/{ptyId}/output", "get", "responses", "200", "content", "application/json", "schema"]),
]

# Nested objects are named parent + property (a variant of a union by its "type" constant). One
# shape is defined once, under the first name it gets; a different shape under a taken name is
# the answer's form of a request's type (defaults filled in) and gets "Output" after it.
# Enums worth a name of their own, found by the property that carries them.
ENUM_NAMES: dict[tuple[str, str], str] = {
    ("Sandbox", "state"): "SandboxState",
    ("ExecResult", "status"): "ExecStatus",
    ("SandboxSpec", "network"): "NetworkMode",
    ("ErrorBodyError", "code"): "ErrorCode",
}


def _pascal(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in text.replace("-", "_").split("_") if part)


class _Generator:
    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.defined: dict[str, str] = {}
        self.by_body: dict[str, str] = {}
        self.enum_aliases: dict[str, str] = {}

    def type_of(self, schema: dict[str, Any], name_hint: str) -> str:
        if "const" in schema:
            return f"Literal[{_literal(schema['const'])}]"
        if "enum" in schema:
            annotation = "Literal[" + ", ".join(_literal(value) for value in schema["enum"]) + "]"
            named = [name for name, value in self.enum_aliases.items() if value == annotation]
            return named[0] if named else annotation
        for key in ("oneOf", "anyOf"):
            if key in schema:
                options = [self.type_of(option, name_hint + _variant(option, index)) for index, option in enumerate(schema[key])]
                return " | ".join(dict.fromkeys(options))
        kind = schema.get("type")
        if isinstance(kind, list):
            options = [self.type_of({**schema, "type": item}, name_hint) for item in kind]
            return " | ".join(dict.fromkeys(options))
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            return f"list[{self.type_of(schema.get('items', {}), name_hint + 'Item')}]"
        if kind == "object":
            if "properties" in schema:
                return self.typed_dict(schema, name_hint)
            values = schema.get("additionalProperties")
            value_type = self.type_of(values, name_hint + "Value") if isinstance(values, dict) and values else "Any"
            return f"dict[str, {value_type}]"
        return "Any"

    def typed_dict(self, schema: dict[str, Any], name: str) -> str:
        required = set(schema.get("required", []))
        lines: list[str] = []
        for prop, prop_schema in schema["properties"].items():
            enum_name = ENUM_NAMES.get((name, prop))
            annotation = self.type_of(prop_schema, name + _pascal(prop))
            # A union led by the enum (a request that also takes an object form) names the enum
            # part only: the alias must stay a plain Literal, defined before any class.
            if enum_name is not None and annotation.startswith("Literal["):
                enum, *others = annotation.split(" | ")
                self.enum_aliases.setdefault(enum_name, enum)
                annotation = " | ".join([enum_name, *others])
            if not prop.isidentifier() or keyword.iskeyword(prop):
                raise ValueError(f"{name}.{prop} is not a Python identifier; extend the generator")
            lines.append(f"    {prop}: {annotation if prop in required else f'NotRequired[{annotation}]'}")
        body = "\n".join(lines) or "    pass"
        if body in self.by_body:
            return self.by_body[body]
        final, counter = name, 1
        while final in self.defined:
            counter += 1
            final = f"{name}Output" if counter == 2 else f"{name}Output{counter}"
        self.defined[final] = body
        self.by_body[body] = final
        self.blocks.append(f"class {final}(TypedDict):\n{body}\n")
        return final


def _literal(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _variant(option: dict[str, Any], index: int) -> str:
    """A union member's name: its "type" constant when it has one (ExecStreamEvent + Stdout)."""
    constant = option.get("properties", {}).get("type", {}).get("const")
    return _pascal(constant) if isinstance(constant, str) else str(index)


def _at(document: Any, path: list[str | int]) -> Any:
    for key in path:
        document = document[key]
    return document


def generate(document: dict[str, Any]) -> str:
    """The text of ``schema.py`` for an OpenAPI document of the daemon."""
    generator = _Generator()
    aliases: list[str] = []
    for name, path in ROOTS:
        schema = _at(document, path)
        result = generator.type_of(schema, name)
        if result != name:
            aliases.append(f"{name} = {result}")
    enums = [f"{name} = {annotation}" for name, annotation in sorted(generator.enum_aliases.items())]
    # Every other use of a named enum's values says its name.
    blocks = generator.blocks
    for enum_name, annotation in generator.enum_aliases.items():
        blocks = [block.replace(annotation, enum_name) for block in blocks]
    header = (
        '"""The daemon API\'s request and answer shapes, generated from its /openapi.json.\n\n'
        "Do not edit: run ``python3 -m gym_sandboxd.schema_gen > gym_sandboxd/schema.py`` against a\n"
        "daemon of the version you target (a test compares this file with a real daemon's document).\n"
        '"""\n\n'
        "# ruff: noqa: E501\n"
        "from __future__ import annotations\n\n"
        "from typing import Any, Literal, NotRequired, TypedDict\n\n"
    )
    return header + "\n".join(enums) + "\n\n\n" + "\n\n".join(blocks) + "\n\n" + "\n".join(aliases) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", help="an openapi.json already fetched")
    parser.add_argument("--state-dir", help="the running daemon's state directory (default: as the CLI finds it)")
    arguments = parser.parse_args(argv)
    if arguments.file is not None:
        with open(arguments.file, encoding="utf-8") as handle:
            document = json.load(handle)
    else:
        from .client import GymClient

        with GymClient(state_dir=arguments.state_dir) as client:
            document = client.openapi()
    sys.stdout.write(generate(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
