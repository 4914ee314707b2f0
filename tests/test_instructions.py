"""Instructions are grammatical English for every family, every instance in the pool and every
proposal: modifier-before-noun phrases, an article before each, no underscores, no stutter."""

import itertools
import re

import numpy as np
import pytest

from coda.sim import assets, tasks
from coda.sim.scene import ObjectSpec
from coda.sim.sdk import exec_program
from coda.sim.tasks import describe, noun_phrase

# Head nouns an instruction may use; written out here (not derived from noun_phrase) so a new
# category or a malformed phrase fails loudly instead of being accepted by construction.
HEAD_NOUNS = {
    "block", "cube", "can", "bottle", "ball", "peg", "plate", "bowl", "bin", "box", "cabinet",
    "hole", "apple", "orange", "banana", "pear", "plum",
}  # fmt: skip
NP = r"[a-z]+(?:-[a-z]+)*(?: [a-z]+)?"  # optional (hyphenated) modifier, then the head noun
TEMPLATES = {
    "pick_place": [rf"put the (?P<target>{NP}) on the (?P<goal>{NP})"],
    "put_inside": [rf"put the (?P<target>{NP}) in the (?P<container>{NP})"],
    "articulated": [rf"(?P<action>open|close) the (?P<part>door|drawer) of the (?P<cabinet>{NP})"],
    "stack_or_insert": [
        rf"stack the (?P<top>{NP}) on the (?P<base>{NP})",
        rf"stack one (?P<top>{NP}) on the other",
        rf"insert the (?P<peg>{NP}) into the (?P<hole>{NP})",
    ],
}
PICKABLE = ("block", "cube", "can", "ball", "fruit", "bottle")


def _instances(category):
    return [i.name for i in assets.get_category(category).instances]


def _objects(**roles):
    """role=(category, instance) -> [ObjectSpec] named after their roles."""
    return [ObjectSpec(role, cat, inst, role) for role, (cat, inst) in roles.items()]


def grammar_problems(task, objects):
    """Concrete checks of one instruction against its roles; [] when it reads correctly."""
    text, problems = task["instruction"], []
    if not re.fullmatch(r"[a-z]+(?:[ -][a-z]+)*", text):
        problems.append("characters other than lower-case words, single spaces and hyphens")
    words = text.split(" ")
    problems += [f"repeated word {a!r}" for a, b in itertools.pairwise(words) if a == b]
    pairs = [p for p in itertools.pairwise(words) if p[0] not in ("the", "one")]
    problems += [f"repeated word pair {p}" for p in {p for p in pairs if pairs.count(p) > 1}]
    by_name = {o.name: o for o in objects}
    nps = {role: describe(by_name[name]) for role, name in task["roles"].items()}
    for role, np_ in nps.items():
        if np_.split(" ")[-1] not in HEAD_NOUNS:
            problems.append(f"{role}: {np_!r} does not end in a head noun")
        if not re.search(rf"\b(the|one) {re.escape(np_)}\b", text):
            problems.append(f"{role}: 'the {np_}' missing")
    for template in TEMPLATES[task["family"]]:
        m = re.fullmatch(template, text)
        if m:
            for role, got in m.groupdict().items():
                if role in nps and got != nps[role]:
                    problems.append(f"{role}: template reads {got!r}, object is {nps[role]!r}")
            break
    else:
        problems.append("matches no template of its family")
    return problems


@pytest.mark.parametrize(
    ("category", "instance", "phrase"),
    [
        ("cube", "cube_red", "red cube"),
        ("cabinet_door", "door_white", "white cabinet"),
        ("cabinet_drawer", "drawer_wood", "wooden cabinet"),
        ("hole", "hole_wide_rim", "wide-rim hole"),
        ("box", "box_lid", "lidded box"),
        ("can", "can_soda", "soda can"),
        ("fruit", "apple", "apple"),
    ],
)
def test_noun_phrase_puts_the_modifier_before_the_noun(category, instance, phrase):
    assert noun_phrase(category, instance) == phrase


