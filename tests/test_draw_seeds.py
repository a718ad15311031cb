"""Seeds of the posterior draws: unchanged for nets of up to 101 layers, distinct beyond."""

from core.models.network import draw_seed


def test_draw_seeds_keep_the_old_formula_below_101_layers():
    for seed, draw, layer in [(0, 0, 0), (3, 7, 2), (12345, 99, 100)]:
        assert draw_seed(seed, draw, layer) == (seed * 1_000_003 + draw) * 101 + layer


def test_draw_seeds_of_deep_nets_do_not_collide():
    seeds = [draw_seed(s, r, layer) for s in range(3) for r in range(40) for layer in range(250)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= value < 2**64 for value in seeds)
    # The old formula gave layer 101 of draw 0 the seed of layer 0 of draw 1.
    assert draw_seed(0, 0, 101) != draw_seed(0, 1, 0)
