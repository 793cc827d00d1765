import math

EARTH_RADIUS_KM = 6371.0


def haversine(lat1, lon1, lat2, lon2):
    """Great-circle distance in kilometres between two points given in degrees."""
    if not -90 <= lat1 <= 90 or not -180 <= lon1 <= 180:
        raise ValueError(f"not a coordinate: {lat1}, {lon1}")
    if not -90 <= lat2 <= 90 or not -180 <= lon2 <= 180:
        raise ValueError(f"not a coordinate: {lat2}, {lon2}")
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi, dlambda = math.radians(lat2 - lat1), math.radians(lon2 - lon1)
    a = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(a))
