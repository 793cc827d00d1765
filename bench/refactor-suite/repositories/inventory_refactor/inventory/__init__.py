"""Stock keeping: items, warehouses and what they are worth."""

from inventory.models import Item, Warehouse
from inventory.stock import compute_stock_value, restock

__all__ = ["Item", "Warehouse", "compute_stock_value", "restock"]
