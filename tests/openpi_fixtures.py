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

PARITY_NPZ = os.path.join(FIX, "pi05_tiny_parity.npz")


def load_parity():
    """The tiny parity fixture: (params, inputs, outputs, Observation) as the policy reads them."""
    import jax.numpy as jnp
    import numpy as np
    from flax.traverse_util import unflatten_dict

    from coda.policy.base import Observation
    from coda.policy.configs import OPENPI_CAMERAS

    z = np.load(PARITY_NPZ)
    params = unflatten_dict(
        {k[len("params/") :]: jnp.asarray(z[k]) for k in z.files if k.startswith("params/")},
        sep="/",
    )
    inp = {k[len("inputs/") :]: z[k] for k in z.files if k.startswith("inputs/")}
    out = {k[len("outputs/") :]: z[k] for k in z.files if k.startswith("outputs/")}
    obs = Observation(
        tokens=jnp.asarray(inp["tokenized_prompt"]),
        token_mask=jnp.asarray(inp["tokenized_prompt_mask"]),
        images={c: jnp.asarray(inp[f"images/{c}"]) for c in OPENPI_CAMERAS},
        image_masks={c: jnp.asarray(inp[f"image_masks/{c}"]) for c in OPENPI_CAMERAS},
    )
    return params, inp, out, obs