def test_noun_phrase_rejects_empty_names():
    with pytest.raises(ValueError, match="category"):
        noun_phrase("", "cube_red")


def test_every_instance_of_every_category_has_a_clean_noun_phrase():
    for name, cat in assets.CATEGORIES.items():
        for inst in cat.instances:
            np_ = noun_phrase(name, inst.name)
            assert "_" not in np_ and np_.split(" ")[-1] in HEAD_NOUNS, (name, inst.name, np_)
            assert len(np_.split(" ")) <= 2, (name, inst.name, np_)


def _exhaustive_tasks():
    """Every family x every pool instance of each role (all splits), via make_task."""
    fams = tasks.FAMILIES
    for cat in PICKABLE:
        for t, g in itertools.product(_instances(cat), _instances("plate")):
            objs = _objects(target=(cat, t), goal=("plate", g))
            yield fams["pick_place"].make_task(objs, {}), objs
    for cat, ccat in itertools.product(("block", "cube", "ball", "fruit", "can"), ("bowl", "bin")):
        for t, c in itertools.product(_instances(cat), _instances(ccat)):
            objs = _objects(target=(cat, t), container=(ccat, c))
            yield fams["put_inside"].make_task(objs, {}), objs
    for t, c in itertools.product(_instances("cube"), ("box_open", "box_shallow")):
        objs = _objects(target=("cube", t), container=("box", c))
        yield fams["put_inside"].make_task(objs, {}), objs
    for cat, action in itertools.product(("cabinet_drawer", "cabinet_door"), ("open", "close")):
        for c in _instances(cat):
            objs = _objects(cabinet=(cat, c))
            yield fams["articulated"].make_task(objs, {"action": action}), objs
    blocks = [(c, i) for c in ("cube", "block") for i in _instances(c)]
    for top, base in itertools.product(blocks, blocks):  # includes two alike
        objs = _objects(top=top, base=base)
        yield fams["stack_or_insert"].make_task(objs, {"mode": "stack"}), objs
    for p, h in itertools.product(_instances("peg"), _instances("hole")):
        objs = _objects(peg=("peg", p), hole=("hole", h))
        yield fams["stack_or_insert"].make_task(objs, {"mode": "insert"}), objs


def test_every_family_and_instance_reads_grammatically():
    seen = {}
    for task, objs in _exhaustive_tasks():
        assert grammar_problems(task, objs) == [], task["instruction"]
        seen.setdefault(task["family"], set()).add(task["instruction"])
    assert set(seen) == set(tasks.FAMILIES)
    assert "open the door of the white cabinet" in seen["articulated"]
    assert "insert the square peg into the wide-rim hole" in seen["stack_or_insert"]
    assert "stack one red cube on the other" in seen["stack_or_insert"]


def test_the_checks_catch_the_old_phrasing():
    objs = _objects(cabinet=("cabinet_door", "door_white"))
    bad = {"family": "articulated", "instruction": "open the door of the door white"}
    bad["roles"] = {"cabinet": "cabinet"}
    assert grammar_problems(bad, objs)
    objs = _objects(peg=("peg", "peg_square"), hole=("hole", "hole_wide_rim"))
    bad = {"family": "stack_or_insert", "roles": {"peg": "peg", "hole": "hole"}}
    bad["instruction"] = "insert the square peg into the hole wide rim"
    assert grammar_problems(bad, objs)


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_proposals_read_grammatically_and_name_each_role_uniquely(family, split):
    fam, rng = tasks.get_family(family), np.random.default_rng(7)
    for k in range(20):
        scene = exec_program(fam.propose(rng, split=split), k, split, isolation="inprocess")
        assert grammar_problems(scene.task, scene.objects) == [], scene.task["instruction"]
        # no other object in the scene answers to a role's noun phrase
        for name in scene.task["roles"].values():
            np_ = describe(scene.object(name))
            others = [o.name for o in scene.objects if o.name != name and describe(o) == np_]
            assert not others, (scene.task["instruction"], name, others)
