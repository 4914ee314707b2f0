"""Tokenizer: openpi's pi0.5 prompt format, the shipped offline model and its regeneration."""

import json
import os

import numpy as np
import pytest
from openpi_fixtures import FIX

from coda.policy import PromptTokenizer, get_config, tokenizer_for
from coda.policy.tokenizer import DEFAULT_MODEL, discretize_state, format_prompt


@pytest.mark.skipif(not os.path.isdir(FIX), reason="openpi fixtures not available")
def test_prompt_format_matches_openpi_capture():
    meta = json.load(open(os.path.join(FIX, "pi05_tiny_parity.json")))["prompt_format"]
    state = np.load(os.path.join(FIX, "pi05_tiny_parity.npz"))["inputs/state"]
    for i, calls in enumerate(meta["captured_encode_calls_per_example"]):
        assert format_prompt("pick up the red_block\n", state[i]) == calls[0]["text"]
        assert calls[0]["add_bos"] is True


def test_discretize_bins():
    np.testing.assert_array_equal(
        discretize_state(np.array([-1.0, -0.999, 0.0, 0.999, 1.0])), [0, 0, 128, 255, 255]
    )


def test_offline_tokenizer_roundtrip_and_padding():
    tok = PromptTokenizer(max_len=24)
    assert tok.path == DEFAULT_MODEL and tok.vocab_size == 1000
    ids, mask = tok.tokenize("put the red mug inside the basket")
    assert ids.dtype == np.int32 and ids.shape == (24,) and mask.dtype == bool
    n = int(mask.sum())
    assert ids[0] == 2 and mask[:n].all() and not mask[n:].any() and (ids[n:] == 0).all()
    assert tok.decode(ids[1:n]) == "put the red mug inside the basket\n"
    # known vocabulary stays compact: one piece per word
    assert n == 1 + 7 + 1
    ids, mask = tok.tokenize("open_the top drawer", state=np.array([0.5, -0.25]))
    text = tok.decode(ids[1 : int(mask.sum())])
    assert text == "Task: open the top drawer, State: 192 96;\nAction: "
    long_ids, long_mask = tok.tokenize("stack the blocks " * 40)
    assert long_mask.all()
    toks, masks = tok.tokenize_batch(["pick up the cube", "Zebra über café"])
    assert toks.shape == (2, 24) and masks.shape == (2, 24)
    assert tok.decode(toks[1, 1 : int(masks[1].sum())]) == "Zebra über café\n"  # byte fallback
    with pytest.raises(TypeError):
        tok.tokenize(3)
    with pytest.raises(ValueError, match="prompts"):
        tok.tokenize_batch(["a", "b"], states=np.zeros((3, 2)))


def test_tokenizer_for_config(tmp_path, monkeypatch):
    assert tokenizer_for(get_config("small")).vocab_size <= get_config("small").vocab_size
    with pytest.raises(ValueError, match="vocab_size"):
        tokenizer_for(get_config("tiny"))  # the fixture model's 512-entry table is too small
    with pytest.raises(FileNotFoundError):
        tokenizer_for(get_config("pi05", tokenizer_path=str(tmp_path / "nope.model")))
    monkeypatch.setenv("CODA_PALIGEMMA_TOKENIZER", DEFAULT_MODEL)
    assert PromptTokenizer(8).path == DEFAULT_MODEL


def test_regeneration_reproduces_shipped_model(tmp_path):
    from coda.policy import make_tokenizer

    out = make_tokenizer.build(str(tmp_path / "spm"), str(tmp_path / "sample.txt"))
    with open(out, "rb") as a, open(DEFAULT_MODEL, "rb") as b:
        assert a.read() == b.read()
    with open(tmp_path / "sample.txt") as a, open(make_tokenizer.SAMPLE) as b:
        assert a.read() == b.read()


def test_tokenize_for_config_discrete_state():
    from coda.policy.tokenizer import tokenize_for_config

    states = np.array([[0.5, -0.25]])
    c = get_config("pi05", max_token_len=32)
    tok = tokenizer_for(c)
    ids, mask = tokenize_for_config(c, tok, ["pick up the cube"], states)
    assert tok.decode(ids[0, 1 : mask[0].sum()]).startswith(
        "Task: pick up the cube, State: 192 96;"
    )
    c2 = get_config("small")
    ids2, mask2 = tokenize_for_config(c2, tokenizer_for(c2), ["pick up the cube"], states)
    assert tok.decode(ids2[0, 1 : mask2[0].sum()]) == "pick up the cube\n"
