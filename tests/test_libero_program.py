"""LIBERO tasks as factored programs (`coda.libero.program`, `coda.libero.goals`): each edit
changes its own factor and nothing else, edits are checked text (hostile or wrong edits are a
one-line `EditError`), new goals come from LIBERO's vocabulary with an instruction that names
the objects, edited tasks compile, verify and get a planner through the ordinary LIBERO path,
and `resample` is deterministic in its generator. Skips where LIBERO's data is not installed."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import episodes as E
from coda.libero import goals as G
from coda.libero import program as P
from coda.libero import scene as S

SPATIAL = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
GOAL_SUITE = "libero_goal"


@pytest.fixture(scope="module")
def spatial(libero_data):
    return S.load_task("libero_spatial", SPATIAL)


def _edited(task, text: str) -> S.LiberoTask:
    return P.apply(task, P.parse_edits(text), P.PREFIX + task.suite, f"{task.name}!{text}")


def test_edit_text_round_trips_and_overrides():
    text = "swap(a_1,b_1);inst(a_1,ketchup);goal(on,a_1,plate_1+open,c_1_top_region)"
    edits = P.parse_edits(text)
    assert [e.factor for e in edits] == ["layout", "attributes", "task"]
    assert P.format_edits(edits) == text
    assert edits[2].atoms == (("on", "a_1", "plate_1"), ("open", "c_1_top_region"))
    more = P.with_edit(edits, P.goal_edit([("close", "c_1_top_region")]))
    assert [e.op for e in more] == ["swap", "inst", "goal"] and more[-1].args == (
        "close,c_1_top_region",
    )


@pytest.mark.parametrize(
    "text, says",
    [
        ("__import__('os').system('x')", "is not one of"),
        ("swap(a)", "takes 2 arguments"),
        ("goal()", "at least one atom"),
        ("rm(a,b)", "is not one of"),
        ("swap(A,B)", "is not one of"),  # names are LIBERO's lower-case ids
    ],
)
def test_malformed_edit_text_is_one_line(text, says):
    with pytest.raises(P.EditError, match=says) as err:
        P.parse_edits(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text, says",
    [
        ("swap(akita_black_bowl_1,flat_stove_1)", "not an object on the table; valid"),
        ("move(plate_1,main_table_plate_init_region)", "not a free table region; valid"),
        ("inst(plate_1,wine_bottle)", "cannot stand in for 'plate_1'; valid"),
        ("goal(fly,plate_1)", "unknown predicate 'fly'; valid"),
        ("goal(on,plate_1)", "on takes 2 argument"),
        ("goal(on,plate_1,the_moon)", "'the_moon' is no object, fixture or region"),
    ],
)
def test_edits_that_do_not_fit_the_task_name_what_is_valid(spatial, text, says):
    with pytest.raises(P.EditError, match=says) as err:
        _edited(spatial, text)
    assert "\n" not in str(err.value)


def test_layout_edits_move_only_the_named_objects(spatial):
    a, b = "akita_black_bowl_1", "plate_1"
    swapped = _edited(spatial, f"swap({a},{b})")
    col = {n: 1 + S.ROBOT_NQ + 7 * k for k, (n, _) in enumerate(spatial.problem.objects)}
    s0, s1 = spatial.states, swapped.states
    np.testing.assert_allclose(s1[:, col[a] : col[a] + 2], s0[:, col[b] : col[b] + 2], atol=0)
    np.testing.assert_allclose(s1[:, col[b] : col[b] + 2], s0[:, col[a] : col[a] + 2], atol=0)
    moved = {col[a], col[a] + 1, col[b], col[b] + 1}
    rest = [j for j in range(s0.shape[1]) if j not in moved]
    np.testing.assert_allclose(s1[:, rest], s0[:, rest], atol=0)
    assert swapped.problem.goal == spatial.problem.goal
    assert swapped.problem.objects == spatial.problem.objects
    assert swapped.problem.language == spatial.problem.language  # LIBERO-PRO's swap keeps it too
    twice = _edited(spatial, f"swap({a},{b});swap({a},{b})")
    np.testing.assert_allclose(twice.states, spatial.states, atol=0)
    region = G.free_regions(spatial)[0]
    to = _edited(spatial, f"move({a},{region})")
    x0, y0, x1, y1 = spatial.problem.regions[region].ranges[0]
    ws = spatial.workspace
    want = ((x0 + x1) / 2 + ws.offset[0], (y0 + y1) / 2 + ws.offset[1])
    np.testing.assert_allclose(to.states[:, col[a] : col[a] + 2], np.tile(want, (50, 1)), atol=1e-9)
    assert ("on", a, region) in to.problem.init


def test_an_instance_edit_changes_the_object_and_the_words_only(spatial):
    obj = "akita_black_bowl_1"
    valid = P.instance_candidates(spatial, obj)
    assert valid and "akita_black_bowl" not in valid
    cat = valid[0]
    t = _edited(spatial, f"inst({obj},{cat})")
    assert t.problem.category(obj) == cat and t.problem.goal == spatial.problem.goal
    others = [(n, c) for n, c in t.problem.objects if n != obj]
    assert others == [(n, c) for n, c in spatial.problem.objects if n != obj]
    # two black bowls: the source's words name bowl 1 only through its place, so the
    # instruction is said again from the goal with the new object's name
    assert G.name_of(cat) in t.problem.language and "akita" not in t.problem.language
    np.testing.assert_allclose(
        np.delete(t.states, 1 + S.ROBOT_NQ + 2, axis=1),
        np.delete(spatial.states, 1 + S.ROBOT_NQ + 2, axis=1),
        atol=0,
    )
    # the plate is what things go on: its stand-ins are things LIBERO puts things on
    assert set(P.instance_candidates(spatial, "plate_1")) <= P._roles()[1]  # noqa: SLF001


def test_a_stand_in_has_the_parts_the_goal_names(spatial):
    """In(x, basket_1_contain_region): a stand-in for the basket must be a container too
    (a book has no contain_region site: the goal could not even be evaluated)."""
    from coda.libero import assets, suites

    name = next(t for t in suites.tasks("libero_object") if "basket" in t)
    task = S.load_task("libero_object", name)
    valid = P.instance_candidates(task, "basket_1")
    assert all("contain_region" in assets.site_parts(c) for c in valid)
    for c in valid:  # each compiles with its goal (the site ν reads exists)
        E.compile_episode(E.Episode("libero_object", name, 0, 0, f"inst(basket_1,{c})").program)
    with pytest.raises(P.EditError, match="cannot stand in for 'basket_1'"):
        _edited(task, "inst(basket_1,black_book)")


def test_new_goals_come_from_libero_vocabulary_with_their_instruction(spatial):
    atoms = G.candidate_atoms(spatial)
    assert atoms and not set(spatial.problem.goal) & set(atoms)
    vocab = G.vocabulary()
    assert ("turnon", ("fixture", "flat_stove")) in vocab
    assert ("on", ("object", "plate")) in vocab
    labels = G.labels(spatial)  # two black bowls told apart by where the task puts them
    assert {labels["akita_black_bowl_1"], labels["akita_black_bowl_2"]} == {
        "the back black bowl",
        "the front black bowl",
    }
    t = _edited(spatial, "goal(on,akita_black_bowl_2,plate_1)")
    assert t.problem.goal == (("on", "akita_black_bowl_2", "plate_1"),)
    assert t.problem.language == f"put {labels['akita_black_bowl_2']} on the plate"
    assert t.problem.obj_of_interest == ("akita_black_bowl_2", "plate_1")
    np.testing.assert_allclose(t.states, spatial.states, atol=0)
    opened = _edited(spatial, "goal(open,wooden_cabinet_1_top_region)")
    assert opened.problem.language == "open the top drawer of the cabinet"
    assert opened.problem.obj_of_interest == ("wooden_cabinet_1",)


def test_edited_episodes_compile_verify_and_get_a_planner(spatial):
    from coda.libero.planner import planner_for
    from coda.libero.verify import verify_task_state

    for text in ("swap(akita_black_bowl_1,cookies_1)", "goal(on,akita_black_bowl_2,plate_1)"):
        ep = E.Episode("libero_spatial", SPATIAL, 2, 0, text)
        assert E.parse(ep.program) == ep
        c = E.compile_episode(ep.program)
        assert c.scene.program == ep.program
        assert c.scene.task["params"]["suite"] == "edit:libero_spatial"
        assert verify_task_state(c).verdict.ok, text
        planner_for(c, 10)  # raises with its reason when it cannot script the goal
    src = E.compile_episode(E.Episode("libero_spatial", SPATIAL, 2).program)
    assert src.scene.task["params"]["suite"] == "libero_spatial"  # LIBERO's own, unedited


def test_resample_is_one_edit_of_the_factor_and_deterministic(spatial):
    base = E.Episode("libero_spatial", SPATIAL, 4).program
    for factor in P.FACTORS:
        a = P.resample(base, factor, np.random.default_rng(7))
        b = P.resample(base, factor, np.random.default_rng(7))
        assert a == b
        ep = E.parse(a)
        assert [e.factor for e in P.edits_of(ep)] == [factor] and ep.index == 4
    with pytest.raises(P.EditError, match="unknown factor"):
        P.edits_for(spatial, "colour")


def test_phrasings_are_distinct_start_with_libero_and_avoid_evaluation_sentences(spatial):
    words = G.phrasings(spatial)
    assert words[0] == spatial.problem.language and len(words) >= 4
    assert len({G.normalise(w) for w in words}) == len(words)
    held = G.heldout_sentences()
    lan = "libero_spatial_lan"  # LIBERO-PRO's paraphrase of this very task is held out
    from coda.libero import suites

    theirs = S.load_task(lan, suites.tasks(lan)[0]).problem.language
    assert G.normalise(theirs) in held
    assert not {G.normalise(w) for w in words} & held


def test_a_wording_that_is_an_evaluation_sentence_is_never_used(spatial, monkeypatch):
    words = G.phrasings(spatial)
    monkeypatch.setattr(G, "heldout_sentences", lambda: frozenset({G.normalise(words[1])}))
    again = G.phrasings(spatial)
    assert words[1] not in again and again[0] == words[0] and words[2] in again


def test_an_episode_is_told_in_its_kth_wording(spatial):
    ep = E.Episode("libero_spatial", SPATIAL, 1, say=2)
    assert E.parse(ep.program) == ep and ep.program.endswith("#say2")
    c = E.compile_episode(ep.program)
    assert c.scene.task["instruction"] == G.phrasings(spatial)[2]
    assert c.scene.program == ep.program
    own = E.compile_episode(E.Episode("libero_spatial", SPATIAL, 1).program)
    assert own.scene.task["instruction"] == spatial.problem.language
    np.testing.assert_allclose(c.init_qpos, own.init_qpos, atol=1e-12)  # words only
    got = P.variant(own.scene.program, "task", np.random.default_rng(3), (1,), 0.0, say=1)
    edited = E.parse(got[0].scene.program)
    assert edited.say == 1 and edited.edits.startswith("goal(")
    assert got[0].scene.task["instruction"] == G.phrasings(S.load_task(*edited.task_ref))[1]


def test_words_name_the_right_object_and_part():
    """An instance edit replaces the old object's words only where they name it alone ("white
    mug" also sits inside "yellow and white mug": the goal is said again instead); a wine
    rack's top_region is the rack, not a drawer."""
    from coda.libero import suites

    name = next(t for t in suites.tasks("libero_10") if "white_mug" in t and "plate" in t)
    task = S.load_task("libero_10", name)
    obj = next(n for n, c in task.problem.objects if c == "porcelain_mug")
    cat = P.instance_candidates(task, obj)[0]
    t = _edited(task, f"inst({obj},{cat})")
    assert "yellow and white mug" not in t.problem.language or "white mug" not in (
        t.problem.language.replace("yellow and white mug", "")
    )
    assert G.name_of(cat) in t.problem.language
    goal = next(t for t in suites.tasks("libero_goal") if "wine_bottle_on_the_rack" in t)
    rack = S.load_task("libero_goal", goal)
    assert G.phrase(rack, ("on", "wine_bottle_1", "wine_rack_1_top_region")) == (
        "put the wine bottle on the wine rack"
    )


