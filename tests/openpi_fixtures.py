"""Where the openpi fixtures live: beside the checkout (../shared); override with
CODA_OPENPI_FIXTURES. Shared by the policy tests that read them."""

import os

FIX = os.environ.get("CODA_OPENPI_FIXTURES") or next(
    (
        p
        for p in (
            os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "openpi"),
            "/work/shared/fixtures/openpi",
        )
        if os.path.isdir(p)
    ),
    "openpi-fixtures-not-found",
)
