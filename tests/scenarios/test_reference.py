"""docs/scenario-reference.md is the schema's own reference, and it is current."""

from pathlib import Path

from fedstrata.plugins.spec import settings_models
from fedstrata.scenarios import schema
from fedstrata.scenarios.reference import scenario_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-reference.md"


def test_every_section_and_key_of_the_schema_is_documented():
    text = scenario_reference()
    sections = [schema.Scenario, schema.ProtocolSpec, schema.LinkSpec]
    sections += [schema.FaultsSpec, schema.PrivacySpec, schema.DPSpec, schema.CrashSpec]
    for model in sections:
        assert f"## `{model.__name__.removesuffix('Spec')}`" in text
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in text, (model.__name__, name)
    assert "`e-fkmvc`" in text and "`real-data`" in text
    assert "## `Algorithm`" in text


def test_every_registered_algorithms_keys_are_documented_under_its_name():
    text = scenario_reference()
    for model in settings_models():
        head = text.index(f"### name: `{model.names()[0]}`")
        section = text[head : text.find("### ", head + 4)]
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in section, (model.__name__, name)


def test_the_committed_reference_is_the_generated_one():
    # regenerate with: python -m fedstrata.scenarios.reference > docs/scenario-reference.md
    assert DOC.read_text(encoding="utf-8") == scenario_reference()
