from geo.distance import haversine
from geo.routes import route_length

__all__ = ["haversine", "route_length"]
