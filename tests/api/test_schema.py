"""Property-based: schemathesis drives every operation in the OpenAPI schema with valid and invalid input.

Checks: never a 5xx, status codes, content types, headers and bodies as documented, invalid input
rejected, and the bearer token enforced. Not checked: that every schema-valid request succeeds,
because page tokens are opaque (a forged one is a 422) and a partition named without its cluster
may be ambiguous (422 naming `cluster`).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.config import SchemathesisConfig

from isrwatch.api.app import create_app
from tests.support.fleet import Streamed

TOKEN = "s3cret"
CONFIG = SchemathesisConfig.from_str(f"""
[auth.openapi.HTTPBearer]
bearer = "{TOKEN}"
""")


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_breaks_the_api(fleet_store: tuple[str, Streamed], mode: GenerationMode) -> None:
    app = create_app(fleet_store[0], token=TOKEN, ready_max_watermark_lag_s=0)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(mode))
    def fuzz(case: schemathesis.Case) -> None:
        seen.add(case.operation.label)
        case.call_and_validate(excluded_checks=[positive_data_acceptance])

    fuzz()
    # Every operation is drawn; negative input needs a parameter to break (/healthz and /readyz take none).
    drawable = {op.label for op in operations if mode is GenerationMode.POSITIVE or any(op.iter_parameters())}
    assert drawable <= seen, sorted(drawable - seen)
