from inventory.models import Item, Warehouse


def compute_stock_value(items):
    """The value of the items: quantity times price, summed."""
    return sum(item.quantity * item.price for item in items)


def restock(warehouse: Warehouse, minimum: int, batch: int) -> list[Item]:
    """Bring every item below `minimum` up by `batch`; the items restocked."""
    restocked = []
    for item in warehouse.items.values():
        if item.quantity < minimum:
            item.quantity += batch
            restocked.append(item)
    return restocked
