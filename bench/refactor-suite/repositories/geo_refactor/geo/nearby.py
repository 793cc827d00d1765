from geo import distance


def within(origin, places, radius_km):
    """Names of the places within `radius_km` of `origin`; places map names to (lat, lon)."""
    lat, lon = origin
    return sorted(
        name for name, (plat, plon) in places.items() if distance.haversine(lat, lon, plat, plon) <= radius_km
    )