def test_two_of_a_kind_are_named_as_libero_names_them():
    """LIBERO's own words are the agent view's: plate_1 starts in "plate_left_region" (-y) and
    LIBERO's sentence calls it the left plate; the templated goal says the same."""
    from coda.libero import suites

    name = next(t for t in suites.tasks("libero_10") if "white_mug" in t and "plate" in t)
    task = S.load_task("libero_10", name)
    labels = G.labels(task)
    assert (labels["plate_1"], labels["plate_2"]) == ("the left plate", "the right plate")
    assert "white mug on the left plate" in task.problem.language
    assert G.instruction(task, task.problem.goal).startswith("put the white mug on the left plate")


def test_probes_change_the_focus_object_in_their_factor(spatial):
    """The critic's probe kinds on a LIBERO episode: away moves / replaces the goal's object,
    relation swaps it with its target, near is a level-1 shift, redraw a resample; the kinds
    with no LIBERO meaning are None."""
    base = E.Episode("libero_spatial", SPATIAL, 0).program
    rng = np.random.default_rng(0)
    away = E.parse(P.probe(base, "layout", "away", rng))
    (edit,) = P.edits_of(away)
    assert edit.op == "move" and edit.args[0] == "akita_black_bowl_1"
    assert edit.args[1] in G.free_regions(spatial)
    big = P.edits_of(E.parse(P.probe(base, "attributes", "away", rng)))[0]
    assert big.op == "inst" and big.args[0] == "akita_black_bowl_1"
    assert P.probe(base, "layout", "near", rng).endswith("#layout1")
    assert P.edits_of(E.parse(P.probe(base, "layout", "relation", rng)))[0].op == "swap"
    assert P.probe(base, "attributes", "near", rng) is None
    assert P.probe(base, "task", "recategorized", rng) is None
    redraw = E.parse(P.probe(base, "task", "redraw", rng))
    assert [e.factor for e in P.edits_of(redraw)] == ["task"]
    with pytest.raises(P.EditError, match="unknown probe kind"):
        P.probe(base, "layout", "sideways", rng)


