"""Where the openpi fixtures live: beside the checkout (../shared); override with
CODA_OPENPI_FIXTURES. Shared by the policy tests that read them, and a LIBERO checkpoint
directory in openpi's layout assembled from them (the LIBERO tests and the LIBERO notebook's)."""

import json
import os
import pathlib

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


# quantiles chosen so that normalisation is far from the identity in every dimension
STATE_Q = (
    [-0.3, -0.3, 0.9, 2.5, -0.5, -0.5, 0.0, -0.05],
    [0.2, 0.3, 1.3, 3.5, 0.5, 0.5, 0.05, 0.0],
)
ACTION_Q = ([-0.9, -0.8, -0.7, -0.2, -0.3, -0.4, -1.0], [0.8, 0.9, 0.6, 0.2, 0.3, 0.1, 1.0])


def write_norm_stats(path: pathlib.Path) -> None:
    """openpi's norm_stats.json with STATE_Q / ACTION_Q as the 1st / 99th percentiles."""
    entry = lambda q: {"mean": [0.0] * len(q[0]), "std": [1.0] * len(q[0]),  # noqa: E731
                       "q01": q[0], "q99": q[1]}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"norm_stats": {"state": entry(STATE_Q), "actions": entry(ACTION_Q)}})
    )


def libero_checkpoint(tmp: pathlib.Path) -> pathlib.Path:
    """<tmp>/ckpt in openpi's pi05_libero layout: params/ (the tiny orbax fixture),
    assets/physical-intelligence/libero/norm_stats.json, paligemma_tokenizer.model (a 400-piece
    SentencePiece model: the tiny model's vocabulary is 512)."""
    import sentencepiece as spm

    from coda.libero import openpi_policy as OP
    from coda.policy.make_tokenizer import instructions

    tmp = pathlib.Path(tmp)
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(s for line in instructions(600) for s in line.split("\n")) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp / "spm"), vocab_size=400, model_type="bpe",
        normalization_rule_name="identity", user_defined_symbols=["\n"], byte_fallback=True,
        character_coverage=1.0, split_digits=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        num_threads=1, remove_extra_whitespaces=False, add_dummy_prefix=False,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    root = tmp / "ckpt"
    root.mkdir()
    (root / "params").symlink_to(os.path.join(FIX, "pi05_tiny_orbax", "params"), True)
    write_norm_stats(root / "assets" / "physical-intelligence" / "libero" / "norm_stats.json")
    (root / OP.TOKENIZER_FILE).write_bytes((tmp / "spm.model").read_bytes())
    return root
