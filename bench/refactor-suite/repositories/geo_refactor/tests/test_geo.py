import pytest

from geo import haversine, route_length
from geo.nearby import within
from geo.routes import longest_leg

PARIS, LONDON, BERLIN = (48.8566, 2.3522), (51.5074, -0.1278), (52.52, 13.405)


def test_haversine():
    assert round(haversine(*PARIS, *LONDON)) == 344


def test_routes():
    assert round(route_length([PARIS, LONDON, BERLIN])) == 1275
    assert round(longest_leg([PARIS, LONDON, BERLIN])) == 932


def test_nearby():
    assert within(PARIS, {"london": LONDON, "berlin": BERLIN}, 500) == ["london"]


def test_bad_coordinates():
    with pytest.raises(ValueError):
        route_length([(91, 0), (0, 0)])
    with pytest.raises(ValueError):
        haversine(0, 200, 0, 0)
