import inventory.stock as st
from inventory.models import Warehouse


def warehouse_summary(warehouse: Warehouse) -> str:
    value = st.compute_stock_value(warehouse.items.values())
    return f"{warehouse.name}: {len(warehouse.items)} items worth ${value:,.2f}"


def item_lines(warehouse: Warehouse) -> list[str]:
    lines = []
    for item in warehouse.items.values():
        value = item.quantity * item.price
        lines.append(f"{item.name}: {item.quantity} x ${item.price:,.2f} = ${value:,.2f}")
    return lines
