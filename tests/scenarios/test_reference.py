"""docs/scenario-reference.md is the schema's own reference, and it is current."""

from pathlib import Path

from fedstrata.scenarios import schema
from fedstrata.scenarios.reference import scenario_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-reference.md"


def test_every_section_and_key_of_the_schema_is_documented():
    text = scenario_reference()
    sections = [schema.Scenario, schema.AlgorithmSpec, schema.ProtocolSpec, schema.LinkSpec]
    sections += [schema.FaultsSpec, schema.PrivacySpec, schema.DPSpec, schema.CrashSpec]
    for model in sections:
        assert f"## `{model.__name__.removesuffix('Spec')}`" in text
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in text, (model.__name__, name)
    assert "`e-fkmvc`" in text and "`real-data`" in text


def test_the_committed_reference_is_the_generated_one():
    # regenerate with: python -m fedstrata.scenarios.reference > docs/scenario-reference.md
    assert DOC.read_text(encoding="utf-8") == scenario_reference()