class _Pick:
    """A generator stand-in whose draw is a given index."""

    def __init__(self, i: int):
        self.i = i

    def integers(self, n: int) -> int:
        return self.i


def _resampled_to(program: str, edit: P.Edit) -> str:
    """`P.resample` of `program` drawing `edit` (which must be one of the task's edits)."""
    edits = P.edits_for(S.load_task(*E.parse(program).task_ref), edit.factor)
    return P.resample(program, edit.factor, _Pick(edits.index(edit)))


def _loads(program: str) -> S.LiberoTask:
    return S.load_task(*E.parse(program).task_ref)


def test_an_edit_drawn_on_an_edited_task_keeps_the_edits_it_needs(spatial):
    """An edit is drawn on the edited task, so it may hold only after an edit it overrides:
    a stand-in of a stand-in (chosen by the current object's size), an instance of an object
    that an earlier goal made movable. The program then keeps the chain (it loads, as the
    critic's probes and the engine need); when the override still applies it is kept short."""
    bowl, first = "akita_black_bowl_1", P.instance_candidates(spatial, "akita_black_bowl_1")[0]
    once = E.Episode("libero_spatial", SPATIAL, 0, edits=f"inst({bowl},{first})").program
    twice_task = _loads(once)
    only_now = set(P.instance_candidates(twice_task, bowl)) - set(
        P.instance_candidates(spatial, bowl)
    )
    assert only_now, "the fixture needs a stand-in that only the edited object allows"
    cat = sorted(only_now)[0]
    chained = _resampled_to(once, P.Edit("inst", (bowl, cat)))
    assert [e.args[1] for e in P.edits_of(E.parse(chained))] == [first, cat]
    assert _loads(chained).problem.category(bowl) == cat
    both = set(P.instance_candidates(spatial, bowl)) & set(P.instance_candidates(twice_task, bowl))
    same = sorted(both)[0]
    short = _resampled_to(once, P.Edit("inst", (bowl, same)))
    assert [e.args for e in P.edits_of(E.parse(short))] == [(bowl, same)]

    # the plate is the goal's target; a goal that moves it lets stand-ins of a moved object in
    region = G.free_regions(spatial)[0]
    moved = E.Episode(
        "libero_spatial",
        SPATIAL,
        0,
        edits=P.format_edits([P.goal_edit([("on", "plate_1", region)])]),
    ).program
    as_mover = set(P.instance_candidates(_loads(moved), "plate_1"))
    cat = sorted(as_mover - set(P.instance_candidates(spatial, "plate_1")))[0]
    with_inst = _resampled_to(moved, P.Edit("inst", ("plate_1", cat)))
    new_goal = next(
        e for e in P.edits_for(_loads(with_inst), "task") if e.atoms[0][:2] == ("on", "plate_1")
    )
    program = _resampled_to(with_inst, new_goal)
    assert _loads(program).problem.category("plate_1") == cat
    assert [e.op for e in P.edits_of(E.parse(program))] == ["goal", "inst", "goal"]
