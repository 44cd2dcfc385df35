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


def _plain_loop(x, amp, support, cycles, sw, settle, sigmas, beta=0.9):
    """HIO with ``settle`` ER iterations before each rms shrinkwrap, written with the physics functions alone."""
    import numpy as np

    from qora.phase.physics import modulus_project, support_update
    from qora.phase.support import shrinkwrap_update

    n = x.size
    for c in range(cycles):
        for i in range(sw):
            a, b = (0.0, 0.0) if i >= sw - settle else (1.0, -beta)
            w, _ = modulus_project(np.fft.fftn(x).astype(np.complex64), amp, 1 / np.sqrt(n))
            p = (np.fft.ifftn(w) * n).astype(np.complex64)  # the unscaled inverse transform
            x = support_update(x, p, support, a, b)
        support, _ = shrinkwrap_update(x, support, sigma=sigmas[c], threshold=0.25, statistic="rms")
    return x, support


def test_settle_runs_er_before_each_support_update():
    """``settle=3`` in a stage of sw=10: iterations 8-10 of each cycle are ER, then the support is updated from
    that object estimate; the engine's run equals the plain loop above, start and updates included."""
    import numpy as np

    from qora.phase import objects, reconstruct
    from qora.phase.physics import native_amplitude
    from qora.phase.solver import random_start

    obj, intensity = objects.simulate("triangle", 48)
    support = np.zeros((48, 48), bool)
    support[10:38, 10:38] = True
    recipe = "HIO(sw=10, settle=3, sigma=2, sigma_min=1, threshold=0.25, stat=rms)**30"
    result = reconstruct(intensity, support=support, recipe=recipe, backend="cpu", seed=4)
    amp = native_amplitude(intensity)
    x0 = random_start(amp, support, 4, 0)
    stage = Recipe.parse(recipe).stages[0]
    x, sup = _plain_loop(x0, amp, support, 3, 10, 3, [stage.sigma_at(u, 3) for u in range(3)])
    np.testing.assert_array_equal(result.support, sup)
    # 30 HIO iterations grow the transforms' rounding (NumPy's here, FFTW's or ducc0's there) to 4e-4 - 1.6e-3 of
    # the object, by which FFT library and which of FFTW's measured plans; without settle the run is 0.59 away
    assert np.abs(result.object - x).max() < 1e-2 * np.abs(x).max()
    # without settle the run differs: the updates read HIO's outside-support values
    plain = reconstruct(intensity, support=support, recipe=recipe.replace("settle=3, ", ""), backend="cpu", seed=4)
    assert np.abs(plain.object - x).max() > 0.2 * np.abs(x).max()


@pytest.mark.parametrize("bad,match", [("HIO(settle=3)**10", "needs shrinkwrap"), ("HIO(sw=5, settle=5)**10", "less than"),
                                       ("HIO(sw=5, settle=-1)**10", ">= 0"),
                                       ("ER(sw=5, settle=2, psf=gaussian)**10", "without psf")])
def test_settle_is_checked(bad, match):
    with pytest.raises(RecipeError, match=match):
        Recipe.parse(bad)
    assert str(Recipe.parse("HIO(sw=10, settle=3)**20")) == "HIO(sw=10, settle=3)**20"


def test_every_stage_kind_has_its_iteration_in_the_table():
    from qora.phase.recipe import Stage
    from qora.phase.stage_kinds import STAGE_KINDS

    stages = {"projection": Stage("HIO", 10), "ml": Stage("ML", 10),
              "partial-coherence": Stage("ER", 10, psf="gaussian"), "band": Stage("RAAR", 10, band=1.0)}
    assert {name: stage.kind for name, stage in stages.items()} == {name: name for name in stages}
    assert set(STAGE_KINDS) == set(stages)  # no kind without its iteration, no iteration without its kind
