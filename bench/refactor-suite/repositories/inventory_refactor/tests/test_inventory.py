from inventory import Warehouse, compute_stock_value, restock
from inventory.reports import item_lines, warehouse_summary


def sample() -> Warehouse:
    warehouse = Warehouse("north")
    warehouse.add_item("bolt", 2, 0.5)
    warehouse.add_item("nut", 10, 0.25)
    return warehouse


def test_value():
    assert compute_stock_value(sample().items.values()) == 3.5


def test_restock_brings_low_items_up():
    warehouse = sample()
    assert [item.name for item in restock(warehouse, minimum=5, batch=10)] == ["bolt"]
    assert warehouse.items["bolt"].quantity == 12


def test_reports():
    warehouse = sample()
    assert warehouse_summary(warehouse) == "north: 2 items worth $3.50"
    assert item_lines(warehouse)[0] == "bolt: 2 x $0.50 = $1.00"
