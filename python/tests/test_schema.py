"""The Python types and error classes cannot drift from the daemon's API: both come from its /openapi.json."""

from __future__ import annotations

from pathlib import Path

from gym_sandboxd import GymClient, errors, schema, schema_gen


def test_schema_py_is_what_the_daemon_document_generates(client: GymClient) -> None:
    committed = (Path(schema.__file__)).read_text(encoding="utf-8")
    generated = schema_gen.generate(client.openapi())
    assert generated == committed, (
        "gym_sandboxd/schema.py differs from the daemon's /openapi.json: "
        "run `python3 -m gym_sandboxd.schema_gen > gym_sandboxd/schema.py`"
    )


def test_every_error_code_of_the_document_has_its_class(client: GymClient) -> None:
    document = client.openapi()
    error_schema = schema_gen._at(document, schema_gen.ROOTS[0][1])
    codes = set(error_schema["properties"]["error"]["properties"]["code"]["enum"])
    assert codes == set(errors.ERROR_STATUS)
    for code in codes:
        cls = errors.error_class(code)
        assert cls is not errors.GymError and cls.code == code and issubclass(cls, errors.GymError)
    assert set(schema.ErrorCode.__args__) == codes  # type: ignore[attr-defined]
