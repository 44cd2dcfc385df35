import pytest

from qora.phase.recipe import Recipe, RecipeError, default_recipe


def test_parse_and_print_back():
    r = Recipe.parse("HIO**400 ER**100")
    assert str(r) == "HIO**400 ER**100" and r.iterations == 500
    r = Recipe.parse("hio( beta=0.8 ,constraint=positive )**10  RAAR(beta=0.75, sw=5, sigma=2.5)**20")
    assert str(r) == "HIO(beta=0.8, constraint=positive)**10 RAAR(beta=0.75, sw=5, sigma=2.5)**20"
    assert Recipe.parse(str(r)) == r
    assert Recipe.parse(r) is r
    assert str(Recipe.parse("ER**5") + "HIO**3") == "ER**5 HIO**3"


def test_default_recipe_round_trips():
    d = default_recipe()
    assert Recipe.parse(str(d)) == d and d.iterations >= 1000


@pytest.mark.parametrize("bad,match", [
    ("", "empty"), ("HIO", "cannot parse"), ("HIO**0", "positive"), ("OSS**10", "unknown algorithm"),
    ("HIO(beta=2)**10", "beta"), ("HIO(gamma=1)**10", "unknown option"), ("HIO(beta=x)**10", "valid float"),
    ("HIO(beta)**10", "name=value"), ("ER(constraint=imag)**3", "constraint"), ("HIO**10 ER*5", "cannot parse"),
])
def test_bad_recipes_are_clear_errors(bad, match):
    with pytest.raises(RecipeError, match=match):
        Recipe.parse(bad)


def test_shrinkwrap_sigma_schedule_is_geometric():
    s = Recipe.parse("HIO(sw=10, sigma=4, sigma_min=1)**100").stages[0]
    assert s.sigma_at(0, 10) == 4 and s.sigma_at(9, 10) == pytest.approx(1)
    assert s.sigma_at(3, 10) == pytest.approx(4 * 0.25 ** (3 / 9))


def test_few_photons_finds_the_support_again_from_the_mean():
    """The few-photon recipe as docs/phase.md ("Few photons: what the counts allow") describes it: the rms-threshold
    search, then averaged HIO on the found support, a shrinkwrap of the mean with the same rule, and averaged HIO
    again before the last ER; every shrinkwrap keeps the rms rule and the size guard."""
    from qora.phase.recipe import FEW_PHOTONS_RECIPE

    stages = Recipe.parse(FEW_PHOTONS_RECIPE).stages
    assert [(s.algorithm, bool(s.sw), bool(s.average)) for s in stages] == [
        ("HIO", True, False), ("ER", True, False), ("ER", False, False), ("HIO", False, True),
        ("ER", True, False), ("HIO", False, True), ("ER", False, False)]
    assert stages[0].iterations == 1500 and stages[3].average == stages[5].average == 800
    for s in (stages[0], stages[1], stages[4]):
        assert (s.stat, s.threshold, s.smin, s.smax) == ("rms", 0.25, 0.25, 2.0)
    # the reshrink of the mean: five updates, blur 1 -> 0.5 px, as the tightening ER stage after the search
    assert (stages[4].iterations, stages[4].sw, stages[4].sigma, stages[4].sigma_min) == (100, 20, 1.0, 0.5)
