from geo.distance import haversine as dist


def route_length(points):
    """Length in kilometres of a route through `points`, (lat, lon) pairs in degrees."""
    for lat, lon in points:
        if not -90 <= lat <= 90 or not -180 <= lon <= 180:
            raise ValueError(f"not a coordinate: {lat}, {lon}")
    return sum(dist(a[0], a[1], b[0], b[1]) for a, b in zip(points, points[1:]))


def longest_leg(points):
    legs = [dist(a[0], a[1], b[0], b[1]) for a, b in zip(points, points[1:])]
    return max(legs, default=0.0)
