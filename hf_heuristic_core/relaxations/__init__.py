"""How mask values are drawn from learned logits: hard concrete (the Heuristic Core recipe)."""
