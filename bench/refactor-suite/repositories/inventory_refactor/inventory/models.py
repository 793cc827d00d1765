from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    quantity: int
    price: float


@dataclass
class Warehouse:
    name: str
    items: dict[str, Item] = field(default_factory=dict)

    def add_item(self, name, quantity, price):
        """Add an item, or more of one already stocked."""
        if name in self.items:
            self.items[name].quantity += quantity
        else:
            self.items[name] = Item(name, quantity, price)
        return self.items[name]
