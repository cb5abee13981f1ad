"""Every helper the tests share lives in this package, one module per subject (tests/README.md); test modules
import from here and never from each other. pytest rewrites the asserts of these modules as it does a test
module's, so a helper's failed check shows its values."""

import pkgutil

import pytest

pytest.register_assert_rewrite(*(f"{__name__}.{module.name}" for module in pkgutil.iter_modules(__path__)))
