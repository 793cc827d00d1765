import sys

from inventory.models import Warehouse
from inventory.reports import item_lines, warehouse_summary
from inventory.stock import compute_stock_value, restock


def main(argv: list[str]) -> int:
    warehouse = Warehouse("main")
    for spec in argv:
        name, quantity, price = spec.split(":")
        warehouse.add_item(name, int(quantity), float(price))
    restock(warehouse, minimum=5, batch=10)
    print(warehouse_summary(warehouse))
    print("\n".join(item_lines(warehouse)))
    print(f"total: {compute_stock_value(warehouse.items.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
