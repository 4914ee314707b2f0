"""Regenerate the offline SentencePiece tokenizer shipped in ``coda/policy/assets/``.

    python -m coda.policy.make_tokenizer

Generates the project's robot-instruction corpus (vocabulary: pick/place, open/close
drawer/door, put inside, stack, insert peg; object names and colours; the pi0.5 prompt frame with
discretised states), writes a readable sample of it to ``instructions_sample.txt`` and trains
``coda_spm.model`` from the full corpus (BPE, 1000 pieces, identity normalisation, a newline
piece, byte fallback so any text encodes; ids pad=0, eos=1, bos=2, unk=3 as in PaliGemma).
Deterministic: rerunning reproduces the shipped files byte for byte.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile

ASSETS = os.path.join(os.path.dirname(__file__), "assets")
SAMPLE = os.path.join(ASSETS, "instructions_sample.txt")
MODEL_PREFIX = os.path.join(ASSETS, "coda_spm")
VOCAB_SIZE = 1000

COLOURS = [
    "red", "green", "blue", "yellow", "orange", "purple", "white", "black", "gray", "pink",
    "brown", "cyan",
]  # fmt: skip
OBJECTS = [
    "block", "cube", "cup", "mug", "bowl", "plate", "box", "can", "bottle", "ball", "sponge",
    "spoon", "lid", "basket", "tray", "peg", "cylinder", "brick", "jar", "toy", "apple", "banana",
]  # fmt: skip
CONTAINERS = ["box", "bowl", "basket", "drawer", "cabinet", "tray", "bin", "jar", "cup", "mug"]
SURFACES = ["table", "plate", "tray", "shelf", "counter", "stove", "mat", "platform", "board"]
ARTICULATED = ["drawer", "door", "cabinet door", "top drawer", "bottom drawer", "microwave door",
               "lid", "fridge door", "window"]  # fmt: skip
RELATIONS = ["on", "onto", "on top of", "next to", "to the left of", "to the right of",
             "behind", "in front of", "near", "beside"]  # fmt: skip
SIZES = ["", "small ", "large ", "big ", "tiny ", "tall ", "short "]


def _obj(rng: random.Random) -> str:
    colour = rng.choice(COLOURS + [""])
    return f"{rng.choice(SIZES)}{colour + ' ' if colour else ''}{rng.choice(OBJECTS)}"


def instructions(n: int = 6000, seed: int = 0) -> list[str]:
    """Templated robot instructions covering CoDA's task families."""
    rng = random.Random(seed)
    temps = [
        lambda: f"pick up the {_obj(rng)}",
        lambda: (
            f"pick up the {_obj(rng)} and place it {rng.choice(RELATIONS)} the "
            f"{rng.choice(SURFACES)}"
        ),
        lambda: f"place the {_obj(rng)} {rng.choice(RELATIONS)} the {_obj(rng)}",
        lambda: f"move the {_obj(rng)} {rng.choice(RELATIONS)} the {_obj(rng)}",
        lambda: (
            f"put the {_obj(rng)} {rng.choice(['in', 'into', 'inside'])} the "
            f"{rng.choice(COLOURS)} {rng.choice(CONTAINERS)}"
        ),
        lambda: f"put the {_obj(rng)} inside the {rng.choice(CONTAINERS)} and close it",
        lambda: f"{rng.choice(['open', 'close'])} the {rng.choice(ARTICULATED)}",
        lambda: (
            f"{rng.choice(['open', 'close', 'push', 'pull'])} the {rng.choice(COLOURS)} "
            f"{rng.choice(ARTICULATED)} "
            f"{rng.choice(['halfway', 'fully', 'all the way', ''])}"
        ).strip(),
        lambda: f"stack the {_obj(rng)} on top of the {_obj(rng)}",
        lambda: f"stack the {rng.choice(COLOURS)} blocks",
        lambda: (
            f"insert the {rng.choice(COLOURS)} peg into the "
            f"{rng.choice(['hole', 'socket', 'slot'])}"
        ),
        lambda: f"insert the peg into the {rng.choice(COLOURS)} {rng.choice(['hole', 'socket'])}",
        lambda: f"lift the {_obj(rng)} and put it down {rng.choice(RELATIONS)} the {_obj(rng)}",
        lambda: (
            f"grasp the {_obj(rng)}, then {rng.choice(['lift', 'push', 'slide'])} it "
            f"{rng.choice(['left', 'right', 'forward', 'back', 'up'])}"
        ),
        lambda: (
            f"Put The {rng.choice(COLOURS).capitalize()} {rng.choice(OBJECTS).capitalize()} "
            f"In The {rng.choice(CONTAINERS).capitalize()}."
        ),
    ]
    out = [rng.choice(temps)() for _ in range(n)]
    # pi0.5's prompt frame with a discretised state (256 bins), so digits and the frame are pieces.
    for i in range(n // 3):
        dims = rng.randint(4, 32)
        state = " ".join(str(rng.randint(0, 255)) for _ in range(dims))
        out.append(f"Task: {out[i]}, State: {state};\nAction: ")
    out += [
        "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789",
        "punctuation: , . ; : ! ? ' \" ( ) [ ] - _ / + = % & #",
    ]
    return out


def build(model_prefix: str = MODEL_PREFIX, sample_path: str = SAMPLE) -> str:
    import sentencepiece as spm

    os.makedirs(os.path.dirname(model_prefix), exist_ok=True)
    # sentencepiece reads one sentence per line: split the frame at its newline, so the text after
    # it ("Action: ") is learnt as it appears after the newline piece (no leading space).
    lines = [seg for line in instructions() for seg in line.split("\n")]
    with open(sample_path, "w") as f:
        f.write("\n".join(lines[::40]) + "\n")
    model_path = os.path.abspath(model_prefix + ".model")
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        # Relative paths inside the temp dir keep the trainer spec (stored in the model) stable.
        os.chdir(tmp)
        try:
            corpus = "corpus.txt"
            with open(corpus, "w") as f:
                f.write("\n".join(lines) + "\n")
            spm.SentencePieceTrainer.train(
                input=corpus,
                model_prefix="spm",
                vocab_size=VOCAB_SIZE,
                model_type="bpe",
                normalization_rule_name="identity",
                user_defined_symbols=["\n"],
                character_coverage=1.0,
                byte_fallback=True,
                split_digits=True,
                pad_id=0,
                eos_id=1,
                bos_id=2,
                unk_id=3,
                num_threads=1,
                shuffle_input_sentence=False,
                input_sentence_size=0,
                remove_extra_whitespaces=False,
                add_dummy_prefix=False,  # as Gemma: encode("\n") is the newline piece alone
                minloglevel=2,
            )
            shutil.copyfile("spm.model", model_path)
        finally:
            os.chdir(cwd)

    return model_path


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    print(build())


if __name__ == "__main__":
    main()
